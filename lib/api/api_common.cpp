// The C boundary's calls that belong to no handle: the version, status
// strings, the last error, the log callback, and measuring a device's peaks.
#include "api/handles.h"

#include <cstdio>
#include "base/log.h"
#include "backend/backend.h"

using namespace clade::api;

extern "C" {

int clade_version_number(void) { return CLADE_VERSION_NUMBER; }
const char* clade_version_string(void) { return CLADE_VERSION_STRING; }

const char* clade_status_string(clade_status s) {
  switch (s) {
    case CLADE_OK: return "ok";
    case CLADE_CACHE_FULL: return "cache full";
    case CLADE_STOPPED: return "stopped";
    case CLADE_BUFFER_SMALL: return "buffer too small";
    case CLADE_KV_BUDGET: return "kv budget reached";
    case CLADE_CONTEXT_FULL: return "context full";
    case CLADE_E_INVALID_ARG: return "invalid argument";
    case CLADE_E_NOMEM: return "out of memory";
    case CLADE_E_IO: return "i/o error";
    case CLADE_E_FORMAT: return "bad file format";
    case CLADE_E_UNSUPPORTED: return "unsupported";
    case CLADE_E_TOKEN: return "token outside the vocabulary";
    case CLADE_E_STATE: return "invalid state";
    case CLADE_E_BACKEND: return "backend error";
    case CLADE_E_UTF8: return "invalid UTF-8";
    case CLADE_E_MISMATCH: return "saved session does not match";
    case CLADE_E_INTERNAL: return "internal error";
  }
  return "unknown status";
}

const char* clade_last_error(void) { return clade::last_error_text().c_str(); }

void clade_set_log(clade_log_fn fn, void* user, clade_log_level min_level) {
  clade::set_log(fn, user, min_level);
}

clade_status clade_backend_measure_peaks(clade_backend backend, clade_device_peaks* peaks) {
  return guard([&]() -> clade_status {
    clade::abi::check_out(peaks);
    const int b = enum_value(backend);
    if (b == CLADE_BACKEND_CPU)
      return clade::with_message(CLADE_E_UNSUPPORTED,
                                 "the CPU backend has no device to measure (clade bench machine measures the CPU)");
    if (b != CLADE_BACKEND_CUDA) return clade::with_message(CLADE_E_INVALID_ARG, "unknown backend");
    const clade::Backend::Peaks p = clade::make_cuda_backend()->measure_peaks();
    clade_device_peaks full;
    std::memset(&full, 0, sizeof full);
    std::snprintf(full.device, sizeof full.device, "%s", p.device.c_str());
    full.copy_bytes_per_s = p.copy_bytes_per_s;
    full.f16_flop_per_s = p.f16_flop_per_s;
    clade::abi::write_out(peaks, full);
    return CLADE_OK;
  });
}

}  // extern "C"
