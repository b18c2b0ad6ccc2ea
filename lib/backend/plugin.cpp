// The host side of lib/plugin.h: finding, opening and asking the CUDA
// plugin for a backend. Built in every configuration; a build without CUDA
// has no plugin to find, and says so.
#include "backend/plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "base/error.h"
#include "format/quant.h"

namespace clade {
namespace {

bool is_file(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The folder of the object this code is linked into: libclade.so for
// callers of the library, the executable for white-box tests.
std::string own_folder() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&own_folder), &info) == 0 || !info.dli_fname) return "";
  std::string p = info.dli_fname;
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? "" : p.substr(0, slash);
}

struct Loaded {
  PluginMakeFn make = nullptr;
  clade_status status = CLADE_OK;  // when make is null: why
  std::string error;
};

// Opens the plugin once per process and keeps it open: the backends it
// makes run its code until the process ends.
Loaded open_plugin() {
  Loaded out;
  std::string path, tried;
  if (const char* env = std::getenv(kCudaPluginEnv); env && *env) {
    path = env;
    if (!is_file(path)) {
      out.status = CLADE_E_UNSUPPORTED;
      out.error = std::string("no CUDA plugin: ") + kCudaPluginEnv + " names " + path + ", which is not a file";
      return out;
    }
  } else {
    const std::string folder = own_folder();
    if (!folder.empty() && is_file(folder + "/" + kCudaPluginName)) {
      path = folder + "/" + kCudaPluginName;
    } else {
      // The dynamic linker's search (LD_LIBRARY_PATH, run paths, the
      // ldconfig cache) by bare name.
      path = kCudaPluginName;
      tried = folder.empty() ? "" : " (looked beside the library, in " + folder + ", and the library path)";
    }
  }
  dlerror();
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = dlerror();
    std::string reason = why ? why : "unknown";
    out.status = CLADE_E_UNSUPPORTED;
    if (path == kCudaPluginName && reason.find(kCudaPluginName) != std::string::npos &&
        reason.find("No such file") != std::string::npos) {
      out.error = std::string("no CUDA plugin: ") + kCudaPluginName + " was not found" + tried +
                  "; this build of clade may have no CUDA backend";
    } else if (reason.find("libcudart") != std::string::npos || reason.find("libcublas") != std::string::npos) {
      out.status = CLADE_E_BACKEND;
      out.error = "no CUDA runtime: the CUDA plugin " + path + " needs a library that is missing: " + reason;
    } else {
      out.error = "the CUDA plugin " + path + " could not be loaded: " + reason;
    }
    return out;
  }
  void* sym = dlsym(h, CLADE_CUDA_PLUGIN_ENTRY);
  if (!sym) {
    out.status = CLADE_E_UNSUPPORTED;
    out.error = path + " is not a clade CUDA plugin (no symbol " CLADE_CUDA_PLUGIN_ENTRY ")";
    return out;  // left open: closing a library that is not ours may run its destructors
  }
  out.make = reinterpret_cast<PluginMakeFn>(sym);
  return out;
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = open_plugin(); });
  if (!loaded.make) fail(loaded.status, loaded.error);

  static const PluginHost host = {sizeof(PluginHost), kPluginBuildId, &dequantize_row, &tensor_block_elems,
                                  &tensor_row_bytes, &kv_type_size};
  clade_status status = CLADE_E_BACKEND;
  char msg[512] = "";
  Backend* be = loaded.make(&host, &status, msg, sizeof msg);
  if (!be) fail(status == CLADE_OK ? CLADE_E_BACKEND : status, msg[0] ? msg : "the CUDA plugin gave no backend");
  return std::unique_ptr<Backend>(be);
}

}  // namespace clade
