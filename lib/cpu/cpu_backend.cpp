// The CPU backend: one thread pool owns the cores; every product runs in
// the pool's own kernels (lib/cpu/kernels.cpp: register-blocked weight
// products that widen half, bf16 and quantized weights, and the attention
// kernels), so the library links no BLAS. Operations run one at a time
// (mu_), so passes of several caches or trees may call in from several
// threads. Attention is prepared once per pass (attention_prepare cuts the
// plan's problems into work items, kept in the caller's CpuAttnWork) and
// run per layer (attention_run), allocating nothing once the work's
// buffers have grown.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "backend/backend.h"
#include "base/error.h"
#include "base/pages.h"
#include "cpu/sampler_simd.h"
#include "cpu/topk.h"
#include "cpu/kernels.h"
#include "cpu/kernels_q.h"
#include "cpu/threadpool.h"

namespace clade {

namespace {

// Output rows of W per matmul work item.
constexpr int64_t kTile = 64;
// Up to this many input rows, matmul reads each weight row once and does
// the dot products directly (bandwidth-bound decode); above it, input rows
// are taken in groups of kXGroup against tiles of W (the register-blocked
// gemm kernel; quantized tiles are widened to f32 first).
constexpr int kDirectRows = 4;
// Input rows per matmul work item for larger batches.
constexpr int64_t kXGroup = 64;
// Keys per attention block: a KV block of the span layout (its K rows and
// its V rows are contiguous).
constexpr int kAttnBlock = kKVBlock;
// Keys per attention work item at least (when a span is split).
constexpr int kAttnMinChunk = 256;
// Query rows per work item: a few-row problem is one item; a many-row
// problem is cut into items of up to kAttnItemRows rows, each reading a
// key block once for all its rows and passing over them in groups of
// kAttnGroupRows (scores and probabilities of a group: 32 KiB).
constexpr int kAttnItemRows = 256;
// A problem is cut into blocks of rows rather than chunks of keys when the
// blocks keep at least this many rows.
constexpr int kAttnRowSplitMin = 16;
constexpr int kAttnGroupRows = 64;
// The step's attention is cut into about this many items per thread, so
// that a slow core (other tenants) delays the end by a small part.
constexpr int kAttnItemsPerThread = 4;

// Row `row` of one head of a span (V rows by kv_v_row; a K block starts at
// kv_k_row of its first key), rows of hd elements of es bytes.
inline const uint8_t* span_row(const void* kv, int64_t row, int hd, size_t es) {
  return static_cast<const uint8_t*>(kv) + (size_t)row * hd * es;
}

// Layer's head of a span whose layer-0 head is kv (AttnSet).
inline const uint8_t* layer_kv(const void* kv, int64_t layer_stride, int layer) {
  return static_cast<const uint8_t*>(kv) + layer * layer_stride;
}

// Keys [c0, end) of one head of a span (kv, capacity cap) for an attention
// item's rows [ra, rb); row r sees the first lim(r) keys of the span.
struct KeyRun {
  const uint8_t* kv;
  int cap, c0, end, ra, rb;
  const int32_t* limit;  // [rb - ra], or nullptr: every row sees len
  int len;
  const uint64_t* mask;  // [rb - ra], or nullptr: a tree mask (backend.h)
  int mask_base;
  int lim(int r) const { return limit ? limit[r - ra] : len; }
  const uint8_t* at(int64_t row, int hd, size_t es) const { return span_row(kv, row, hd, es); }
};

struct ThreadScratch {
  std::vector<float> tile;   // kTile * n_in widened weights
  std::vector<uint16_t> tile16;  // the same rounded to bf16 (the bf16 dot-product path)
  int64_t tiled = -1;        // which tile of the current matmul it holds
  std::vector<uint8_t> pack;  // matmul's packed tile (dot-product path)
  int64_t packed = -1;        // which tile of the current matmul it holds
  std::vector<float> row;    // one widened row
  std::vector<float> q, s, acc, m, l;
  std::vector<KeyRun> runs;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads) : k_(cpu_kernels()), pool_(n_threads), scratch_((size_t)pool_.size()) {}
  const char* name() const override { return "cpu"; }
  bool attention_tails() const override { return true; }
  // The defaults of lib/cost.h: measured on the development machine (2 Zen
  // 4 cores) with build/bench/bench_attention (attention alone, f16 KV,
  // head dim 64): streaming KV reaches about 35 GB/s (one row per KV head,
  // flat), many rows about 150 GFLOP/s, few rows (2 to 8) about 120-145
  // GFLOP/s from cache; see bench/README.md. (Measured with keys in rows;
  // keys in tiles made both cases 5-10% faster from cache, in the same
  // proportion, so the choice between them is the same.)
  const AttnCost& attention_cost() const override { return cost_; }

