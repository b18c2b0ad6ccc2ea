// The operations every compute backend provides. The forward pass
// (lib/forward.cpp) is written once against this interface; the CPU backend
// (lib/cpu/) is always built, the CUDA backend (cuda/) when enabled, as a
// plugin that libclade opens at run time (lib/plugin.h).
//
// Pointers passed to these operations are in the backend's memory (host
// memory for the CPU backend, device memory for CUDA), obtained from
// alloc(). Weights are uploaded once at load time with upload_weight().
// Layouts: activations are row-major [rows][width] float32; KV spans as
// lib/kv_layout.h defines them (one definition for the host and CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "clade/clade.h"
#include "format/gguf.h"
#include "backend/cost.h"
#include "backend/kv_layout.h"

namespace clade {

// A weight matrix [n_out][n_in] (GGUF ne0 = n_in), rows contiguous, in its
// file type.
struct Weight {
  TensorType type = TensorType::F32;
  const void* data = nullptr;
  int64_t n_in = 0;
  int64_t n_out = 0;
};

struct RopeParams {
  int32_t head_dim = 0;
  bool neox = false;            // pairs (i, i + d/2) instead of (2i, 2i+1)
  float pos_scale = 1.0f;       // linear scaling: position * pos_scale
  const float* inv_freq = nullptr;  // [head_dim/2], scaling applied (Model::rope: host memory)
};

size_t kv_type_size(clade_kv_type t);

// The largest head dimension every backend's attention and RoPE take (the
// largest of the Llama family is 128); models above it are refused at load.
constexpr int32_t kMaxHeadDim = 256;

// One attention problem: query rows against the keys [0, len) of one KV
// head of a span (kv: that head's [2 * cap][head_dim], see the layout above;
// the part of a span from a block boundary on is itself a span). Row r is
// q[rows[r]] (each a head_dim vector). Row r sees the first limit[r] keys
// of the span (limit == nullptr: all len keys); a row
// that sees none gives lse = -inf and o = 0.
//
// Tree masks (token trees of speculative decoding, several continuations
// of a sequence evaluated in one pass): with mask not null, row r sees key
// j < limit[r] only when j < mask_base or bit (j - mask_base) of mask[r]
// is set (its ancestors in the tree and itself); limit[r] <= mask_base +
// 64. Outputs: o [n_rows][head_dim]
// (the softmax-weighted values) and lse [n_rows] (natural-log
// log-sum-exp of the scaled scores, in fp64: an fp32 lse of magnitude ~10
// carries an absolute error of ~5e-7, which the merge turns into a relative
// error of the weights that doubles the attention error; measured in
// tests/test_attention.cpp).
//
// Tails (only for a backend whose attention_tails() is true): after the
// span's keys, rows [row0, row1) of the problem go on over the keys of a
// second span of the same element type, row r seeing its first
// limit[r - row0] of them, in the same softmax: o and lse are over both.
// This is how a sequence's own tokens join the problem of the node above
// them, so that its rows need no second partial and no merge (lib/plan.h).
// A problem's tails are in order of their rows and do not overlap.
struct AttnTail {
  const void* kv = nullptr;  // one head of a span, in layer 0
  int64_t layer_stride = 0;  // bytes from one layer's head to the next's
  int32_t cap = 0;
  int32_t row0 = 0, row1 = 0;
  const int32_t* limit = nullptr;  // [row1 - row0], each <= cap
  const uint64_t* mask = nullptr;  // [row1 - row0] or nullptr: a tree mask (above)
  int32_t mask_base = 0;
};

struct AttnProblem {
  const int32_t* rows = nullptr;
  int32_t n_rows = 0;
  const void* kv = nullptr;  // one head of a span, in layer 0
  int64_t layer_stride = 0;  // bytes from one layer's head to the next's
  int32_t cap = 0;           // the span's capacity (len <= cap)
  int32_t len = 0;
  const int32_t* limit = nullptr;
  const uint64_t* mask = nullptr;  // [n_rows] or nullptr: a tree mask (above)
  int32_t mask_base = 0;
  float* o = nullptr;
  double* lse = nullptr;
  const AttnTail* tails = nullptr;
  int32_t n_tails = 0;
};

// The attention problems of one forward pass of one KV element type. They
// are the same in every layer but for their KV: a problem's (and a tail's)
// kv is its layer-0 head, layer l's is kv + l * layer_stride bytes. This is
// the attention problem's only form between the plan (lib/plan.h, which
// builds these once per pass) and a backend (which turns them into its own
// work items once per pass, in attention_prepare).
struct AttnSet {
  clade_kv_type type = CLADE_KV_F16;
  const AttnProblem* problems = nullptr;
  size_t n_problems = 0;
};

// Where one sequence's new K and V go in a pass: the pass's tokens
// [tok0, tok0 + n) to positions [start, start + n) of the span kv (head 0
// of layer 0; layer l's is kv + l * layer_stride bytes), of the given type
// and capacity.
struct KvDest {
  void* kv = nullptr;
  int64_t layer_stride = 0;
  int64_t tok0 = 0;
  int32_t capacity = 0;
  int32_t start = 0;
  int32_t n = 0;
  int32_t type = CLADE_KV_F16;  // clade_kv_type
};

// A backend's attention of one pass, prepared: its work items, partial
// buffers and (CUDA) device copies of the problems, made once per pass by
// attention_prepare and run per layer by attention_run. Owned by whoever
// runs passes (one per cache and one per tree: lib/forward.h), created by
// the backend, reused from pass to pass (it grows, never shrinks).
class AttnWork {
 public:
  virtual ~AttnWork() = default;
  uint64_t grows = 0;  // times its buffers had to grow (workspace counters)
  // The pass's KV destinations, as kv_write_prepare keeps them for the
  // default kv_write_run (a backend with its own keeps its own copy).
  std::vector<KvDest> kv_dests;
};

// Merge list: output row i combines the partial rows
// part_rows[part_begin[i] .. part_begin[i+1]) of (part_o [.][head_dim],
// part_lse [.]): out[i] = sum_j exp(lse_j - L) * o_j with
// L = logsumexp_j lse_j, in fp32. A row with no visible key gets 0.
struct MergeList {
  int64_t n_out_rows = 0;
  const int32_t* part_begin = nullptr;  // [n_out_rows + 1]
  const int32_t* part_rows = nullptr;
  const float* part_o = nullptr;
  const double* part_lse = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  virtual void* alloc(size_t bytes) = 0;  // throws Error(CLADE_E_NOMEM)
  virtual void release(void* p) = 0;
  virtual void copy_to(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_from(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Make a weight usable by matmul; returns the backend's view (the CPU
  // backend uses the mapping in place).
  virtual Weight upload_weight(const Weight& host) = 0;

  // y[n][n_out] = x[n][n_in] * W^T
  virtual void matmul(const Weight& w, const float* x, int64_t n, float* y) = 0;
  // Products of one input by several weights of the same n_in: y[i] =
  // x * w[i]^T for i < count, each exactly as matmul gives it. The arrays
  // w and y are the caller's for the call only (a backend that keeps the
  // call, as a recording does, copies them). The default calls matmul per
  // weight; the CPU backend runs few-row products (decode) as one parallel
  // region, with the input quantized once per format.
  virtual void matmul_many(const Weight* const* w, int count, const float* x, int64_t n, float* const* y);
  // out[i] = table row tokens[i], as f32
  virtual void embed(const Weight& table, const int32_t* tokens, int64_t n, float* out) = 0;
  // y = x / sqrt(mean(x^2) + eps) * weight, per row of dim
  virtual void rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                       float* y) = 0;
  // y[r] += bias, per row of dim
  virtual void add_bias(float* y, const float* bias, int64_t n, int64_t dim) = 0;
  // y += x, n elements
  virtual void add(float* y, const float* x, int64_t n) = 0;
  // gate = silu(gate) * up, n elements
  virtual void swiglu(float* gate, const float* up, int64_t n) = 0;
  // y += x w^T (y [n][w.n_out]): a product added to the residual stream.
  // tmp [n][w.n_out] is scratch, which an implementation may leave
  // unwritten. The default is matmul into tmp then add; the CUDA backend
  // adds inside the product.
  virtual void matmul_add(const Weight& w, const float* x, int64_t n, float* y, float* tmp);
  // matmul_many of rmsnorm(x) (x [n][dim], norm weight [dim], eps; the
  // weights' n_in == dim): the norm before attention and before the
  // output. xn [n][dim] is scratch, which an implementation may leave
  // unwritten. The default is rmsnorm into xn then matmul_many; the CUDA
  // backend norms inside its few-row products, with rmsnorm's numbers.
  virtual void norm_matmul_many(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* xn,
                                const Weight* const* w, int count, float* const* y);
  // norm_matmul_many of the one weight w into y [n][w.n_out], then argmax
  // of y into out [n]: a step's logits and its greedy tokens. The default
  // is those two calls; the CUDA backend picks the tokens inside its
  // few-row product, with argmax's answers.
  virtual void norm_matmul_argmax(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* xn,
                                  const Weight& w, float* y, int32_t* out);
  // rmsnorm then matmul_swiglu (below) likewise: the norm before the FFN.
  virtual void norm_matmul_swiglu(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* xn,
                                  const Weight& w_gate, const Weight& w_up, float* gate, float* up);
  // The FFN's input half: gate [n][N] = silu(x w_gate^T) * (x w_up^T), N
  // the weights' n_out (both of x's n_in). up [n][N] is scratch, which an
  // implementation may leave unwritten. The default is matmul_many of the
  // two then swiglu; the CUDA backend runs few-row products of 16-bit
  // weights as one launch, with the results of its own matmul_many and
  // swiglu.
  virtual void matmul_swiglu(const Weight& w_gate, const Weight& w_up, const float* x, int64_t n, float* gate,
                             float* up);
  // out[r] = the index of row r's largest element of x [n][dim], the
  // lowest index among equal ones; NaN elements are passed over, and a row
  // with no element above -inf gives -1. The greedy token of each logits
  // row, found where the logits are, so that only the indices come back.
  virtual void argmax(const float* x, int64_t n, int64_t dim, int32_t* out) = 0;
  // Each row's k highest elements (1 <= k <= min(dim, topk_max())), most
  // first, into idx and val [n][k]: a NaN above every number, then by value
  // (-0 and +0 equal), equal ones by the lower index; val holds the row's
  // own floats (top_k_rows, sampler.h). A step's candidates for top-k
  // sampling (Sampler::sparse_k), found where the logits are, so that k
  // tokens and logits come back instead of the row. The CPU backend's is
  // top_k_rows itself.
  virtual void topk(const float* x, int64_t n, int64_t dim, int32_t k, int32_t* idx, float* val) = 0;
  virtual int32_t topk_max() const { return INT32_MAX; }
  // topk after a token mask (structured output's, the sampler's first
  // stage): row r where row_masked[r] is nonzero as if the elements whose
  // bit is clear in masks [n][(dim + 31) / 32] (host memory; bit t % 32 of
  // word t / 32) were -inf, other rows as topk. Asked only of a backend
  // whose topk_masks() is true; the others' masked steps read whole rows.
  virtual bool topk_masks() const { return false; }
  virtual void topk_masked(const float* x, int64_t n, int64_t dim, int32_t k, const uint32_t* masks,
                           const uint8_t* row_masked, int32_t* idx, float* val);
  // rotate x [n][n_heads][head_dim] in place; pos [n] and p.inv_freq in
  // backend memory (uploaded once per pass and once per model)
  virtual void rope(float* x, int64_t n, int32_t n_heads, const int32_t* pos, const RopeParams& p) = 0;
  // rope of q [n][n_heads] and k [n][kv_heads] (heads of p.head_dim) at the
  // same positions: the default calls rope twice; the CUDA backend rotates
  // both in one launch.
  virtual void rope_qk(float* q, int32_t n_heads, float* k, int32_t kv_heads, int64_t n, const int32_t* pos,
                       const RopeParams& p);
  // Store n tokens' K and V ([n][kv_heads][head_dim] f32) into a span of
  // one layer (kv_dst: head 0) at positions start .. start+n-1.
  virtual void kv_write(void* kv_dst, clade_kv_type type, int32_t capacity, int32_t kv_heads,
                        int32_t head_dim, int32_t start, const float* k, const float* v, int64_t n) = 0;
  // Every sequence's kv_write of a pass in one call per layer: once per
  // pass, the destinations (host memory, checked against their spans'
  // capacities by the caller); per layer, k and v [tokens][kv_heads]
  // [head_dim] f32 of that layer stored to each destination's layer. The
  // defaults keep the list in the work and call kv_write per destination;
  // the CUDA backend stores every destination in one launch.
  virtual void kv_write_prepare(AttnWork& work, const KvDest* dests, size_t n);
  virtual void kv_write_run(AttnWork& work, int layer, int32_t kv_heads, int32_t head_dim, const float* k,
                            const float* v);
  // rope_qk of q [n][n_heads] and k [n][kv_heads] (heads of head_dim,
  // p.head_dim of them rotated), then kv_write_run of the rotated k and v:
  // the default calls both; the CUDA backend does both in one launch, with
  // the same numbers.
  virtual void rope_kv_write(AttnWork& work, int layer, int32_t head_dim, float* q, int32_t n_heads, float* k,
                             const float* v, int32_t kv_heads, int64_t n, const int32_t* pos, const RopeParams& p);
  // Copy keys [src_at, src_at + n) of one head of a span (src, capacity src_cap) to
  // positions [dst_at, dst_at + n) of one head of another (dst, dst_cap),
  // K and V. This default serves the row layout above with copy(); a
  // backend that lays out K otherwise within a block (the CPU backend,
  // lib/cpu/kernels.h) overrides it. kv_write, attention and kv_copy are
  // the only readers and writers of a span's K.
  virtual void kv_copy(void* dst, int32_t dst_cap, int32_t dst_at, const void* src, int32_t src_cap, int32_t src_at,
                       int32_t n, int32_t head_dim, clade_kv_type type);
  // Whether attention takes problems with tails (AttnTail above).
  virtual bool attention_tails() const { return false; }
  // The cost model the plan uses to choose shared or flat per span, with
  // this backend's own constants (lib/cost.h).
  virtual const AttnCost& attention_cost() const = 0;
  virtual std::unique_ptr<AttnWork> make_attn_work() = 0;
  // Once per pass: split the sets' problems (scores scaled by `scale`) into
  // the backend's work items. sets and the problems they point to must stay
  // unchanged until the last attention_run of the pass.
  virtual void attention_prepare(AttnWork& work, int32_t head_dim, float scale, const AttnSet* sets,
                                 size_t n_sets) = 0;
  // Per layer: solve every problem of the prepared pass with layer's KV
  // and the queries q [tokens][n_heads][head_dim] of that layer.
  virtual void attention_run(AttnWork& work, int layer, const float* q) = 0;
  // One set in layer 0, prepared and run at once (tests and benchmarks).
  void attention(const float* q, int32_t head_dim, float scale, clade_kv_type type, const AttnProblem* problems,
                 size_t n_problems);
  // out [n_out_rows][head_dim]
  virtual void merge(const MergeList& list, int32_t head_dim, float* out) = 0;
  // merge into out, then matmul_add(w, out, n, y, tmp) (out's rows are the
  // product's: list.n_out_rows * head_dim == n * w.n_in): a layer's
  // attention rows and its output product. The default is those two
  // calls; the CUDA backend's few-row product can merge the rows itself.
  virtual void merge_matmul_add(const MergeList& list, int32_t head_dim, float* out, const Weight& w, int64_t n,
                                float* y, float* tmp);

  // A pass's operations as one unit (the CUDA backend's graphs: a step's
  // hundreds of launches replayed as one). Between pass_begin and pass_end
  // the caller (Forward::run) calls the same operations with the same
  // arguments whenever `key` is the same: key hashes every pointer, size and
  // count it passes them; what changes from pass to pass (tokens,
  // positions, KV destinations, attention tables) is read from backend
  // memory, filled before pass_begin (kv_write_prepare, attention_prepare,
  // copy_to). The backend adds its own state to the key (the work's tables
  // and counts, its scratch buffers).
  //   replayed: the backend enqueued the whole pass itself; the caller
  //     skips the operations and does not call pass_end.
  //   plain, recording: the caller calls the operations (while recording
  //     they are kept, not run: the caller calls nothing else of the
  //     library meanwhile, so no user callback), then pass_end(true) or,
  //     if one of them threw, pass_end(false). pass_end returns false when
  //     the operations did not run (a recording given up on the way, or one
  //     that threw, which may have been the recording's doing): the caller
  //     then calls them again as a plain pass, and an exception of that
  //     run is the pass's. After a plain pass that threw it returns true.
  // The defaults run every pass plainly.
  enum class PassMode { plain, recording, replayed };
  // The running hash that builds a pass's key (Forward::run's part, then
  // the backend's own state on top).
  struct PassKey {
    uint64_t h = 0xcbf29ce484222325ull;
    void add(uint64_t v) { h = (h ^ v) * 0x100000001b3ull + (h >> 29); }
    void add(const void* p) { add((uint64_t)(uintptr_t)p); }
  };
  // The device's ceilings (clade_backend_measure_peaks): a 1 GiB
  // device-to-device copy and an 8192^3 F16 product, medians of 10 runs.
  // The default (a backend with no device of its own) throws
  // CLADE_E_UNSUPPORTED.
  struct Peaks {
    std::string device;
    double copy_bytes_per_s = 0, f16_flop_per_s = 0;
  };
  virtual Peaks measure_peaks();
  // The settings in effect now, after the backend's probes and fallbacks,
  // as one line (what CLADE_CUDA_VERBOSE=1 prints for the CUDA backend;
  // tests check that the kernel they compare is the one asked for). Empty
  // where a backend has none to tell.
  virtual std::string settings() const { return {}; }

  virtual PassMode pass_begin(const AttnWork& work, uint64_t key) {
    (void)work;
    (void)key;
    return PassMode::plain;
  }
  virtual bool pass_end(bool ok) {
    (void)ok;
    return true;
  }
};

std::unique_ptr<Backend> make_cpu_backend(int n_threads);
// The CUDA backend, from the plugin libclade-cuda.so (lib/plugin.h),
// opened the first time it is asked for. Throws Error naming what is
// missing: the plugin (CLADE_E_UNSUPPORTED), the CUDA runtime or a usable
// device (CLADE_E_BACKEND).
std::unique_ptr<Backend> make_cuda_backend();

}  // namespace clade
