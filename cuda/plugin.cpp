// The plugin side of lib/plugin.h: libclade-cuda.so's one exported symbol,
// and the core functions the backend calls, forwarded to the host's table
// (so the plugin carries no second copy of the quantization code).
#include "backend/plugin.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "base/error.h"
#include "format/quant.h"

namespace clade {

std::unique_ptr<Backend> create_cuda_backend();  // cuda_backend.cpp

namespace {
const PluginHost* g_host = nullptr;  // set before any backend exists
}

void dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
  g_host->dequantize_row(type, src, dst, n);
}
int64_t tensor_block_elems(TensorType t) { return g_host->tensor_block_elems(t); }
uint64_t tensor_row_bytes(TensorType t, int64_t n) { return g_host->tensor_row_bytes(t, n); }
size_t kv_type_size(clade_kv_type t) { return g_host->kv_type_size(t); }

}  // namespace clade

namespace {
void put(char* msg, size_t size, const std::string& text) {
  if (!msg || size == 0) return;
  size_t n = std::min(size - 1, text.size());
  std::memcpy(msg, text.data(), n);
  msg[n] = '\0';
}
}  // namespace

extern "C" __attribute__((visibility("default"))) clade::Backend* clade_cuda_plugin_make(
    const clade::PluginHost* host, clade_status* status, char* msg, size_t msg_size) {
  clade_status dummy;
  if (!status) status = &dummy;
  if (!host || host->size < sizeof(clade::PluginHost) || !host->build_id ||
      std::strcmp(host->build_id, clade::kPluginBuildId) != 0) {
    *status = CLADE_E_UNSUPPORTED;
    put(msg, msg_size,
        std::string("the CUDA plugin is from another build of clade (plugin: ") + clade::kPluginBuildId +
            ", library: " + (host && host->build_id ? host->build_id : "unknown") + ")");
    return nullptr;
  }
  clade::g_host = host;
  try {
    std::unique_ptr<clade::Backend> be = clade::create_cuda_backend();
    *status = CLADE_OK;
    return be.release();
  } catch (const clade::Error& e) {
    *status = e.status();
    put(msg, msg_size, e.what());
  } catch (const std::bad_alloc&) {
    *status = CLADE_E_NOMEM;
    put(msg, msg_size, "out of memory creating the CUDA backend");
  } catch (const std::exception& e) {
    *status = CLADE_E_BACKEND;
    put(msg, msg_size, e.what());
  }
  return nullptr;
}