  void* alloc(size_t bytes) override {
    // Large buffers (KV spans, which attention streams) get huge pages.
    void* p = alloc_streamed(bytes);
    if (!p) fail(CLADE_E_NOMEM, "cpu: cannot allocate " + std::to_string(bytes) + " bytes");
    return p;
  }
  void release(void* p) override { std::free(p); }
  void copy_to(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_from(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  Weight upload_weight(const Weight& host) override { return host; }

  void matmul(const Weight& w, const float* x, int64_t n, float* y) override;
  void matmul_many(const Weight* const* w, int count, const float* x, int64_t n, float* const* y) override;
  void embed(const Weight& table, const int32_t* tokens, int64_t n, float* out) override;
  void rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y) override;
  void add_bias(float* y, const float* bias, int64_t n, int64_t dim) override;
  void add(float* y, const float* x, int64_t n) override;
  void swiglu(float* gate, const float* up, int64_t n) override;
  void argmax(const float* x, int64_t n, int64_t dim, int32_t* out) override;
  void topk(const float* x, int64_t n, int64_t dim, int32_t k, int32_t* idx, float* val) override;
  bool topk_masks() const override { return true; }
  void topk_masked(const float* x, int64_t n, int64_t dim, int32_t k, const uint32_t* masks, const uint8_t* row_masked,
                   int32_t* idx, float* val) override;
  void rope(float* x, int64_t n, int32_t n_heads, const int32_t* pos, const RopeParams& p) override;
  void kv_write(void* kv_dst, clade_kv_type type, int32_t capacity, int32_t kv_heads, int32_t head_dim, int32_t start,
                const float* k, const float* v, int64_t n) override;
  void kv_copy(void* dst, int32_t dst_cap, int32_t dst_at, const void* src, int32_t src_cap, int32_t src_at,
               int32_t n, int32_t head_dim, clade_kv_type type) override;
  std::unique_ptr<AttnWork> make_attn_work() override;
  void attention_prepare(AttnWork& work, int32_t head_dim, float scale, const AttnSet* sets, size_t n_sets) override;
  void attention_run(AttnWork& work, int layer, const float* q) override;
  void merge(const MergeList& list, int32_t head_dim, float* out) override;

 private:
  // Split n elementwise items into chunks for the pool.
  template <typename F>
  void parallel_rows(int64_t n, int64_t min_per_item, F&& f) {
    int64_t items = std::min<int64_t>((int64_t)pool_.size() * 4, std::max<int64_t>(1, n / min_per_item));
    int64_t per = (n + items - 1) / items;
    pool_.run(items, [&](int64_t it, int) {
      int64_t a = it * per, b = std::min(n, a + per);
      if (a < b) f(a, b);
    });
  }
  // next_k: the keys the thread will likely read after this item (the
  // next unclaimed item's first block), fetched during the last block.
  void cut_problem(struct CpuAttnWork& w, const AttnProblem& p, TensorType kt, double item_work, size_t* part_floats,
                   size_t* part_rows) const;
  // layer: the KV of problem p (and its tails) is layer's.
  void attend_item(int tid, const float* q, int hd, float scale, TensorType kt, const AttnProblem& p, int layer,
                   int r0, int r1, int c0, int c1, bool tails, float* o, double* lse, FnRef<const void*()> next_k);

  // out = sum_j exp(lse_j - L) o_j over partial rows idx[0..n); returns L.
  double merge_row(const int32_t* idx, int n, const float* part_o, const double* part_lse, int hd, float* out) const {
    if (n == 1) {  // (what the sum below gives: a weight of exactly 1)
      const double l = part_lse[idx[0]];
      if (l == -std::numeric_limits<double>::infinity()) std::fill(out, out + hd, 0.0f);
      else std::memcpy(out, part_o + (size_t)idx[0] * hd, (size_t)hd * sizeof(float));
      return l;
    }
    double mx = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < n; j++) mx = std::max(mx, part_lse[idx[j]]);
    std::fill(out, out + hd, 0.0f);
    if (mx == -std::numeric_limits<double>::infinity()) return mx;
    double sum = 0;
    for (int j = 0; j < n; j++) sum += std::exp(part_lse[idx[j]] - mx);
    for (int j = 0; j < n; j++) {
      float w = (float)(std::exp(part_lse[idx[j]] - mx) / sum);
      if (w > 0) k_.axpy(out, part_o + (size_t)idx[j] * hd, w, hd);
    }
    return mx + std::log(sum);
  }

