// Backends as plugins: the CUDA backend is its own shared object,
// libclade-cuda.so (cuda/plugin.cpp), that libclade opens at run time the
// first time a model asks for CUDA (lib/plugin.cpp). libclade itself links
// no CUDA library, so one build serves machines with and without the CUDA
// runtime, and a CPU-only caller pays nothing for it.
//
// The plugin and libclade share the C++ Backend interface (backend.h),
// which is not a stable ABI: a plugin works only with the libclade of the
// same build. Both compile kPluginBuildId, and the plugin refuses a host
// whose id differs.
//
// What the plugin needs of the core it gets from the host table below
// (the plugin compiles only backend.cpp of lib/, which has no state), so
// there is one copy of the quantization code and its tables. Errors: the
// entry point returns a status and a message; after that, the backend's
// operations throw clade::Error as every backend does. The plugin's
// Error and libclade's are the same class compiled twice; the C++ runtime
// (libstdc++, the Itanium ABI on Linux) matches a caught type by its
// name, so libclade's catch at the C boundary takes the plugin's throws.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "clade/clade.h"
#include "format/gguf.h"

namespace clade {

// The interface number is bumped whenever backend.h's Backend or the
// table below changes.
#define CLADE_BACKEND_INTERFACE 9
#define CLADE_PLUGIN_STR2(x) #x
#define CLADE_PLUGIN_STR(x) CLADE_PLUGIN_STR2(x)
// "clade 1.4.0 backend 9": the version and the interface, both of which
// must match.
constexpr const char* kPluginBuildId =
    "clade " CLADE_PLUGIN_STR(CLADE_VERSION_MAJOR) "." CLADE_PLUGIN_STR(CLADE_VERSION_MINOR) "." CLADE_PLUGIN_STR(
        CLADE_VERSION_PATCH) " backend " CLADE_PLUGIN_STR(CLADE_BACKEND_INTERFACE);

// The core functions a plugin calls, given by the host.
struct PluginHost {
  size_t size;           // sizeof(PluginHost) of the host
  const char* build_id;  // the host's kPluginBuildId
  void (*dequantize_row)(TensorType type, const void* src, float* dst, int64_t n);
  int64_t (*tensor_block_elems)(TensorType t);
  uint64_t (*tensor_row_bytes)(TensorType t, int64_t n);
  size_t (*kv_type_size)(clade_kv_type t);
};

// The one symbol a plugin exports. On success it returns a backend that
// the host owns (deleted through its virtual destructor, whose code is the
// plugin's: the host never closes the plugin); on failure nullptr, with
// *status set and the message (a "no CUDA device: ..." kind of sentence)
// written to msg, NUL-terminated within msg_size.
#define CLADE_CUDA_PLUGIN_ENTRY "clade_cuda_plugin_make"
using PluginMakeFn = Backend* (*)(const PluginHost* host, clade_status* status, char* msg, size_t msg_size);

// The plugin's file name, and the environment variable that names a file
// to use instead of searching (tests, relocated installs).
constexpr const char* kCudaPluginName = "libclade-cuda.so";
constexpr const char* kCudaPluginEnv = "CLADE_CUDA_PLUGIN";

}  // namespace clade
