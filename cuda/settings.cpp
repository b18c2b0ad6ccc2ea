// The CUDA backend's settings read from the environment (settings.h).
#include "settings.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace clade {
namespace cuda {

Settings Settings::from_env() {
  Settings s;
  const char* env = std::getenv("CLADE_CUDA_SYNC");
  s.sync_each_op = env && *env && std::strcmp(env, "0") != 0;
  const char* mma_env = std::getenv("CLADE_CUDA_MMA");
  s.use_mma = !(mma_env && std::strcmp(mma_env, "0") == 0);
  // Integer settings: a value that is not a whole number in range is
  // ignored.
  auto env_int = [](const char* name, long lo, long hi, int32_t& out) {
    const char* e = std::getenv(name);
    if (!e) return;
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    if (end != e && !*end && v >= lo && v <= hi) out = (int32_t)v;
  };
  env_int("CLADE_CUDA_MMA_MIN_ROWS", 1, kAttnRowsMmaMax, s.mma_min_rows);
  env_int("CLADE_CUDA_MMA_MIN_KEYS", 0, INT32_MAX, s.mma_min_keys);
  env_int("CLADE_CUDA_UNITS_PER_SM", 1, 64, s.units_per_sm);
  env_int("CLADE_CUDA_MMA_MIN_CHUNK", 128, 1 << 20, s.mma_min_chunk);
  env_int("CLADE_CUDA_MMA_UNITS_PER_SM", 0, 64, s.mma_units_per_sm);
  env_int("CLADE_CUDA_GEMV_MAX_ROWS", 0, kGemvMaxRows, s.gemv_max_rows);
  for (auto [name, flag] : {std::pair<const char*, bool*>{"CLADE_CUDA_ROPE_KV", &s.rope_kv},
                            {"CLADE_CUDA_SIDE", &s.use_side},
                            {"CLADE_CUDA_MMA_FOLD", &s.mma_fold},
                            {"CLADE_CUDA_MMA_REG", &s.mma_reg},
                            {"CLADE_CUDA_MMA_HILO", &s.mma_hilo},
                            {"CLADE_CUDA_PDL", &s.pdl},
                            {"CLADE_CUDA_WARP_MERGE", &s.warp_merge},
                            {"CLADE_CUDA_MMA_EXP2", &s.mma_exp2},
                            {"CLADE_CUDA_VERBOSE", &s.verbose},
                            {"CLADE_CUDA_PASS_TIMES", &s.pass_times},
                            {"CLADE_CUDA_PINNED_READ", &s.pinned_read},
                            {"CLADE_CUDA_GEMV_ARGMAX", &s.gemv_argmax},
                            {"CLADE_CUDA_GEMV_MERGE", &s.gemv_merge},
                            {"CLADE_CUDA_WIDEN_QUANT", &s.widen_quant}})
    if (const char* e = std::getenv(name)) *flag = std::strcmp(e, "0") != 0;
  s.mma_kernel = !s.mma_reg ? kMmaWmma : s.mma_hilo ? kMmaReg : kMmaRegSingle;
  env_int("CLADE_CUDA_MMA_ROWS", kAttnRowsMma, kAttnRowsMmaMax, s.mma_rows);
  env_int("CLADE_CUDA_FUSE_MAX_PARTS", 0, INT32_MAX, s.fuse_max_parts);
  if (s.mma_kernel == kMmaWmma || s.mma_rows != kAttnRowsMmaMax) s.mma_rows = kAttnRowsMma;
  const char* graphs_env = std::getenv("CLADE_CUDA_GRAPHS");
  s.use_graphs = !(graphs_env && std::strcmp(graphs_env, "0") == 0) && !s.sync_each_op;
  if (const char* pool_env = std::getenv("CLADE_CUDA_POOL_MB")) {  // (another value is ignored)
    char* end = nullptr;
    const long long mb = std::strtoll(pool_env, &end, 10);
    if (end != pool_env && !*end && mb >= 0 && mb <= (1ll << 30)) s.pool_mb = mb;
  }
  return s;
}

}  // namespace cuda
}  // namespace clade