  const CpuKernels& k_;
  ThreadPool pool_;
  std::vector<ThreadScratch> scratch_;
  std::mutex mu_;  // one op at a time (trees of one model may step from several threads)
  const AttnCost cost_{};
  // Whether matmul takes w at n input rows through matmul_few (the weights
  // read once, each row by a dot product: decode at small batches).
  static bool few_rows(const Weight& w, int64_t n);
  // Those products for count weights in one parallel region (mu_ held).
  void matmul_few(const Weight* const* w, int count, const float* x, int64_t n, float* const* y);
  std::vector<int64_t> chunk_at_;  // matmul_few's runs of weight rows
  std::vector<int> chunk_w_;       // and the weight of each
  std::vector<size_t> mm_xq_at_;   // each weight's quantized input in mm_x_ (SIZE_MAX: none)
  std::vector<uint8_t> mm_x_;      // the input rows as bf16 or int8 (matmul_few, dot-product path)
  std::vector<float> mm_xd_;       // and the int8 rows' block scales
};

// The types whose products take the f32 input directly (the others
// quantize it or widen their own tiles).
bool direct_type(TensorType t) { return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16; }

TensorType kv_tensor_type(clade_kv_type t) {
  return t == CLADE_KV_F16 ? TensorType::F16 : t == CLADE_KV_BF16 ? TensorType::BF16 : TensorType::F32;
}

bool CpuBackend::few_rows(const Weight& w, int64_t n) {
  // Quantized weights at few rows: the input rows quantized once per block
  // (kernels_q.h), each weight row read once by the integer dot products.
  // CLADE_NO_QDOT=1 widens tiles to f32 instead (to compare the two).
  static const bool no_qdot = std::getenv("CLADE_NO_QDOT") != nullptr;
  return n >= 1 && n <= kDirectRows && (direct_type(w.type) || (!no_qdot && qdot_type(w.type)));
}

void CpuBackend::matmul_many(const Weight* const* w, int count, const float* x, int64_t n, float* const* y) {
  bool few = count > 0;
  for (int i = 0; i < count; i++) few = few && few_rows(*w[i], n) && w[i]->n_in == w[0]->n_in;
  if (!few) {
    for (int i = 0; i < count; i++) matmul(*w[i], x, n, y[i]);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  matmul_few(w, count, x, n, y);
}

void CpuBackend::matmul_few(const Weight* const* ws, int count, const float* x, int64_t n, float* const* ys) {
  const int64_t K = ws[0]->n_in;
  // The input quantized once per format (the K types share one, the
  // 32-element types another): a weight reuses an earlier one's. The
  // formats lie in mm_x_ in the order of their first weights.
  mm_xq_at_.assign((size_t)count, SIZE_MAX);
  size_t xbytes = 0;
  for (int i = 0; i < count; i++) {
    const TensorType t = ws[i]->type;
    if (direct_type(t)) continue;
    for (int j = 0; j < i && mm_xq_at_[(size_t)i] == SIZE_MAX; j++)
      if (!direct_type(ws[j]->type) && tensor_block_elems(ws[j]->type) == tensor_block_elems(t))
        mm_xq_at_[(size_t)i] = mm_xq_at_[(size_t)j];
    if (mm_xq_at_[(size_t)i] == SIZE_MAX) {
      mm_xq_at_[(size_t)i] = xbytes;
      xbytes += xq_row_bytes(t, K) * (size_t)n;
    }
  }
  if (mm_x_.size() < xbytes) mm_x_.resize(xbytes);
  for (size_t i = 0, next = 0; i < (size_t)count; i++) {  // each format at its first weight
    const TensorType t = ws[i]->type;
    if (direct_type(t) || mm_xq_at_[i] < next) continue;
    const size_t xs = xq_row_bytes(t, K);
    for (int64_t r = 0; r < n; r++) k_.x_quant(t, x + r * K, K, mm_x_.data() + next + (size_t)r * xs);
    next += xs * (size_t)n;
  }
  // Bandwidth-bound (decode at small batches): each item a contiguous run
  // of one weight's rows, long ones first (guided: a quarter of what is
  // left of all the weights per thread), down to kTile rows, so that each
  // thread streams long runs and the end still balances. When the
  // machine's memory is quick, two threads reading interleaved 128 KiB
  // pieces got about 48 GB/s and two long runs 58-61; in decode steps at
  // batch 1 this took the step from 7.36 to 6.80 ms (best of 8 interleaved
  // runs, 8% in the mean). Several weights in one region save the start
  // and the uneven end of a region per weight.
  chunk_at_.clear();
  chunk_w_.clear();
  const int64_t T = pool_.size();
  int64_t left = 0;
  for (int i = 0; i < count; i++) left += std::max<int64_t>(0, ws[i]->n_out);
  for (int i = 0; i < count; i++) {
    const int64_t N = ws[i]->n_out;
    for (int64_t o = 0; o < N;) {
      chunk_at_.push_back(o);
      chunk_w_.push_back(i);
      int64_t c = std::min<int64_t>(std::max<int64_t>(kTile, left / (4 * T) / kTile * kTile), 1 << 24);
      c = std::min(c, N - o);
      o += c;
      left -= c;
    }
  }
  pool_.run((int64_t)chunk_at_.size(), [&](int64_t it, int) {
    const int i = chunk_w_[(size_t)it];
    const Weight& w = *ws[i];
    const int64_t N = w.n_out, o0 = chunk_at_[(size_t)it];
    const bool more = (size_t)it + 1 < chunk_w_.size() && chunk_w_[(size_t)it + 1] == i;  // of this weight
    const int64_t rows = (more ? chunk_at_[(size_t)it + 1] : N) - o0;
    const uint64_t row_bytes = tensor_row_bytes(w.type, K);
    const uint8_t* base = static_cast<const uint8_t*>(w.data) + (uint64_t)o0 * row_bytes;
    if (direct_type(w.type)) k_.gemm(w.type, base, row_bytes, (int)rows, x, K, (int)n, K, ys[i] + o0, N);
    else k_.qdot(w.type, base, row_bytes, (int)rows, mm_x_.data() + mm_xq_at_[(size_t)i], (int)n, K, ys[i] + o0, N);
  });
}

void CpuBackend::matmul(const Weight& w, const float* x, int64_t n, float* y) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t K = w.n_in, N = w.n_out;
  const uint64_t row_bytes = tensor_row_bytes(w.type, K);
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  const bool direct = direct_type(w.type);
  if (n <= 0 || N <= 0) return;  // (the kernels take n >= 1)
  if (few_rows(w, n)) {
    const Weight* ws[1] = {&w};
    float* ys[1] = {y};
    return matmul_few(ws, 1, x, n, ys);
  }
  // Items: tiles of output rows x groups of input rows, so that both small
  // and large batches give every thread work.
  const int64_t tiles = (N + kTile - 1) / kTile;
  // The other quantized types take the bf16 path too, their tiles widened
  // and rounded to bf16 (relative 2^-9, far under the types' own error):
  // twice the F32 path's rate (Q4_K 92 against 198 GFLOP/s, one thread,
  // 512 x 1024 x 2816; the F32 path stays where the CPU lacks AVX512-BF16).
  const bool widen_bf16 = !direct && w.type != TensorType::Q8_0 && k_.gemm_bf16dot;
  const bool bf16dot = (w.type == TensorType::BF16 || widen_bf16) && k_.gemm_bf16dot;
  const bool q8dot = w.type == TensorType::Q8_0 && k_.gemm_q8dot;
  if (n > kDirectRows && (bf16dot || q8dot)) {
    // Dot-product instructions (kernels.h): the input rows narrowed once
    // (bf16, or int8 per 32-block), each thread packing a tile of weights
    // once for the groups of input rows it takes (items of a tile are
    // claimed one after another, so both threads share each tile's items).
    auto align64 = [](uint8_t* p) { return reinterpret_cast<uint8_t*>(((uintptr_t)p + 63) & ~(uintptr_t)63); };
    const int64_t kp = (K + 31) / 32 * 32, nb = K / 32;
    const size_t xbytes = (size_t)(n * kp) * (bf16dot ? 2 : 1);
    if (mm_x_.size() < xbytes + 64) mm_x_.resize(xbytes + 64);
    uint8_t* xa = align64(mm_x_.data());
    if (q8dot && mm_xd_.size() < (size_t)(n * nb)) mm_xd_.resize((size_t)(n * nb));
    float* xd = mm_xd_.data();
    parallel_rows(n, 8, [&](int64_t a, int64_t b) {
      for (int64_t j = a; j < b; j++) {
        if (bf16dot) k_.x_bf16(x + j * K, K, reinterpret_cast<uint16_t*>(xa) + j * kp, kp);
        else k_.x_q8(x + j * K, K, xa + j * kp, xd + j * nb);
      }
    });
    const TensorType pt = widen_bf16 ? TensorType::BF16 : w.type;  // the type packed
    const size_t pbytes = dot_pack_bytes(pt, (int)kTile, K) + 64;
    if (widen_bf16)
      for (ThreadScratch& t : scratch_) {
        if (t.tile.size() < (size_t)(kTile * K)) t.tile.resize((size_t)(kTile * K));
        if (t.tile16.size() < (size_t)(kTile * K)) t.tile16.resize((size_t)(kTile * K));
      }
    for (ThreadScratch& s : scratch_) s.packed = -1;
    const int64_t xgroups = (n + kXGroup - 1) / kXGroup;
    for (ThreadScratch& t : scratch_)  // every thread's, whichever take the tiles
      if (t.pack.size() < pbytes) t.pack.resize(pbytes);
    pool_.run(tiles * xgroups, [&](int64_t it, int tid) {
      ThreadScratch& s = scratch_[(size_t)tid];
      const int64_t t = it / xgroups, j0 = it % xgroups * kXGroup;
      const int64_t o0 = t * kTile, rows = std::min(N, o0 + kTile) - o0, nj = std::min(n, j0 + kXGroup) - j0;
      if (s.pack.size() < pbytes) s.pack.resize(pbytes);
      uint8_t* pack = align64(s.pack.data());
      if (s.packed != t) {
        if (widen_bf16) {
          for (int64_t o = 0; o < rows; o++) {
            k_.to_f32(w.type, base + (uint64_t)(o0 + o) * row_bytes, s.tile.data() + o * K, K);
            k_.x_bf16(s.tile.data() + o * K, K, s.tile16.data() + o * K, K);
          }
          k_.pack_dot(pt, reinterpret_cast<const uint8_t*>(s.tile16.data()), (uint64_t)K * 2, (int)rows, K, pack);
        } else {
          k_.pack_dot(w.type, base + (uint64_t)o0 * row_bytes, row_bytes, (int)rows, K, pack);
        }
        s.packed = t;
      }
      if (bf16dot)
        k_.gemm_bf16dot(pack, (int)rows, reinterpret_cast<const uint16_t*>(xa) + j0 * kp, kp, (int)nj, K,
                        y + j0 * N + o0, N);
      else
        k_.gemm_q8dot(pack, (int)rows, xa + j0 * kp, kp, xd + j0 * nb, nb, (int)nj, K, y + j0 * N + o0, N);
    });
    return;
  }
  const int64_t xgroups = n <= kDirectRows ? 1 : (n + kXGroup - 1) / kXGroup;
  if (!direct)
    for (ThreadScratch& t : scratch_) {
      if (t.tile.size() < (size_t)(kTile * K)) t.tile.resize((size_t)(kTile * K));
      t.tiled = -1;
    }
  pool_.run(tiles * xgroups, [&](int64_t it, int tid) {
    ThreadScratch& s = scratch_[(size_t)tid];
    int64_t t = it / xgroups, g = it % xgroups;
    int64_t o0 = t * kTile, rows = std::min(N, o0 + kTile) - o0;
    int64_t j0 = g * kXGroup, nj = xgroups == 1 ? n : std::min(n, j0 + kXGroup) - j0;
    const uint8_t* wt = base + (uint64_t)o0 * row_bytes;
    TensorType type = w.type;
    uint64_t stride = row_bytes;
    if (!direct) {  // quantized: widen the tile to f32 once per thread (its groups of x rows follow)
      if (s.tile.size() < (size_t)(kTile * K)) s.tile.resize((size_t)(kTile * K));
      if (s.tiled != t)
        for (int64_t o = 0; o < rows; o++) k_.to_f32(w.type, wt + (uint64_t)o * row_bytes, s.tile.data() + o * K, K);
      s.tiled = t;
      wt = reinterpret_cast<const uint8_t*>(s.tile.data());
      type = TensorType::F32;
      stride = (uint64_t)K * 4;
    }
    k_.gemm(type, wt, stride, (int)rows, x + j0 * K, K, (int)nj, K, y + j0 * N + o0, N);
  });
}

void CpuBackend::embed(const Weight& table, const int32_t* tokens, int64_t n, float* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t row_bytes = tensor_row_bytes(table.type, table.n_in);
  for (int64_t i = 0; i < n; i++)
    k_.to_f32(table.type, static_cast<const uint8_t*>(table.data) + (uint64_t)tokens[i] * row_bytes,
              out + i * table.n_in, table.n_in);
}

void CpuBackend::rmsnorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y) {
  std::lock_guard<std::mutex> lock(mu_);
  parallel_rows(n, 16, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; r++) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      float ss = k_.dot(xr, xr, dim);
      float inv = 1.0f / std::sqrt(ss / (float)dim + eps);
      for (int64_t i = 0; i < dim; i++) yr[i] = xr[i] * inv * weight[i];
    }
  });
}

void CpuBackend::add_bias(float* y, const float* bias, int64_t n, int64_t dim) {
  for (int64_t r = 0; r < n; r++) k_.axpy(y + r * dim, bias, 1.0f, dim);
}

void CpuBackend::add(float* y, const float* x, int64_t n) { k_.axpy(y, x, 1.0f, n); }

void CpuBackend::swiglu(float* gate, const float* up, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  parallel_rows(n, 4096, [&](int64_t a, int64_t b) { k_.silu_mul(gate + a, up + a, b - a); });
}

// The sampler's row scan (lib/sampler_simd.h, AVX-512, AVX2 or plain):
// its index is Backend::argmax's, the first maximum with NaN passed over,
// -1 when nothing is above -inf.
void CpuBackend::argmax(const float* x, int64_t n, int64_t dim, int32_t* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dim > INT32_MAX) fail(CLADE_E_UNSUPPORTED, "cpu: argmax: rows of over 2^31 elements");
  const smp::Kernels& sk = smp::kernels();
  parallel_rows(n, 1, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; r++) {
      smp::RowMax rm;
      sk.scan(x + r * dim, (int32_t)dim, &rm);
      out[r] = rm.arg;
    }
  });
}

void CpuBackend::topk(const float* x, int64_t n, int64_t dim, int32_t k, int32_t* idx, float* val) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dim > INT32_MAX) fail(CLADE_E_UNSUPPORTED, "cpu: topk: rows of over 2^31 elements");
  if (k < 1 || k > dim)
    fail(CLADE_E_INVALID_ARG, "cpu: topk: k " + std::to_string(k) + " of rows of " + std::to_string(dim));
  parallel_rows(n, 1, [&](int64_t a, int64_t b) { top_k_rows(x + a * dim, b - a, dim, k, idx + a * k, val + a * k); });
}

void CpuBackend::topk_masked(const float* x, int64_t n, int64_t dim, int32_t k, const uint32_t* masks,
                             const uint8_t* row_masked, int32_t* idx, float* val) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dim > INT32_MAX) fail(CLADE_E_UNSUPPORTED, "cpu: topk: rows of over 2^31 elements");
  if (k < 1 || k > dim)
    fail(CLADE_E_INVALID_ARG, "cpu: topk: k " + std::to_string(k) + " of rows of " + std::to_string(dim));
  const size_t words = (size_t)(dim + 31) / 32;
  parallel_rows(n, 1, [&](int64_t a, int64_t b) {
    top_k_rows_masked(x + a * dim, b - a, dim, k, masks + (size_t)a * words, row_masked + a, idx + a * k, val + a * k);
  });
}

void CpuBackend::rope(float* x, int64_t n, int32_t n_heads, const int32_t* pos, const RopeParams& p) {
  std::lock_guard<std::mutex> lock(mu_);
  const int hd = p.head_dim, half = hd / 2;
  if (hd <= 0 || hd > kMaxHeadDim || hd % 2 != 0)
    fail(CLADE_E_UNSUPPORTED, "cpu: rope: head dimension " + std::to_string(hd));
  parallel_rows(n, 8, [&](int64_t a, int64_t b) {
    float cs[kMaxHeadDim / 2], sn[kMaxHeadDim / 2];
    for (int64_t t = a; t < b; t++) {
      float fp = (float)pos[t] * p.pos_scale;
      for (int i = 0; i < half; i++) {
        float th = fp * p.inv_freq[i];
        cs[i] = std::cos(th);
        sn[i] = std::sin(th);
      }
      for (int h = 0; h < n_heads; h++) {
        float* v = x + (t * n_heads + h) * hd;
        for (int i = 0; i < half; i++) {
          int i0 = p.neox ? i : 2 * i, i1 = p.neox ? i + half : 2 * i + 1;
          float a0 = v[i0], a1 = v[i1];
          v[i0] = a0 * cs[i] - a1 * sn[i];
          v[i1] = a0 * sn[i] + a1 * cs[i];
        }
      }
    }
  });
}

void CpuBackend::kv_write(void* kv_dst, clade_kv_type type, int32_t capacity, int32_t kv_heads, int32_t head_dim,
                          int32_t start, const float* k, const float* v, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  if (head_dim <= 0 || head_dim > kMaxHeadDim)
    fail(CLADE_E_INVALID_ARG, "cpu: kv_write: head dimension " + std::to_string(head_dim));
  TensorType tt = kv_tensor_type(type);
  const size_t es = kv_type_size(type), rb = (size_t)head_dim * es;
  uint8_t row[kMaxHeadDim * 4];
  for (int64_t t = 0; t < n; t++)
    for (int h = 0; h < kv_heads; h++) {
      uint8_t* head = static_cast<uint8_t*>(kv_dst) + (size_t)h * 2 * capacity * rb;
      // K: element d of the key goes to its tile's row d (kernels.h).
      k_.from_f32(tt, k + (t * kv_heads + h) * head_dim, row, head_dim);
      int tw;
      uint8_t* k0 = head + (size_t)kv_k_at(start + t, capacity, head_dim, &tw) * es;
      for (int d = 0; d < head_dim; d++) std::memcpy(k0 + (size_t)d * tw * es, row + (size_t)d * es, es);
      k_.from_f32(tt, v + (t * kv_heads + h) * head_dim, head + kv_v_row(start + t, capacity) * rb, head_dim);
    }
}

// Tiles whose keys sit at the same place of the same width on both sides
// (every full tile when src_at and dst_at are multiples of kKTile) are
// copied whole; other keys element by element. V rows in runs, as the row
// layout.
void CpuBackend::kv_copy(void* dst, int32_t dst_cap, int32_t dst_at, const void* src, int32_t src_cap, int32_t src_at,
                         int32_t n, int32_t head_dim, clade_kv_type type) {
  const size_t es = kv_type_size(type), rb = (size_t)head_dim * es;
  uint8_t* d = static_cast<uint8_t*>(dst);
  const uint8_t* s = static_cast<const uint8_t*>(src);
  // One key's elements, from src's tile (width ws) to dst's (width wd).
  auto copy_key = [&](auto elem, int64_t es0, int ws, int64_t ed0, int wd) {
    using E = decltype(elem);
    const E* from = reinterpret_cast<const E*>(s) + es0;
    E* to = reinterpret_cast<E*>(d) + ed0;
    for (int e = 0; e < head_dim; e++) to[(size_t)e * wd] = from[(size_t)e * ws];
  };
  for (int32_t j = 0; j < n;) {
    const int32_t t = dst_at + j, f = src_at + j;
    const int32_t run = std::min({n - j, kKVBlock - f % kKVBlock, kKVBlock - t % kKVBlock});
    std::memcpy(d + kv_v_row(t, dst_cap) * rb, s + kv_v_row(f, src_cap) * rb, (size_t)run * rb);
    for (int32_t i = 0; i < run;) {
      const int32_t js = f + i, jd = t + i;
      int ws, wd;
      const int64_t es0 = kv_k_at(js, src_cap, head_dim, &ws), ed0 = kv_k_at(jd, dst_cap, head_dim, &wd);
      if (js % kKTile == 0 && jd % kKTile == 0 && ws == kKTile && wd == kKTile && run - i >= kKTile) {
        std::memcpy(d + (size_t)ed0 * es, s + (size_t)es0 * es, (size_t)kKTile * rb);
        i += kKTile;
        continue;
      }
      if (es == 2) copy_key(uint16_t{}, es0, ws, ed0, wd);
      else copy_key(uint32_t{}, es0, ws, ed0, wd);
      i++;
    }
    j += run;
  }
}

// Online-softmax attention of rows [r0, r1) of problem p over keys [c0, c1),
// and over its tails' keys when `tails` (the item holds the problem's last
// key chunk). Each block's 16-bit keys and values are widened in registers
// by the kernels, for every group of kAttnGroupRows rows (later groups find
// the block in L1/L2). With keys in tiles, this one path serves few rows
// (a sequence's own) and many (a shared node's): widening a block's keys
// into f32 lanes once for many rows, the row layout's second path, measured
// no faster at 32 to 1024 rows (bench_attention --mode shared). (Widening
// the values once as well was measured slower at 32 rows and no faster at
// 64: P.V widens them in registers for up to 6 rows at a time.)
void CpuBackend::attend_item(int tid, const float* q, int hd, float scale, TensorType kt, const AttnProblem& p,
                             int layer, int r0, int r1, int c0, int c1, bool tails, float* o, double* lse,
                             FnRef<const void*()> next_k) {
  ThreadScratch& s = scratch_[(size_t)tid];
  const int R = r1 - r0;
  const int G = std::min(R, kAttnGroupRows);  // rows per scores/softmax/P.V pass
  s.q.resize((size_t)R * hd);
  s.s.resize((size_t)G * kAttnBlock);
  s.acc.assign((size_t)R * hd, 0.0f);
  s.m.assign((size_t)R, -std::numeric_limits<float>::infinity());
  s.l.assign((size_t)R, 0.0f);
  // The softmax runs in base 2: scores are scale * log2(e) * q.k, their
  // powers of 2 are exp(scale * q.k), and the lse is turned back to base e
  // at the end (exp2_sum needs no multiply by log2 e).
  const float qscale = scale * 1.44269504088896341f;
  for (int r = 0; r < R; r++) k_.scale(s.q.data() + (size_t)r * hd, q + (size_t)p.rows[r0 + r] * hd, qscale, hd);
  const size_t es = kt == TensorType::F32 ? 4 : 2;

  // The keys this item attends to, in order (KeyRun): the problem's, then
  // its tails' that meet the item's rows.
  std::vector<KeyRun>& runs = s.runs;
  runs.clear();
  {
    KeyRun u{layer_kv(p.kv, p.layer_stride, layer), p.cap,      c0, 0, 0, R, p.limit ? p.limit + r0 : nullptr, p.len,
             p.mask ? p.mask + r0 : nullptr,        p.mask_base};
    for (int r = 0; r < R; r++) u.end = std::max(u.end, u.lim(r));
    u.end = std::min(c1, u.end);
    if (u.end > c0) runs.push_back(u);
  }
  for (int t = 0; tails && t < p.n_tails; t++) {
    const AttnTail& a = p.tails[t];
    const int ra = std::max(a.row0, r0), rb = std::min(a.row1, r1);
    if (ra >= rb) continue;
    KeyRun u{layer_kv(a.kv, a.layer_stride, layer),     a.cap,      0, 0, ra - r0, rb - r0, a.limit + (ra - a.row0), 0,
             a.mask ? a.mask + (ra - a.row0) : nullptr, a.mask_base};
    for (int r = u.ra; r < u.rb; r++) u.end = std::max(u.end, u.lim(r));
    if (u.end > 0) runs.push_back(u);
  }
  // Rows [g0, g0 + n) of the item: scores S [n][jb] of block j0 of run u
  // become probabilities; the running max, sum and output are rescaled.
  auto softmax = [&](const KeyRun& u, float* S, int g0, int n, int j0, int jb) {
    for (int r = g0; r < g0 + n; r++) {
      float* Sr = S + (size_t)(r - g0) * jb;
      int vis = std::min(jb, u.lim(r) - j0);
      // A tree mask hides keys from the mask's base on (-inf, then 0
      // after the sum: the vector exp2 clamps -inf to a tiny power).
      int hid0 = vis, hidden = 0;
      if (u.mask && vis > 0 && j0 + vis > u.mask_base) {
        const uint64_t bits = u.mask[r - u.ra];
        hid0 = std::max(0, u.mask_base - j0);
        for (int j = hid0; j < vis; j++)
          if (!((bits >> (j0 + j - u.mask_base)) & 1)) {
            Sr[j] = -std::numeric_limits<float>::infinity();
            hidden++;
          }
        if (hidden == vis) vis = 0;
      }
      if (vis <= 0) {
        std::fill(Sr, Sr + jb, 0.0f);
        continue;
      }
      float mx = k_.max(Sr, vis);
      const float om = s.m[(size_t)r];
      float nm = std::max(om, mx);
      // The output so far is rescaled when the max grows (nothing to
      // rescale on the first block; libm's exp2 is not free at -inf).
      const bool first = om == -std::numeric_limits<float>::infinity();  // acc is still 0
      float corr = first ? 0.0f : nm > om ? std::exp2(om - nm) : 1.0f;
      if (!first && corr != 1.0f) {
        float* a = s.acc.data() + (size_t)r * hd;
        k_.scale(a, a, corr, hd);
      }
      float sum = k_.exp2_sum(Sr, nm, vis);
      std::fill(Sr + vis, Sr + jb, 0.0f);
      if (hidden) {
        const uint64_t bits = u.mask[r - u.ra];
        for (int j = hid0; j < vis; j++)
          if (!((bits >> (j0 + j - u.mask_base)) & 1)) {
            sum -= Sr[j];
            Sr[j] = 0.0f;
          }
      }
      s.l[(size_t)r] = s.l[(size_t)r] * corr + sum;
      s.m[(size_t)r] = nm;
    }
  };
  float* S = s.s.data();
  for (size_t i = 0; i < runs.size(); i++) {
    const KeyRun& u = runs[i];
    const KeyRun* after = i + 1 < runs.size() ? &runs[i + 1] : nullptr;
    for (int j0 = u.c0; j0 < u.end; j0 += kAttnBlock) {
      const int jb = std::min(kAttnBlock, u.end - j0);
      // j0 is a block boundary (items start at one): the block's K tiles,
      // then its V rows. Streaming from memory, this block's values are
      // fetched while its keys are used, and the next block's keys while
      // its values are summed (both streams stay in flight; measured with
      // bench_attention).
      const uint8_t* kp = u.at(kv_k_row(j0, u.cap), hd, es);  // the block's K tiles
      const uint8_t* vp = u.at(kv_v_row(j0, u.cap), hd, es);
      const int kw = kv_block_keys(j0, u.cap);
      const void* pf_k = j0 + kAttnBlock < u.end ? u.at(kv_k_row(j0 + kAttnBlock, u.cap), hd, es)
                         : after                 ? after->at(kv_k_row(after->c0, after->cap), hd, es)
                                                 : next_k();
      for (int g0 = u.ra; g0 < u.rb; g0 += G) {
        const int n = std::min(G, u.rb - g0);
        k_.scores(s.q.data() + (size_t)g0 * hd, n, kt, kp, jb, kw, hd, S, g0 == u.ra ? vp : nullptr);
        softmax(u, S, g0, n, j0, jb);
        k_.pv(s.acc.data() + (size_t)g0 * hd, n, S, jb, kt, vp, hd, g0 == u.ra ? pf_k : nullptr);
      }
    }
  }
  for (int r = 0; r < R; r++) {
    float* orow = o + (size_t)r * hd;
    float l = s.l[(size_t)r];
    if (l > 0) {
      k_.scale(orow, s.acc.data() + (size_t)r * hd, 1.0f / l, hd);
      lse[r] = ((double)s.m[(size_t)r] + std::log2((double)l)) * 0.69314718055994531;  // base e
    } else {
      std::fill(orow, orow + hd, 0.0f);
      lse[r] = -std::numeric_limits<double>::infinity();
    }
  }
}

// The CPU backend's prepared attention of a pass: its work items over the
// problems of every set, made once per pass, and the partial rows of the
// problems whose keys are split.
struct CpuAttnWork final : AttnWork {
  struct Item {
    const AttnProblem* p;
    TensorType kt;
    int r0, r1, c0, c1;
    bool tails;  // the problem's last key chunk: its tails too
    size_t o_at, lse_at;  // into part/part_lse when split, else the problem's rows
    bool split;
  };
  struct Split {  // a problem whose keys were cut into `n` chunks
    const AttnProblem* p;
    int n;
    size_t o_at, lse_at;
  };
  int head_dim = 0;
  float scale = 1.0f;
  std::vector<Item> items;
  std::vector<Split> splits;
  std::vector<const AttnProblem*> empty;  // rows that see nothing
  std::vector<float> part;                // split partial outputs
  std::vector<double> part_lse;           // and their lse
  std::vector<int32_t> idx;
  template <typename T>
  void fit(std::vector<T>& v, size_t n) {
    if (v.capacity() < n) grows++;
    if (v.size() < n) v.resize(n);
  }
};

std::unique_ptr<AttnWork> CpuBackend::make_attn_work() { return std::unique_ptr<AttnWork>(new CpuAttnWork()); }

namespace {

// The keys a problem's tails add up to, over their rows; a tail outside its
// problem's rows or out of order, or a row past its span, is the plan's bug.
double tail_work(const AttnProblem& p) {
  double w = 0;
  if (!p.tails) fail(CLADE_E_INTERNAL, "cpu: attention: a problem's tails are missing");
  for (int t = 0, prev_end = 0; t < p.n_tails; t++) {
    const AttnTail& a = p.tails[t];
    if (a.row0 < prev_end || a.row1 > p.n_rows || a.row0 > a.row1 || (a.row1 > a.row0 && !a.limit))
      fail(CLADE_E_INTERNAL, "cpu: attention: a tail's rows are outside its problem or out of order");
    prev_end = a.row1;
    for (int r = 0; r < a.row1 - a.row0; r++) {
      if (a.limit[r] > a.cap) fail(CLADE_E_INTERNAL, "cpu: attention: a tail row sees past its span");
      w += std::max(0, a.limit[r]);
    }
  }
  return w;
}

}  // namespace

// Items: blocks of up to kAttnItemRows rows, and a problem cut further so
// that no item holds more than about 1/(4 x threads) of the pass's work: a
// step with one long span (a single sequence) still uses every core, and
// many small problems are left whole. A problem of few rows is cut into
// chunks of keys (each chunk gives partial (o, lse) pairs, merged after;
// its tails go with the last chunk), one of many rows into blocks of rows,
// which need no merge (bench_attention --own: 4-8% faster at 16 and 64
// sequences of a 2048-key node). The same for every layer, so made once.
void CpuBackend::attention_prepare(AttnWork& work, int32_t head_dim, float scale, const AttnSet* sets,
                                   size_t n_sets) {
  CpuAttnWork& w = static_cast<CpuAttnWork&>(work);
  if (head_dim > kMaxHeadDim) fail(CLADE_E_UNSUPPORTED, "cpu: head dimension above 256");
  if (head_dim <= 0) fail(CLADE_E_INVALID_ARG, "cpu: attention: head dimension " + std::to_string(head_dim));
  w.head_dim = head_dim;
  w.scale = scale;
  w.items.clear();
  w.splits.clear();
  w.empty.clear();
  double total_work = 0;
  for (size_t si = 0; si < n_sets; si++)
    for (size_t i = 0; i < sets[si].n_problems; i++) {
      const AttnProblem& p = sets[si].problems[i];
      if (p.n_rows <= 0) continue;
      if (p.len > p.cap) fail(CLADE_E_INTERNAL, "cpu: attention: a problem is longer than its span");
      if (p.n_tails > 0) total_work += tail_work(p);
      if (p.len > 0) total_work += (double)p.len * p.n_rows;
    }
  const double item_work = std::max(1.0, total_work / ((double)kAttnItemsPerThread * pool_.size()));
  size_t part_floats = 0, part_rows = 0;
  for (size_t si = 0; si < n_sets; si++) {
    const TensorType kt = kv_tensor_type(sets[si].type);
    for (size_t i = 0; i < sets[si].n_problems; i++) {
      const AttnProblem& p = sets[si].problems[i];
      if (p.n_rows <= 0) continue;
      if (p.len <= 0 && p.n_tails == 0) w.empty.push_back(&p);  // nothing to see
      else cut_problem(w, p, kt, item_work, &part_floats, &part_rows);
    }
  }
  w.fit(w.part, part_floats);
  w.fit(w.part_lse, part_rows);
  // Every thread's scratch sized for the largest item now: which thread
  // takes which item changes from step to step (with the machine's load),
  // so a thread must not first grow its buffers in a later step.
  size_t rows = 0, runs = 1;
  for (const CpuAttnWork::Item& it : w.items) {
    rows = std::max(rows, (size_t)(it.r1 - it.r0));
    if (it.tails) runs = std::max(runs, (size_t)it.p->n_tails + 1);
  }
  const size_t hd = (size_t)w.head_dim, g = std::min(rows, (size_t)kAttnGroupRows);
  for (ThreadScratch& t : scratch_) {
    auto cap = [&w](auto& v, size_t n) {
      if (v.capacity() < n) {
        w.grows++;
        v.reserve(n);
      }
    };
    cap(t.q, rows * hd);
    cap(t.acc, rows * hd);
    cap(t.s, g * kAttnBlock);
    cap(t.m, rows);
    cap(t.l, rows);
    cap(t.runs, runs);
  }
}

// Problem p's items (rows and key chunks of about item_work each); key
// splits take their partial rows at *part_floats / *part_rows.
void CpuBackend::cut_problem(CpuAttnWork& w, const AttnProblem& p, TensorType kt, double item_work,
                             size_t* part_floats, size_t* part_rows) const {
  const int head_dim = w.head_dim;
  int split = 1, item_rows = kAttnItemRows, chunk = 0;
  if (p.len > 0) {
    const int rows_per_item = std::min(p.n_rows, kAttnItemRows);
    split = (int)std::ceil((double)p.len * rows_per_item / item_work);
    split = std::max(1, std::min(split, (p.len + kAttnMinChunk - 1) / kAttnMinChunk));
    if (split > 1 && rows_per_item >= 2 * kAttnRowSplitMin) {
      // Many rows: cut them instead of the keys (no partials to merge; the
      // items read the same keys, the later ones mostly from cache).
      const int parts = std::min(split, rows_per_item / kAttnRowSplitMin);
      item_rows = (rows_per_item + parts - 1) / parts;
      split = 1;
    }
    // Chunks of whole key blocks (items start at a block boundary, see
    // kv_k_row); the last chunk may be shorter.
    chunk = ((p.len + split - 1) / split + kAttnBlock - 1) / kAttnBlock * kAttnBlock;
    split = (p.len + chunk - 1) / chunk;
  }
  // One chunk: the problem's outputs; several: partials per problem,
  // o [split][n_rows][head_dim], lse [split][n_rows].
  if (split > 1) w.splits.push_back({&p, split, *part_floats, *part_rows});
  for (int r0 = 0; r0 < p.n_rows; r0 += item_rows) {
    const int r1 = std::min(p.n_rows, r0 + item_rows);
    for (int c = 0; c < split; c++) {
      const int c0 = c * chunk, c1 = std::max(0, std::min(p.len, c0 + chunk));
      const size_t o_at = split == 1 ? (size_t)r0 * head_dim : *part_floats + ((size_t)c * p.n_rows + r0) * head_dim;
      const size_t l_at = split == 1 ? (size_t)r0 : *part_rows + (size_t)c * p.n_rows + r0;
      w.items.push_back({&p, kt, r0, r1, c0, c1, c == split - 1, o_at, l_at, split > 1});
    }
  }
  if (split > 1) {
    *part_floats += (size_t)split * p.n_rows * head_dim;
    *part_rows += (size_t)split * p.n_rows;
  }
}

void CpuBackend::attention_run(AttnWork& work, int layer, const float* q) {
  std::lock_guard<std::mutex> lock(mu_);
  CpuAttnWork& w = static_cast<CpuAttnWork&>(work);
  const int hd = w.head_dim;
  for (const AttnProblem* p : w.empty)
    for (int r = 0; r < p->n_rows; r++) {
      std::fill(p->o + (size_t)r * hd, p->o + (size_t)(r + 1) * hd, 0.0f);
      p->lse[r] = -std::numeric_limits<double>::infinity();
    }
  auto next_k = [&]() -> const void* {
    const int64_t n = pool_.next_item();
    if (n < 0 || n >= (int64_t)w.items.size()) return nullptr;
    const CpuAttnWork::Item& it = w.items[(size_t)n];
    const size_t es = it.kt == TensorType::F32 ? 4 : 2;
    return span_row(layer_kv(it.p->kv, it.p->layer_stride, layer), kv_k_row(it.c0, it.p->cap), hd, es);
  };
  pool_.run((int64_t)w.items.size(), [&](int64_t n, int tid) {
    const CpuAttnWork::Item& it = w.items[(size_t)n];
    float* o = it.split ? w.part.data() + it.o_at : it.p->o + it.o_at;
    double* lse = it.split ? w.part_lse.data() + it.lse_at : it.p->lse + it.lse_at;
    attend_item(tid, q, hd, w.scale, it.kt, *it.p, layer, it.r0, it.r1, it.c0, it.c1, it.tails, o, lse, next_k);
  });
  // Merge the key splits.
  for (const CpuAttnWork::Split& sp : w.splits) {
    const AttnProblem& p = *sp.p;
    w.fit(w.idx, (size_t)sp.n);
    for (int r = 0; r < p.n_rows; r++) {
      for (int c = 0; c < sp.n; c++) w.idx[(size_t)c] = c * p.n_rows + r;
      p.lse[r] = merge_row(w.idx.data(), sp.n, w.part.data() + sp.o_at, w.part_lse.data() + sp.lse_at, hd,
                           p.o + (size_t)r * hd);
    }
  }
}

void CpuBackend::merge(const MergeList& list, int32_t head_dim, float* out) {
  std::lock_guard<std::mutex> lock(mu_);
  parallel_rows(list.n_out_rows, 64, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; r++) {
      int32_t j0 = list.part_begin[r], j1 = list.part_begin[r + 1];
      merge_row(list.part_rows + j0, j1 - j0, list.part_o, list.part_lse, head_dim, out + r * head_dim);
    }
  });
}

}  // namespace

size_t kv_type_size(clade_kv_type t) { return t == CLADE_KV_F32 ? 4 : 2; }

std::unique_ptr<Backend> make_cpu_backend(int n_threads) {
  return std::unique_ptr<Backend>(new CpuBackend(n_threads));
}

}  // namespace clade
