// The CUDA backend against the CPU backend, op by op, on random inputs.
// Exits 77 (skipped) when no CUDA device is usable or the build has no CUDA;
// `test_cuda --cpu-vs-cpu` runs the same comparisons with a second CPU
// backend in the CUDA backend's place, to check the harness without a GPU.
//
// Tolerances, each against a scale stated per op:
//   matmul: |gpu - cpu| <= tol * sum_i |w_i x_i| + 1e-6 per output, with
//     tol = 1e-5 (F32), 1e-3 (F16: activations narrowed to f16, unit
//     roundoff 2^-11), 8e-3 (BF16: narrowed to bf16, 2^-8), 2e-3 (Q8_0,
//     Q4_0 and the types widened at upload: activations and widened weights
//     both rounded to f16), plus, for the quantized types, the CPU's own
//     rounding of the activations to 8 bits per block where it does that;
//   embed, kv_write: exact (both widen or narrow with round-to-nearest-even);
//     kv_write_run exactly kv_write per destination on the same backend;
//   rmsnorm, add_bias, add, swiglu, rope, merge: 1e-5 relative (+1e-6);
//   attention: 1e-4 absolute on o and lse (fp64; values and scores are O(1)),
//     -inf lse and zero o exactly where a row sees no key; 16 unit
//     roundoffs of the KV type with CLADE_CUDA_MMA_HILO=0 (attn_tol).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cpu/kernels.h"
#include "cpu/kernels_q.h"
#include "check.h"
#include "base/error.h"
#include "format/quant.h"
#include "reference.h"

using clade::Backend;

namespace {

std::mt19937 rng(1234);

std::vector<float> randn(size_t n, float sd = 1.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Buffers in one backend's memory, released with the arena.
struct Arena {
  Backend& be;
  std::vector<void*> ptrs;
  explicit Arena(Backend& b) : be(b) {}
  ~Arena() {
    for (void* p : ptrs) be.release(p);
  }
  void* raw(size_t bytes) {
    void* p = be.alloc(bytes);
    ptrs.push_back(p);
    return p;
  }
  template <class T>
  T* put(const std::vector<T>& h) {
    T* p = static_cast<T*>(raw(std::max<size_t>(h.size(), 1) * sizeof(T)));
    be.copy_to(p, h.data(), h.size() * sizeof(T));
    return p;
  }
  template <class T>
  std::vector<T> get(const T* p, size_t n) {
    std::vector<T> h(n);
    be.copy_from(h.data(), p, n * sizeof(T));
    return h;
  }
};

// The attention bound: 1e-4 absolute; on a backend whose tensor-core
// units take the queries and weights as single numbers of the KV type
// (the register kernel with CLADE_CUDA_MMA_HILO=0), 8 unit roundoffs of
// its significand (2^-11 F16, 2^-8 BF16): a score is then off by up to
// u * sum |q_d k_d|, about 1.8e-3 (F16) and 1.1e-2 (BF16) at worst on this
// test's data in an fp64 model of that rounding (1.1e-3 and 7.2e-3 in a
// host model of the kernel itself).
bool g_attn_single = false;
double attn_tol(clade_kv_type t) {
  if (!g_attn_single || t == CLADE_KV_F32) return 1e-4;
  return 8.0 * (t == CLADE_KV_BF16 ? 1.0 / 256 : 1.0 / 2048);
}
// An environment variable set for the object's lifetime, then put back as
// it was (for backends made with other settings).
struct ScopedEnv {
  std::string name, old;
  bool had;
  ScopedEnv(const char* n, const char* value) : name(n) {
    const char* e = std::getenv(n);
    had = e != nullptr;
    if (e) old = e;
    setenv(n, value, 1);
  }
  ~ScopedEnv() {
    if (had) setenv(name.c_str(), old.c_str(), 1);
    else unsetenv(name.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

// Whether a switch of the CUDA backend is set to 0 (as the backend reads
// its on/off switches: set and not "0" is on).
bool env_off(const char* name) {
  const char* e = std::getenv(name);
  return e && std::strcmp(e, "0") == 0;
}

// Whether the environment picks that mode for a CUDA backend made now.
bool env_single() { return !env_off("CLADE_CUDA_MMA_REG") && env_off("CLADE_CUDA_MMA_HILO"); }

// What a CUDA backend made now should name in its settings() line: the
// tensor-core kernel, its softmax and the rows of its units that the
// environment asks for (CLADE_CUDA_MMA, _REG, _HILO, _EXP2, _ROWS), head
// dim 64 on them, and the merge kernels (CLADE_CUDA_WARP_MERGE): a kernel
// that failed its setup and left its problems to another would pass the
// comparisons unseen.
void check_settings(const Backend& be) {
  const std::string line = be.settings();
  std::string want;
  if (env_off("CLADE_CUDA_MMA")) {
    want = "tensor-core attention off,";
  } else {
    const bool reg = !env_off("CLADE_CUDA_MMA_REG");
    const char* rows = std::getenv("CLADE_CUDA_MMA_ROWS");
    want = std::string("tensor-core attention ") +
           (!reg                             ? "wmma"
            : env_off("CLADE_CUDA_MMA_HILO") ? "reg-single"
                                             : "reg") +
           (reg && !env_off("CLADE_CUDA_MMA_EXP2") ? " exp2" : "") +
           (reg && rows && std::strcmp(rows, "128") == 0 ? ", 128" : ", 64") + " rows a unit, head dim 64 on,";
  }
  CHECK_MSG(line.find(want) != std::string::npos, "settings '%s' do not say '%s'", line.c_str(), want.c_str());
  const std::string merges = env_off("CLADE_CUDA_WARP_MERGE") ? "merges a block a row" : "merges a warp a row";
  CHECK_MSG(line.find(merges) != std::string::npos, "settings '%s' do not say '%s'", line.c_str(), merges.c_str());
  const char* chunk = std::getenv("CLADE_CUDA_MMA_MIN_CHUNK");
  char* end = nullptr;
  const long floor_keys = chunk ? std::strtol(chunk, &end, 10) : 0;
  if (chunk && end != chunk && !*end && floor_keys >= 128 && floor_keys <= (1 << 20)) {  // (else ignored)
    const std::string floor = std::string("chunks from ") + std::to_string(floor_keys) + " keys";
    CHECK_MSG(line.find(floor) != std::string::npos, "settings '%s' do not say '%s'", line.c_str(), floor.c_str());
  }
  const char* many = std::getenv("CLADE_CUDA_MMA_UNITS_PER_SM");
  if (many && std::strcmp(many, "3") == 0) {  // (the value the variants below set)
    const std::string units = "in 3 units a multiprocessor";
    CHECK_MSG(line.find(units) != std::string::npos, "settings '%s' do not say '%s'", line.c_str(), units.c_str());
  }
}

// Compare got against want: |got - want| <= bound[i] (NaN fails). Prints the
// worst element.
template <class T>
void expect_close(const std::string& what, const std::vector<T>& got, const std::vector<T>& want,
                  const std::vector<double>& bound) {
  CHECK_MSG(got.size() == want.size(), "%s: sizes differ", what.c_str());
  if (got.size() != want.size()) return;
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const bool inf = std::isinf(want[i]) || std::isinf(got[i]);
    const double err = inf ? 0.0 : std::fabs((double)got[i] - (double)want[i]);
    const bool ok = inf ? got[i] == want[i] : err <= bound[i];  // a NaN fails
    if (!ok) {
      bad++;
      double ratio = (inf || std::isnan(err)) ? INFINITY : err / std::max(bound[i], 1e-30);
      if (bad == 1 || ratio > worst_ratio) worst = i, worst_ratio = ratio;
    }
  }
  CHECK_MSG(bad == 0, "%s: %zu of %zu elements off; worst [%zu]: got %.9g want %.9g bound %.3g", what.c_str(), bad,
            got.size(), worst, (double)got[worst], (double)want[worst], bad ? bound[worst] : 0.0);
}

template <class T>
void expect_rel(const std::string& what, const std::vector<T>& got, const std::vector<T>& want, double rel,
                double abs_tol) {
  std::vector<double> bound(want.size());
  for (size_t i = 0; i < want.size(); i++) bound[i] = rel * std::fabs((double)want[i]) + abs_tol;
  expect_close(what, got, want, bound);
}

template <class T>
void expect_equal(const std::string& what, const std::vector<T>& got, const std::vector<T>& want) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); i++)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && bad++ == 0) first = i;
  CHECK_MSG(got.size() == want.size() && bad == 0, "%s: %zu elements differ, first at %zu", what.c_str(), bad, first);
}

const char* type_name(clade::TensorType t) {
  switch (t) {
    case clade::TensorType::F32: return "F32";
    case clade::TensorType::F16: return "F16";
    case clade::TensorType::BF16: return "BF16";
    case clade::TensorType::Q8_0: return "Q8_0";
    case clade::TensorType::Q4_0: return "Q4_0";
    default: return clade::tensor_type_name(t);
  }
}

uint64_t row_bytes(clade::TensorType t, int64_t n) {
  switch (t) {
    case clade::TensorType::F32: return (uint64_t)n * 4;
    case clade::TensorType::F16:
    case clade::TensorType::BF16: return (uint64_t)n * 2;
    case clade::TensorType::Q8_0: return (uint64_t)(n / 32) * 34;
    case clade::TensorType::Q4_0: return (uint64_t)(n / 32) * 18;
    default: return clade::tensor_row_bytes(t, n);
  }
}

// The types the CUDA backend widens to F16 at upload (its embedding rows are
// then rounded to f16).
bool widened_at_upload(clade::TensorType t) {
  return clade::tensor_block_elems(t) > 1 && t != clade::TensorType::Q8_0 && t != clade::TensorType::Q4_0;
}

// A random weight [n_out][n_in] in type t, and its exact f32 values.
struct HostWeight {
  clade::TensorType type;
  int64_t n_in, n_out;
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  clade::Weight view() const { return clade::Weight{type, bytes.data(), n_in, n_out}; }
};

HostWeight make_weight(clade::TensorType t, int64_t n_in, int64_t n_out) {
  HostWeight w{t, n_in, n_out, {}, {}};
  const uint64_t rb = row_bytes(t, n_in);
  w.bytes.resize(rb * (uint64_t)n_out);
  w.values.resize((size_t)(n_in * n_out));
  std::vector<float> src = randn((size_t)(n_in * n_out), 0.1f);
  for (int64_t o = 0; o < n_out; o++) {
    clade::quantize_row(t, src.data() + o * n_in, w.bytes.data() + (uint64_t)o * rb, n_in);
    clade::dequantize_row(t, w.bytes.data() + (uint64_t)o * rb, w.values.data() + o * n_in, n_in);
  }
  return w;
}

void test_matmul(Backend& cpu, Backend& gpu, clade::TensorType t, int64_t n_in, int64_t n_out, int64_t n) {
  const double tol = t == clade::TensorType::F32    ? 1e-5
                     : t == clade::TensorType::F16  ? 1e-3
                     : t == clade::TensorType::BF16 ? 8e-3
                                                    : 2e-3;
  HostWeight hw = make_weight(t, n_in, n_out);
  std::vector<float> x = randn((size_t)(n * n_in));
  std::vector<float> y[2];
  Backend* bes[2] = {&cpu, &gpu};
  for (int b = 0; b < 2; b++) {
    Arena a(*bes[b]);
    clade::Weight w = bes[b]->upload_weight(hw.view());
    float* dx = a.put(x);
    float* dy = static_cast<float*>(a.raw((size_t)(n * n_out) * 4));
    bes[b]->matmul(w, dx, n, dy);
    y[b] = a.get(dy, (size_t)(n * n_out));
  }
  // The CPU backend's products of the quantized types may round the
  // activations to 8 bits per block first (lib/cpu/kernels_q.cpp: each
  // element within half a step, amax / 127 / 2, of its block's largest
  // magnitude), which the format's dot products expect and the GPU does
  // not do. Both sides' errors against the exact product are in the bound.
  const bool cpu_rounds_x = clade::qdot_type(t);
  const int64_t xblock = clade::tensor_block_elems(t) == 256 ? 256 : 32;
  std::vector<double> half_step((size_t)(n * n_in), 0.0);
  if (cpu_rounds_x)
    for (int64_t r = 0; r < n; r++)
      for (int64_t b0 = 0; b0 < n_in; b0 += xblock) {
        double amax = 0;
        for (int64_t i = b0; i < b0 + xblock; i++) amax = std::max(amax, std::fabs((double)x[(size_t)(r * n_in + i)]));
        for (int64_t i = b0; i < b0 + xblock; i++) half_step[(size_t)(r * n_in + i)] = amax / 127 / 2 * 1.001;
      }
  std::vector<double> bound((size_t)(n * n_out));
  for (int64_t r = 0; r < n; r++)
    for (int64_t o = 0; o < n_out; o++) {
      double s = 0, q = 0;
      for (int64_t i = 0; i < n_in; i++) {
        const double w_abs = std::fabs((double)hw.values[(size_t)(o * n_in + i)]);
        s += w_abs * std::fabs((double)x[(size_t)(r * n_in + i)]);
        q += w_abs * half_step[(size_t)(r * n_in + i)];
      }
      bound[(size_t)(r * n_out + o)] = tol * s + q + 1e-6;
    }
  expect_close(std::string("matmul ") + type_name(t) + " " + std::to_string(n) + "x" + std::to_string(n_in) + "x" +
                   std::to_string(n_out),
               y[1], y[0], bound);
}

void test_embed(Backend& cpu, Backend& gpu, clade::TensorType t) {
  const int64_t width = std::max<int64_t>(96, clade::tensor_block_elems(t)), vocab = 50;
  HostWeight hw = make_weight(t, width, vocab);
  std::vector<int32_t> tokens = {0, 7, 49, 7, 23, 1, 48};
  std::vector<float> out[2];
  Backend* bes[2] = {&cpu, &gpu};
  for (int b = 0; b < 2; b++) {
    Arena a(*bes[b]);
    clade::Weight w = bes[b]->upload_weight(hw.view());
    int32_t* dt = a.put(tokens);
    float* d = static_cast<float*>(a.raw(tokens.size() * width * 4));
    bes[b]->embed(w, dt, (int64_t)tokens.size(), d);
    out[b] = a.get(d, tokens.size() * width);
  }
  if (widened_at_upload(t)) {
    std::vector<double> bound(out[0].size());
    for (size_t i = 0; i < bound.size(); i++) bound[i] = std::fabs(out[0][i]) * 1e-3 + 1e-7;  // f16: 2^-11
    expect_close(std::string("embed ") + type_name(t), out[1], out[0], bound);
    return;
  }
  expect_equal(std::string("embed ") + type_name(t), out[1], out[0]);
}

void test_elementwise(Backend& cpu, Backend& gpu) {
  const int64_t n = 5, dim = 300;  // dim not a multiple of the block size
  std::vector<float> x = randn((size_t)(n * dim), 2.0f), w = randn((size_t)dim), bias = randn((size_t)dim),
                     up = randn((size_t)(n * dim), 3.0f);
  std::vector<float> rms[2], biased[2], added[2], sw[2];
  Backend* bes[2] = {&cpu, &gpu};
  for (int b = 0; b < 2; b++) {
    Backend& be = *bes[b];
    Arena a(be);
    float* dx = a.put(x);
    float* dw = a.put(w);
    float* dbias = a.put(bias);
    float* dup = a.put(up);
    float* dy = static_cast<float*>(a.raw(x.size() * 4));
    be.rmsnorm(dx, dw, n, dim, 1e-5f, dy);
    rms[b] = a.get(dy, x.size());
    be.add_bias(dy, dbias, n, dim);
    biased[b] = a.get(dy, x.size());
    be.add(dy, dx, n * dim);
    added[b] = a.get(dy, x.size());
    be.swiglu(dy, dup, n * dim);
    sw[b] = a.get(dy, x.size());
  }
  expect_rel("rmsnorm", rms[1], rms[0], 1e-5, 1e-6);
  expect_rel("add_bias", biased[1], biased[0], 1e-5, 1e-6);
  expect_rel("add", added[1], added[0], 1e-5, 1e-6);
  expect_rel("swiglu", sw[1], sw[0], 1e-5, 1e-6);
}

// argmax on rows built to catch the edge cases, against the plain
// definition (Backend::argmax) and across the two backends: ties spread
// over several threads' elements (the lowest index wins), NaN passed over,
// rows of only -inf or NaN (-1), +inf, signed zeros, the maximum first or
// last, and widths below and above one block's threads. With 12 rows the
// CUDA backend splits rows of over 4096 into chunks (ties across them),
// with 300 it does not; at an offset of one element its 16-byte loads are
// off.
// Backend::argmax's rule on the host: the index of row's largest element
// of dim, the lowest among equal ones; NaN passed over, -1 when nothing is
// above -inf.
int32_t host_argmax(const float* row, int64_t dim) {
  int32_t at = -1;
  for (int64_t i = 0; i < dim; i++)
    if (!std::isnan(row[i]) && row[i] > -INFINITY && (at < 0 || row[i] > row[at])) at = (int32_t)i;
  return at;
}

void test_argmax(Backend& cpu, Backend& gpu) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {12, 300})
  for (int off : {0, 1})
  for (int64_t dim : {1, 31, 256, 773, 32000, 32001}) {
    if (n == 300 && dim < 32000) continue;
    std::vector<float> x = randn((size_t)(n * dim));
    auto row = [&](int64_t r) { return x.data() + r * dim; };
    const int64_t last = dim - 1;
    for (int64_t i : {(int64_t)7, dim / 3, dim / 2 + 1, last})  // row 1: ties at 4 places
      if (i < dim) row(1)[i] = 9.0f;
    for (int64_t i = 0; i < dim; i += 3) row(2)[i] = nan;  // row 2: NaN among values
    row(2)[last] = 50.0f;
    for (int64_t i = 0; i < dim; i++) row(3)[i] = -inf;  // row 3: nothing above -inf
    for (int64_t i = 0; i < dim; i++) row(4)[i] = nan;   // row 4: NaN only
    for (int64_t i = 0; i < dim; i++) row(5)[i] = i % 2 ? nan : -inf;  // row 5: both, one value at the end
    row(5)[last] = -1e30f;
    row(6)[dim / 2] = inf;  // row 6: +inf twice
    row(6)[last] = inf;
    for (int64_t i = 0; i < dim; i++) row(7)[i] = i == last ? 0.0f : -0.0f;  // row 7: zeros equal
    row(8)[0] = 100.0f;                                                        // row 8: first
    row(9)[last] = 100.0f;                                                     // row 9: last
    row(10)[0] = nan;                                                          // row 10: NaN first
    for (int64_t i = 0; i < dim; i++) row(11)[i] = -3.0f;  // row 11: every element equal
    std::vector<int32_t> want((size_t)n);
    for (int64_t r = 0; r < n; r++) want[(size_t)r] = host_argmax(row(r), dim);
    CHECK(want[3] == -1 && want[4] == -1 && want[5] == last && want[7] == 0 && want[11] == 0);
    CHECK(want[1] == (dim > 7 ? 7 : 0) || dim <= 7);
    Backend* bes[2] = {&cpu, &gpu};
    for (int b = 0; b < 2; b++) {
      Arena a(*bes[b]);
      std::vector<float> padded((size_t)off, 0.0f);
      padded.insert(padded.end(), x.begin(), x.end());
      const float* dx = a.put(padded) + off;
      int32_t* dout = static_cast<int32_t*>(a.raw((size_t)n * 4));
      bes[b]->argmax(dx, n, dim, dout);
      expect_equal(std::string("argmax ") + bes[b]->name() + " " + std::to_string(n) + " rows of " +
                       std::to_string(dim) + (off ? " at an odd offset" : ""),
                   a.get(dout, (size_t)n), want);
    }
  }
}

// topk (a step's sampling candidates) against a plain full sort (ref::top_k): a NaN
// above every number, then by value (-0 equal to +0), ties to the lower
// index, the row's own floats (NaN payloads too). Rows of ties at the
// threshold, NaN and +-inf, all -inf, zeros of both signs, few finite;
// k from 1 to the backend's largest and the row's length.
void test_topk(Backend& cpu, Backend& gpu) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t dim : {1, 7, 300, 4099, 32000, 50257}) {
    const int64_t n = dim >= 32000 ? 14 : 20;
    std::vector<float> x = randn((size_t)(n * dim));
    auto row = [&](int64_t r) { return x.data() + r * dim; };
    const int64_t last = dim - 1;
    for (int64_t i = 0; i < dim; i++) row(1)[i] = std::round(row(1)[i]);  // row 1: ties everywhere
    for (int64_t i = 0; i < dim; i += 3) row(2)[i] = nan;                   // row 2: NaN among values
    row(2)[last] = 50.0f;
    for (int64_t i = 0; i < dim; i++) row(3)[i] = -inf;                      // row 3: nothing above -inf
    for (int64_t i = 0; i < dim; i++) row(4)[i] = i % 2 ? -nan : nan;        // row 4: NaNs of both signs only
    row(5)[dim / 2] = inf;                                                   // row 5: +inf twice
    row(5)[last] = inf;
    for (int64_t i = 0; i < dim; i++) row(6)[i] = i % 3 ? -0.0f : 0.0f;     // row 6: zeros equal
    for (int64_t i = 0; i < dim; i++) row(7)[i] = i % 97 == 5 ? row(7)[i] : -inf;  // row 7: few finite
    for (int64_t i = 0; i < dim; i++) row(8)[i] = -3.0f;                     // row 8: every element equal
    for (int64_t i = 0; i < dim; i++) row(9)[i] = (float)(i % 5) - (i % 2 ? 0.0f : -0.0f);  // row 9: 5 values
    row(10)[last] = -inf;                                                    // row 10: -inf at the end
    row(10)[0] = nan;
    for (int64_t i = 0; i < dim; i++) row(11)[i] = i % 2 ? 1e-40f : -1e-40f;  // row 11: subnormals
    // rows 12..: random
    Backend* bes[2] = {&cpu, &gpu};
    for (int32_t k : {1, 2, 40, 1000, 1024, 1025, (int32_t)dim}) {
      if (k > dim || k > gpu.topk_max()) continue;
      std::vector<int32_t> want_i((size_t)(n * k));
      std::vector<float> want_v((size_t)(n * k));
      for (int64_t r = 0; r < n; r++) ref::top_k(row(r), dim, k, want_i.data() + r * k, want_v.data() + r * k);
      for (int b = 0; b < 2; b++) {
        Arena a(*bes[b]);
        const float* dx = a.put(x);
        int32_t* di = static_cast<int32_t*>(a.raw((size_t)(n * k) * 4));
        float* dv = static_cast<float*>(a.raw((size_t)(n * k) * 4));
        bes[b]->topk(dx, n, dim, k, di, dv);
        const std::string tag = std::string("topk ") + bes[b]->name() + " " + std::to_string(n) + " rows of " +
                                std::to_string(dim) + ", k " + std::to_string(k);
        expect_equal(tag + ": tokens", a.get(di, (size_t)(n * k)), want_i);
        expect_equal(tag + ": values", a.get(dv, (size_t)(n * k)), want_v);
      }
    }
  }
  // k outside 1..min(dim, topk_max) is refused, naming it (also with no
  // rows)
  for (Backend* be : {&cpu, &gpu}) {
    Arena a(*be);
    const int64_t dim = be->topk_max() < 2000 ? 2 * (int64_t)be->topk_max() : 64;
    const float* dx = a.put(randn((size_t)dim));
    int32_t* di = static_cast<int32_t*>(a.raw((size_t)dim * 4));
    float* dv = static_cast<float*>(a.raw((size_t)dim * 4));
    const int32_t over = be->topk_max() < dim ? be->topk_max() + 1 : (int32_t)dim + 1;
    for (int32_t k : {0, -1, over}) {
      bool refused = false;
      try {
        be->topk(dx, k == -1 ? 0 : 1, dim, k, di, dv);
      } catch (const clade::Error& e) {
        refused = e.status() == CLADE_E_INVALID_ARG && std::strstr(e.what(), "topk") != nullptr;
      }
      CHECK_MSG(refused, "%s: topk with k %d of %lld was not refused", be->name(), k, (long long)dim);
    }
  }
}

// matmul_many (q, k and v of one input) and matmul_swiglu (the FFN's gate
// and up) against the CPU backend within matmul's bound (the gate's taken
// on the same weights' plain products: swiglu only scales it), and on the
// second backend exactly as its own matmul per weight and matmul_many then
// swiglu give them. Row counts on both sides of the CUDA backend's
// few-row products (1..8 rows), input widths on both sides of its 16-byte
// loads (multiples of 8 or not).
void test_matmul_many(Backend& cpu, Backend& gpu, clade::TensorType t) {
  const double tol = t == clade::TensorType::F32 ? 1e-5 : t == clade::TensorType::F16 ? 1e-3 : 8e-3;
  for (int64_t n_in : {256, 1000, 250})
    for (int64_t n : {1, 2, 5, 8, 9}) {
      const int64_t outs[3] = {96, 40, 40};
      HostWeight hw[3] = {make_weight(t, n_in, outs[0]), make_weight(t, n_in, outs[1]), make_weight(t, n_in, outs[2])};
      HostWeight hu = make_weight(t, n_in, outs[0]);
      std::vector<float> x = randn((size_t)(n * n_in));
      std::vector<float> many[2][3], sw[2];
      const std::string tag = std::string(type_name(t)) + " " + std::to_string(n) + "x" + std::to_string(n_in);
      Backend* bes[2] = {&cpu, &gpu};
      for (int b = 0; b < 2; b++) {
        Backend& be = *bes[b];
        Arena a(be);
        clade::Weight w[3], wu = be.upload_weight(hu.view());
        const clade::Weight* wp[3];
        float* y[3];
        for (int i = 0; i < 3; i++) {
          w[i] = be.upload_weight(hw[i].view());
          wp[i] = &w[i];
          y[i] = static_cast<float*>(a.raw((size_t)(n * outs[i]) * 4));
        }
        float* dx = a.put(x);
        be.matmul_many(wp, 3, dx, n, y);
        for (int i = 0; i < 3; i++) many[b][i] = a.get(y[i], (size_t)(n * outs[i]));
        float* g = static_cast<float*>(a.raw((size_t)(n * outs[0]) * 4));
        float* u = static_cast<float*>(a.raw((size_t)(n * outs[0]) * 4));
        be.matmul_swiglu(w[0], wu, dx, n, g, u);
        sw[b] = a.get(g, (size_t)(n * outs[0]));
        if (b == 1) {
          // The second backend against itself: one product at a time, and
          // matmul_many then swiglu.
          for (int i = 0; i < 3; i++) {
            be.matmul(w[i], dx, n, y[i]);
            expect_equal("matmul_many " + tag + " weight " + std::to_string(i) + " as matmul",
                         many[1][i], a.get(y[i], (size_t)(n * outs[i])));
          }
          const clade::Weight* gu[2] = {&w[0], &wu};
          float* yg[2] = {g, u};
          be.matmul_many(gu, 2, dx, n, yg);
          be.swiglu(g, u, n * outs[0]);
          expect_equal("matmul_swiglu " + tag + " as matmul_many then swiglu", sw[1], a.get(g, (size_t)(n * outs[0])));
        }
      }
      for (int i = 0; i < 3; i++) {
        std::vector<double> bound((size_t)(n * outs[i]));
        for (int64_t r = 0; r < n; r++)
          for (int64_t o = 0; o < outs[i]; o++) {
            double s = 0;
            for (int64_t k = 0; k < n_in; k++)
              s += std::fabs((double)hw[i].values[(size_t)(o * n_in + k)] * x[(size_t)(r * n_in + k)]);
            bound[(size_t)(r * outs[i] + o)] = tol * s + 1e-6;
          }
        expect_close("matmul_many " + tag + " weight " + std::to_string(i), many[1][i], many[0][i], bound);
      }
      // silu(g) * u within |u| * bound(g) + |silu(g)| * bound(u) (silu's
      // slope is below 1.1 in magnitude), from the CPU's exact products.
      std::vector<double> bound((size_t)(n * outs[0]));
      for (int64_t r = 0; r < n; r++)
        for (int64_t o = 0; o < outs[0]; o++) {
          double sg = 0, su = 0, g = 0, u = 0;
          for (int64_t k = 0; k < n_in; k++) {
            const double xv = x[(size_t)(r * n_in + k)];
            const double gw = hw[0].values[(size_t)(o * n_in + k)], uw = hu.values[(size_t)(o * n_in + k)];
            sg += std::fabs(gw * xv), su += std::fabs(uw * xv), g += gw * xv, u += uw * xv;
          }
          const double silu = g / (1 + std::exp(-g));
          bound[(size_t)(r * outs[0] + o)] = 1.1 * std::fabs(u) * (tol * sg + 1e-6) +
                                             (std::fabs(silu) + 1.1 * tol * sg) * (tol * su + 1e-6) + 1e-6;
        }
      expect_close("matmul_swiglu " + tag, sw[1], sw[0], bound);
    }
}

// The products that carry a norm or a residual add (norm_matmul_many,
// norm_matmul_swiglu, matmul_add) on the second backend exactly as its
// own rmsnorm, matmul_many, matmul_swiglu, matmul and add give them (the
// CUDA backend's few-row kernel norms and adds inside; its cuBLAS path
// adds with beta = 1, checked against the CPU only), and against the CPU
// backend within matmul's bound on the normed input.
void test_fused_products(Backend& cpu, Backend& gpu, clade::TensorType t) {
  const double tol = t == clade::TensorType::F32 ? 1e-5 : t == clade::TensorType::F16 ? 1e-3 : 8e-3;
  const int64_t dim = 1024, n_out = 72;
  for (int64_t n : {1, 3, 8, 17}) {
    const std::string tag = std::string(type_name(t)) + " " + std::to_string(n) + " rows";
    HostWeight hq = make_weight(t, dim, n_out), hk = make_weight(t, dim, 40), hg = make_weight(t, dim, n_out),
               hu = make_weight(t, dim, n_out);
    std::vector<float> x = randn((size_t)(n * dim)), nw = randn((size_t)dim), y0 = randn((size_t)(n * n_out));
    std::vector<float> xn_cpu, q[2], k[2], g[2], ya[2];
    Backend* bes[2] = {&cpu, &gpu};
    for (int b = 0; b < 2; b++) {
      Backend& be = *bes[b];
      Arena a(be);
      clade::Weight wq = be.upload_weight(hq.view()), wk = be.upload_weight(hk.view()),
                    wg = be.upload_weight(hg.view()), wu = be.upload_weight(hu.view());
      float* dx = a.put(x);
      float* dnw = a.put(nw);
      float* xn = static_cast<float*>(a.raw(x.size() * 4));
      float* dq = static_cast<float*>(a.raw((size_t)(n * n_out) * 4));
      float* dk = static_cast<float*>(a.raw((size_t)(n * 40) * 4));
      float* dg = static_cast<float*>(a.raw((size_t)(n * n_out) * 4));
      float* du = static_cast<float*>(a.raw((size_t)(n * n_out) * 4));
      float* dy = a.put(y0);
      float* tmp = static_cast<float*>(a.raw((size_t)(n * n_out) * 4));
      const clade::Weight* w2[2] = {&wq, &wk};
      float* y2[2] = {dq, dk};
      be.norm_matmul_many(dx, dnw, n, dim, 1e-5f, xn, w2, 2, y2);
      q[b] = a.get(dq, (size_t)(n * n_out));
      k[b] = a.get(dk, (size_t)(n * 40));
      be.norm_matmul_swiglu(dx, dnw, n, dim, 1e-5f, xn, wg, wu, dg, du);
      g[b] = a.get(dg, (size_t)(n * n_out));
      be.matmul_add(wq, dx, n, dy, tmp);
      ya[b] = a.get(dy, y0.size());
      if (b == 0) {
        be.rmsnorm(dx, dnw, n, dim, 1e-5f, xn);
        xn_cpu = a.get(xn, x.size());
      } else {
        // The same backend's unfused calls.
        be.rmsnorm(dx, dnw, n, dim, 1e-5f, xn);
        be.matmul_many(w2, 2, xn, n, y2);
        expect_equal("norm_matmul_many " + tag + " as rmsnorm then matmul_many", q[1], a.get(dq, q[1].size()));
        expect_equal("norm_matmul_many " + tag + " (second weight)", k[1], a.get(dk, k[1].size()));
        be.matmul_swiglu(wg, wu, xn, n, dg, du);
        expect_equal("norm_matmul_swiglu " + tag + " as rmsnorm then matmul_swiglu", g[1], a.get(dg, g[1].size()));
        if (n <= 8 && t != clade::TensorType::F32) {
          be.copy_to(dy, y0.data(), y0.size() * 4);
          be.matmul(wq, dx, n, tmp);
          be.add(dy, tmp, n * n_out);
          expect_equal("matmul_add " + tag + " as matmul then add", ya[1], a.get(dy, y0.size()));
        }
      }
    }
    // Against the CPU: the products of the CPU's normed input (rmsnorm
    // itself within 1e-5 relative: test_elementwise).
    auto bound_of = [&](const HostWeight& hw, const std::vector<float>& in, int64_t rows) {
      std::vector<double> bd((size_t)(n * rows));
      for (int64_t r = 0; r < n; r++)
        for (int64_t o = 0; o < rows; o++) {
          double s = 0;
          for (int64_t i = 0; i < dim; i++)
            s += std::fabs((double)hw.values[(size_t)(o * dim + i)] * in[(size_t)(r * dim + i)]);
          bd[(size_t)(r * rows + o)] = (tol + 2e-5) * s + 1e-6;
        }
      return bd;
    };
    expect_close("norm_matmul_many " + tag, q[1], q[0], bound_of(hq, xn_cpu, n_out));
    expect_close("norm_matmul_many " + tag + " (second weight)", k[1], k[0], bound_of(hk, xn_cpu, 40));
    std::vector<double> ba = bound_of(hq, x, n_out);
    for (size_t i = 0; i < ba.size(); i++) ba[i] += 1e-6 * std::fabs(y0[i]);
    expect_close("matmul_add " + tag, ya[1], ya[0], ba);
    // silu(g) * u: g within the gate's bound, scaled by |u| (and silu's
    // slope, below 1.1), plus u's bound times |silu(g)|.
    std::vector<double> bg = bound_of(hg, xn_cpu, n_out), bu = bound_of(hu, xn_cpu, n_out), bs(bg.size());
    for (int64_t r = 0; r < n; r++)
      for (int64_t o = 0; o < n_out; o++) {
        double gv = 0, uv = 0;
        for (int64_t i = 0; i < dim; i++) {
          gv += (double)hg.values[(size_t)(o * dim + i)] * xn_cpu[(size_t)(r * dim + i)];
          uv += (double)hu.values[(size_t)(o * dim + i)] * xn_cpu[(size_t)(r * dim + i)];
        }
        const size_t at = (size_t)(r * n_out + o);
        bs[at] = 1.1 * std::fabs(uv) * bg[at] + (std::fabs(gv / (1 + std::exp(-gv))) + 1.1 * bg[at]) * bu[at] + 1e-6;
      }
    expect_close("norm_matmul_swiglu " + tag, g[1], g[0], bs);
  }
}

// A KV type and head dimension, as the checks' messages name them.
std::string kv_tag(clade_kv_type type, int hd) {
  return std::string(type == CLADE_KV_F32 ? "f32" : type == CLADE_KV_F16 ? "f16" : "bf16") + " hd " +
         std::to_string(hd);
}

// A KV destination of a batched write (KvDest) of layer stride `layer`.
clade::KvDest kv_dest(void* kv, int64_t layer, int64_t tok0, int cap, int start, int n, clade_kv_type type) {
  clade::KvDest kd;
  kd.kv = kv;
  kd.layer_stride = layer;
  kd.tok0 = tok0;
  kd.capacity = cap;
  kd.start = start;
  kd.n = n;
  kd.type = (int32_t)type;
  return kd;
}

// kv_write_prepare / kv_write_run (the CUDA backend: every destination of a
// pass in one launch) against kv_write per destination on the same backend,
// byte for byte: destinations of other capacities and starts, one across
// a KV block boundary, one of no tokens, into layer 1 of two (layer 0
// stays untouched).
void test_kv_write_many(Backend& be, clade_kv_type type, int hd) {
  const std::string tag = kv_tag(type, hd);
  const int kvh = 2;
  struct D {
    int cap, start, n;
  };
  const std::vector<D> ds = {{300, 0, 130}, {5, 2, 3}, {200, 127, 1}, {64, 10, 0}, {140, 120, 20}};
  int tokens = 0;
  for (const D& d : ds) tokens += d.n;
  const size_t es = clade::kv_type_size(type), row = (size_t)kvh * hd;
  std::vector<float> k = randn((size_t)tokens * row), v = randn((size_t)tokens * row);
  Arena a(be);
  float* dk = a.put(k);
  float* dv = a.put(v);
  std::vector<clade::KvDest> dests;
  std::vector<uint8_t*> stores, plain;
  int tok0 = 0;
  for (const D& d : ds) {
    const size_t layer = (size_t)kvh * 2 * d.cap * hd * es;
    const std::vector<uint8_t> zero(2 * layer, 0);
    uint8_t* st = static_cast<uint8_t*>(a.raw(2 * layer));
    uint8_t* pl = static_cast<uint8_t*>(a.raw(layer));
    be.copy_to(st, zero.data(), zero.size());
    be.copy_to(pl, zero.data(), layer);
    be.kv_write(pl, type, d.cap, kvh, hd, d.start, dk + (size_t)tok0 * row, dv + (size_t)tok0 * row, d.n);
    dests.push_back(kv_dest(st, (int64_t)layer, tok0, d.cap, d.start, d.n, type));
    stores.push_back(st);
    plain.push_back(pl);
    tok0 += d.n;
  }
  std::unique_ptr<clade::AttnWork> work = be.make_attn_work();
  be.kv_write_prepare(*work, dests.data(), dests.size());
  be.kv_write_run(*work, 1, kvh, hd, dk, dv);
  for (size_t i = 0; i < ds.size(); i++) {
    const size_t layer = (size_t)kvh * 2 * ds[i].cap * hd * es;
    const std::vector<uint8_t> got = a.get(stores[i], 2 * layer), want = a.get(plain[i], layer);
    expect_equal("kv_write_run layer 1, destination " + std::to_string(i) + " " + tag,
                 std::vector<uint8_t>(got.begin() + (long)layer, got.end()), want);
    expect_equal("kv_write_run layer 0 untouched, destination " + std::to_string(i) + " " + tag,
                 std::vector<uint8_t>(got.begin(), got.begin() + (long)layer), std::vector<uint8_t>(layer, 0));
  }
}

// A step's logits and greedy tokens in one call (norm_matmul_argmax; the
// CUDA backend with CLADE_CUDA_GEMV_ARGMAX=1 picks the tokens inside its
// few-row product): the logits norm_matmul_many's, bit for bit, and the
// tokens argmax's of them, with two largest logits in every row from
// equal weight rows and, from 3 rows, a row of NaN (-1). equal_rows: the
// product gives equal weight rows equal logits, so that the tie is there
// and the first is picked (the CUDA backend's few-row product; the CPU's
// tail rows, or cuBLAS's, may differ in the last bit). One backend
// against itself and the rule.
void test_matmul_argmax(Backend& be, clade::TensorType t, bool equal_rows) {
  const int64_t dim = 256;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n_out : {1, 31, 1000, 32001})
    for (int64_t n : {1, 3, 8}) {
      const std::string tag = std::string("matmul_argmax ") + be.name() + " " + type_name(t) + " " +
                              std::to_string(n) + " x " + std::to_string(n_out);
      HostWeight hw = make_weight(t, dim, n_out);
      // Rows tie_a < tie_b: all 0.5, far above the others' logits for the
      // positive inputs and norm weights below.
      const int64_t tie_a = n_out / 3, tie_b = n_out - 1;
      const std::vector<float> half((size_t)dim, 0.5f);
      for (int64_t o : {tie_a, tie_b})
        clade::quantize_row(t, half.data(), hw.bytes.data() + (uint64_t)o * row_bytes(t, dim), dim);
      std::vector<float> x = randn((size_t)(n * dim)), nw = randn((size_t)dim);
      for (float& v : x) v = std::fabs(v) + 0.5f;
      for (float& v : nw) v = std::fabs(v) + 0.5f;
      if (n >= 3) x[(size_t)(2 * dim + 5)] = nan;
      Arena a(be);
      clade::Weight w = be.upload_weight(hw.view());
      float* dx = a.put(x);
      float* dnw = a.put(nw);
      float* xn = static_cast<float*>(a.raw(x.size() * 4));
      float* dy = static_cast<float*>(a.raw((size_t)(n * n_out) * 4));
      float* dy2 = static_cast<float*>(a.raw((size_t)(n * n_out) * 4));
      int32_t* dtok = static_cast<int32_t*>(a.raw((size_t)n * 4));
      int32_t* dtok2 = static_cast<int32_t*>(a.raw((size_t)n * 4));
      for (int run = 0; run < 2; run++) {  // (twice: the CUDA backend's block counter is left at 0)
        be.norm_matmul_argmax(dx, dnw, n, dim, 1e-5f, xn, w, dy, dtok);
        const clade::Weight* ws = &w;
        be.norm_matmul_many(dx, dnw, n, dim, 1e-5f, xn, &ws, 1, &dy2);
        be.argmax(dy2, n, n_out, dtok2);
        const std::vector<float> y = a.get(dy, (size_t)(n * n_out));
        const std::vector<int32_t> tok = a.get(dtok, (size_t)n);
        expect_equal(tag + " logits", y, a.get(dy2, (size_t)(n * n_out)));
        expect_equal(tag + " tokens", tok, a.get(dtok2, (size_t)n));
        for (int64_t r = 0; r < n; r++) {
          const int32_t at = host_argmax(y.data() + r * n_out, n_out);
          const float ya = y[(size_t)(r * n_out + tie_a)], yb = y[(size_t)(r * n_out + tie_b)];
          const bool nan_row = n >= 3 && r == 2;
          if (equal_rows && !nan_row && n_out > 1)
            CHECK_MSG(ya == yb, "%s: row %lld's equal weight rows give %.9g and %.9g", tag.c_str(), (long long)r,
                      (double)ya, (double)yb);
          const int32_t want = nan_row ? -1 : ya >= yb ? (int32_t)tie_a : (int32_t)tie_b;
          CHECK_MSG(tok[(size_t)r] == at && at == want, "%s run %d: row %lld's token %d, %d by the rule, %d planted",
                    tag.c_str(), run, (long long)r, tok[(size_t)r], at, want);
        }
      }
    }
}

// A layer's attention rows and their output product in one call
// (merge_matmul_add; the CUDA backend with CLADE_CUDA_GEMV_MERGE=1 merges
// the rows inside its few-row product): the merged rows and the residual
// stream those of merge then matmul_add, bit for bit, for rows of 0 to 3
// partials (some of logsumexp -inf, some of weight 0 beside the others),
// head dims 64, 80, 84 (3 heads: rows of 252, not whole 8s) and 128, 1 to
// 8 tokens. One backend against itself.
void test_merge_matmul(Backend& be, clade::TensorType t) {
  const int n_out = 96;
  std::mt19937 rng(7);
  for (auto [n_heads, hd] : {std::pair<int, int>{4, 64}, {4, 80}, {3, 84}, {4, 128}})
    for (int64_t n : {1, 3, 8}) {
      const std::string tag = std::string("merge_matmul_add ") + be.name() + " " + type_name(t) + " hd " +
                              std::to_string(hd) + " " + std::to_string(n) + " tokens";
      const int64_t k = (int64_t)n_heads * hd, rows = n * n_heads, n_part = 3 * rows;
      HostWeight hw = make_weight(t, k, n_out);
      std::vector<float> part_o = randn((size_t)(n_part * hd)), y0 = randn((size_t)(n * n_out));
      std::vector<double> part_lse((size_t)n_part);
      for (double& v : part_lse) v = (double)(rng() % 1000) / 100.0 - 5.0;
      for (int64_t i = 0; i < n_part; i += 7) part_lse[(size_t)i] = -INFINITY;
      for (int64_t i = 3; i < n_part; i += 11) part_lse[(size_t)i] = -1000.0;  // exp underflows to 0
      std::vector<int32_t> begin(1, 0), list;
      for (int64_t r = 0; r < rows; r++) {
        const int c = (int)((r * 5 + 1) % 4);  // 0..3 partials
        for (int j = 0; j < c; j++) list.push_back((int32_t)(rng() % n_part));
        begin.push_back((int32_t)list.size());
      }
      Arena a(be);
      clade::Weight w = be.upload_weight(hw.view());
      clade::MergeList ml;
      ml.n_out_rows = rows;
      ml.part_begin = a.put(begin);
      ml.part_rows = a.put(list);
      ml.part_o = a.put(part_o);
      ml.part_lse = a.put(part_lse);
      float* out = static_cast<float*>(a.raw((size_t)(rows * hd) * 4));
      float* out2 = static_cast<float*>(a.raw((size_t)(rows * hd) * 4));
      float* y = a.put(y0);
      float* y2 = a.put(y0);
      float* tmp = static_cast<float*>(a.raw((size_t)(n * n_out) * 4));
      be.merge_matmul_add(ml, hd, out, w, n, y, tmp);
      be.merge(ml, hd, out2);
      be.matmul_add(w, out2, n, y2, tmp);
      expect_equal(tag + " rows", a.get(out, (size_t)(rows * hd)), a.get(out2, (size_t)(rows * hd)));
      expect_equal(tag + " product", a.get(y, (size_t)(n * n_out)), a.get(y2, (size_t)(n * n_out)));
    }
}

// A CUDA backend made with the switch `name` set to `value`, whose
// settings line says `says`.
std::unique_ptr<Backend> cuda_backend_with(const char* name, const char* value, const char* says) {
  ScopedEnv e(name, value);
  std::unique_ptr<Backend> be = clade::make_cuda_backend();
  const std::string line = be->settings();
  CHECK_MSG(line.find(says) != std::string::npos, "settings '%s' do not say '%s'", line.c_str(), says);
  return be;
}

// Reads of every size back as they were written: the CUDA backend reads up
// to 1 MiB through pinned memory (unless CLADE_CUDA_PINNED_READ=0) and
// more straight into the caller's, here at an odd address too; its
// settings say which.
void test_reads(Backend& be, bool pinned) {
  const std::string line = be.settings();
  const char* want = pinned ? "reads through pinned memory" : "reads straight";
  CHECK_MSG(line.find(want) != std::string::npos, "settings '%s' do not say '%s'", line.c_str(), want);
  for (size_t bytes : {(size_t)4, (size_t)1000, (size_t)1 << 20, ((size_t)1 << 20) + 4, (size_t)3 << 20}) {
    std::vector<uint8_t> src(bytes), got(bytes + 1, 0);
    for (size_t i = 0; i < bytes; i++) src[i] = (uint8_t)(i * 131 + bytes);
    void* d = be.alloc(bytes);
    be.copy_to(d, src.data(), bytes);
    be.copy_from(got.data() + 1, d, bytes);
    be.release(d);
    CHECK_MSG(std::memcmp(got.data() + 1, src.data(), bytes) == 0 && got[0] == 0, "a read of %zu bytes (%s)", bytes,
              pinned ? "pinned" : "straight");
  }
}

// The copies the second backend's kernels keep of their outputs for the next
// product (the CUDA backend: rmsnorm, swiglu and merge also store their
// output as f16 or bf16 for cuBLAS, and the products of one input narrow
// it once): a product right after each of them, and after the copy went
// stale (its input rewritten by add, by a product's output, and by
// copy_to), gives exactly what the same product gives on the same values
// uploaded afresh. One backend against itself: the plain path is its own.
void test_fused_copies(Backend& be, clade::TensorType t) {
  const int64_t n = 4, dim = 256, n_out = 96;
  HostWeight hw = make_weight(t, dim, n_out), hw2 = make_weight(t, n_out, dim);
  std::vector<float> x = randn((size_t)(n * dim)), w = randn((size_t)dim), up = randn((size_t)(n * dim));
  Arena a(be);
  clade::Weight W = be.upload_weight(hw.view()), W2 = be.upload_weight(hw2.view());
  float* dx = a.put(x);
  float* dw = a.put(w);
  float* dup = a.put(up);
  float* dy = static_cast<float*>(a.raw(x.size() * 4));
  float* dfresh = static_cast<float*>(a.raw(x.size() * 4));
  float* dout = static_cast<float*>(a.raw((size_t)(n * n_out) * 4));
  // The product of dy as it stands, then of its values uploaded afresh.
  auto check_product = [&](const std::string& what) {
    be.matmul(W, dy, n, dout);
    std::vector<float> got = a.get(dout, (size_t)(n * n_out));
    std::vector<float> y = a.get(dy, x.size());
    be.copy_to(dfresh, y.data(), y.size() * 4);
    be.matmul(W, dfresh, n, dout);
    expect_equal(std::string("product after ") + what + " " + type_name(t), got, a.get(dout, (size_t)(n * n_out)));
  };
  be.rmsnorm(dx, dw, n, dim, 1e-5f, dy);
  check_product("rmsnorm");
  be.rmsnorm(dx, dw, n, dim, 1e-5f, dy);
  be.add(dy, dx, n * dim);
  check_product("rmsnorm then add");
  be.rmsnorm(dx, dw, n, dim, 1e-5f, dy);
  be.matmul(W, dy, n, dout);
  be.matmul(W2, dout, n, dy);  // a product's output over the copied input
  check_product("a product writing its input");
  be.rmsnorm(dx, dw, n, dim, 1e-5f, dy);
  be.copy_to(dy, up.data(), up.size() * 4);
  check_product("copy_to");
  be.copy_to(dy, x.data(), x.size() * 4);
  be.swiglu(dy, dup, n * dim);
  check_product("swiglu");
  // merge: 64 rows of head_dim 4 from one partial each (weight 1).
  std::vector<int32_t> begin((size_t)(n * dim / 4) + 1), prow((size_t)(n * dim / 4));
  for (size_t i = 0; i < prow.size(); i++) begin[i + 1] = (int32_t)i + 1, prow[i] = (int32_t)i;
  std::vector<double> lse(prow.size(), 0.5);
  clade::MergeList ml;
  ml.n_out_rows = (int64_t)prow.size();
  ml.part_begin = a.put(begin);
  ml.part_rows = a.put(prow);
  ml.part_o = dup;
  ml.part_lse = a.put(lse);
  be.merge(ml, 4, dy);
  check_product("merge");
}

void test_rope(Backend& cpu, Backend& gpu, bool neox, float pos_scale) {
  const int64_t n = 6;
  const int n_heads = 3, hd = 64;
  std::vector<float> inv_freq(hd / 2);
  for (int i = 0; i < hd / 2; i++) inv_freq[(size_t)i] = std::pow(10000.0f, -2.0f * i / hd);
  std::vector<int32_t> pos = {0, 1, 2, 17, 4095, 31999};
  clade::RopeParams p;
  p.head_dim = hd;
  p.neox = neox;
  p.pos_scale = pos_scale;
  std::vector<float> x = randn((size_t)(n * n_heads * hd));
  std::vector<float> out[2];
  Backend* bes[2] = {&cpu, &gpu};
  for (int b = 0; b < 2; b++) {
    Arena a(*bes[b]);
    float* dx = a.put(x);
    p.inv_freq = a.put(inv_freq);  // positions and frequencies in backend memory
    bes[b]->rope(dx, n, n_heads, a.put(pos), p);
    out[b] = a.get(dx, x.size());
  }
  // Rotations keep magnitudes O(|x|): bound by the pair's size.
  std::vector<double> bound(x.size());
  for (size_t i = 0; i < x.size(); i++) bound[i] = 1e-5 * (std::fabs(out[0][i]) + 1.0) + 1e-6;
  const std::string tag = std::string(neox ? "neox" : "normal") + " scale " + std::to_string(pos_scale);
  expect_close("rope " + tag, out[1], out[0], bound);
  // rope_qk: q (n_heads) and k (1 head) in one call, bit for bit each
  // backend's two ropes.
  std::vector<float> k = randn((size_t)(n * hd));
  for (int b = 0; b < 2; b++) {
    Arena a(*bes[b]);
    float *dq = a.put(x), *dk = a.put(k), *pq = a.put(x), *pk = a.put(k);
    const int32_t* dpos = a.put(pos);
    p.inv_freq = a.put(inv_freq);
    bes[b]->rope_qk(dq, n_heads, dk, 1, n, dpos, p);
    bes[b]->rope(pq, n, n_heads, dpos, p);
    bes[b]->rope(pk, n, 1, dpos, p);
    const std::string who = std::string(bes[b]->name()) + " " + tag;
    expect_equal("rope_qk q, " + who, a.get(dq, x.size()), a.get(pq, x.size()));
    expect_equal("rope_qk k, " + who, a.get(dk, k.size()), a.get(pk, k.size()));
    if (b == 1) expect_close("rope_qk q against the cpu, " + tag, a.get(dq, x.size()), out[0], bound);
  }
}

// kv_write into a span in two pieces, then attention problems over it (300
// keys: several key tiles of the CUDA kernel, and more than two of its
// smallest key chunks, so split into chunks there, as a step with few row
// groups is): full rows, causal
// limits (0 included), an empty span, a span of one key, the same rows
// split in two key ranges and merged, and the causal rows split over two
// problems.
void test_attention(Backend& cpu, Backend& gpu, clade_kv_type type, int hd) {
  const std::string tag = kv_tag(type, hd);
  const int kvh = 2, cap = 350, len = 300, n_q = 12;  // cap: a narrower last block
  const size_t es = clade::kv_type_size(type);
  std::vector<float> kin = randn((size_t)len * kvh * hd), vin = randn((size_t)len * kvh * hd);
  std::vector<float> q = randn((size_t)n_q * hd);
  const float scale = 1.0f / std::sqrt((float)hd);

  // Row sets and limits (host); outputs are laid out per problem.
  std::vector<int32_t> rows_all = {3, 0, 11, 5, 5, 8, 1, 2, 9, 10, 4, 6, 7};  // a repeated row too
  std::vector<int32_t> limits = {0, 1, 63, 64, 65, 128, 199, 200, 257, 0, 130, 2, 300};
  // More rows than one work unit of the CUDA kernel takes (16), so that a
  // problem spans several row groups.
  for (int i = 0; i < 24; i++) {
    rows_all.push_back((i * 7) % n_q);
    limits.push_back((i * 37) % (len + 1));
  }
  const int nr = (int)rows_all.size();
  const int split = 128;  // keys [0, split) and [split, len): a KV block boundary
  // Tree masks (keys from kMaskBase on, limits <= kMaskBase + 64): a
  // pattern per row, some rows with every masked key hidden.
  const int kMaskBase = 250;
  std::vector<uint64_t> masks((size_t)nr);
  for (int r = 0; r < nr; r++)
    masks[(size_t)r] = r % 5 == 4 ? 0 : (0x9e3779b97f4a7c15ull * (uint64_t)(r + 1)) ^ ((uint64_t)r << 17);

  struct Out {
    std::vector<uint8_t> kvbytes;
    std::vector<float> o_full, o_causal, o_empty, o_one, o_rows_split, merged, o_mask, o_all, merged_cpu_parts;
    std::vector<double> lse_full, lse_causal, lse_empty, lse_one, lse_rows_split, lse_mask, lse_all;
  } out[2];
  Backend* bes[2] = {&cpu, &gpu};
  for (int b = 0; b < 2; b++) {
    Backend& be = *bes[b];
    Arena a(be);
    const size_t span_bytes = (size_t)kvh * 2 * cap * hd * es;
    uint8_t* KV = static_cast<uint8_t*>(a.raw(span_bytes));
    std::vector<uint8_t> zero(span_bytes, 0);
    be.copy_to(KV, zero.data(), span_bytes);
    float* dk = a.put(kin);
    float* dv = a.put(vin);
    const int first = 120;
    be.kv_write(KV, type, cap, kvh, hd, 0, dk, dv, first);
    be.kv_write(KV, type, cap, kvh, hd, first, dk + (size_t)first * kvh * hd, dv + (size_t)first * kvh * hd,
                len - first);
    out[b].kvbytes = a.get(KV, span_bytes);

    float* dq = a.put(q);
    int32_t* drows = a.put(rows_all);
    int32_t* dlim = a.put(limits);
    // Outputs: 8 slots of nr rows: full, causal, empty, one key, keys split
    // A, keys split B, causal with its rows split over two problems, causal
    // under a tree mask.
    float* o = static_cast<float*>(a.raw((size_t)8 * nr * hd * 4));
    double* lse = static_cast<double*>(a.raw((size_t)8 * nr * sizeof(double)));
    uint64_t* dmask = a.put(masks);
    const size_t head1 = (size_t)1 * 2 * cap * hd * es;  // KV head 1
    // key0: 0 or a block boundary (the rest of the span from there is a span)
    auto problem = [&](int slot, size_t key0, int plen, const int32_t* lim) {
      clade::AttnProblem p;
      p.rows = drows;
      p.n_rows = nr;
      p.kv = KV + head1 + (size_t)clade::kv_k_row((int64_t)key0, cap) * hd * es;
      p.cap = cap - (int32_t)key0;
      p.len = plen;
      p.limit = lim;
      p.o = o + (size_t)slot * nr * hd;
      p.lse = lse + (size_t)slot * nr;
      return p;
    };
    std::vector<clade::AttnProblem> probs = {
        problem(0, 0, len, nullptr),           problem(1, 0, len, dlim),
        problem(2, 0, 0, nullptr),             problem(3, 0, 1, nullptr),
        problem(4, 0, split, nullptr),         problem(5, (size_t)split, len - split, nullptr),
    };
    probs.insert(probs.begin() + 2, clade::AttnProblem{});  // a problem with no rows is skipped
    const int cut = 6;
    for (int part = 0; part < 2; part++) {
      clade::AttnProblem p = problem(6, 0, len, dlim);
      const int r0 = part ? cut : 0;
      p.rows += r0;
      p.limit += r0;
      p.n_rows = part ? nr - cut : cut;
      p.o += (size_t)r0 * hd;
      p.lse += r0;
      probs.push_back(p);
    }
    {  // a token tree's mask over the keys from kMaskBase on
      clade::AttnProblem p = problem(7, 0, len, dlim);
      p.mask = dmask;
      p.mask_base = kMaskBase;
      probs.push_back(p);
    }
    be.attention(dq, hd, scale, type, probs.data(), probs.size());
    out[b].o_mask = a.get(o + (size_t)7 * nr * hd, (size_t)nr * hd);
    out[b].lse_mask = a.get(lse + 7 * nr, (size_t)nr);
    out[b].o_full = a.get(o, (size_t)nr * hd);
    out[b].lse_full = a.get(lse, (size_t)nr);
    out[b].o_causal = a.get(o + (size_t)nr * hd, (size_t)nr * hd);
    out[b].lse_causal = a.get(lse + nr, (size_t)nr);
    out[b].o_empty = a.get(o + (size_t)2 * nr * hd, (size_t)nr * hd);
    out[b].lse_empty = a.get(lse + 2 * nr, (size_t)nr);
    out[b].o_one = a.get(o + (size_t)3 * nr * hd, (size_t)nr * hd);
    out[b].lse_one = a.get(lse + 3 * nr, (size_t)nr);
    out[b].o_rows_split = a.get(o + (size_t)6 * nr * hd, (size_t)nr * hd);
    out[b].lse_rows_split = a.get(lse + 6 * nr, (size_t)nr);

    // Merge the two key splits: output row i from partial rows 4nr+i and
    // 5nr+i; add one output row with no partials and one whose only
    // partial saw nothing (slot 2).
    std::vector<int32_t> begin = {0}, prow;
    for (int i = 0; i < nr; i++) {
      prow.push_back(5 * nr + i);  // order reversed on purpose
      prow.push_back(4 * nr + i);
      begin.push_back((int32_t)prow.size());
    }
    begin.push_back((int32_t)prow.size());  // no partials
    prow.push_back(2 * nr);
    begin.push_back((int32_t)prow.size());  // one partial with lse = -inf
    clade::MergeList ml;
    ml.n_out_rows = nr + 2;
    ml.part_begin = a.put(begin);
    ml.part_rows = a.put(prow);
    ml.part_o = o;
    ml.part_lse = lse;
    float* merged = static_cast<float*>(a.raw((size_t)(nr + 2) * hd * 4));
    be.merge(ml, hd, merged);
    out[b].merged = a.get(merged, (size_t)(nr + 2) * hd);
    out[b].o_all = a.get(o, (size_t)8 * nr * hd);
    out[b].lse_all = a.get(lse, (size_t)8 * nr);
    if (b == 1) {
      // The same merge of the first backend's partial rows: merge's own
      // arithmetic, apart from the attention's.
      ml.part_o = a.put(out[0].o_all);
      ml.part_lse = a.put(out[0].lse_all);
      be.merge(ml, hd, merged);
      out[b].merged_cpu_parts = a.get(merged, (size_t)(nr + 2) * hd);
    }
  }

  // The stored elements, each backend's layout read back as [head][key][d]
  // for K and for V: the CPU keeps K in tiles (cpu/kernels.h), CUDA in rows
  // (backend.h); V rows in both.
  auto stored = [&](const std::vector<uint8_t>& bytes, bool tiles) {
    std::vector<uint8_t> e((size_t)2 * kvh * len * hd * es);
    for (int h = 0; h < kvh; h++)
      for (int j = 0; j < len; j++)
        for (int d = 0; d < hd; d++) {
          const size_t head = (size_t)h * 2 * cap * hd, at = (((size_t)h * len + j) * hd + d) * es;
          const size_t k = head + (tiles ? (size_t)clade::kv_k_elem(j, d, cap, hd)
                                         : (size_t)clade::kv_k_row(j, cap) * hd + d);
          const size_t v = head + (size_t)clade::kv_v_row(j, cap) * hd + d;
          std::memcpy(&e[at], &bytes[k * es], es);
          std::memcpy(&e[(size_t)kvh * len * hd * es + at], &bytes[v * es], es);
        }
    return e;
  };
  // (--cpu-vs-cpu: the second backend is a CPU one, in tiles too)
  const bool gpu_tiles = std::strcmp(gpu.name(), "cpu") == 0;
  expect_equal("kv_write " + tag, stored(out[1].kvbytes, gpu_tiles), stored(out[0].kvbytes, true));
  expect_rel("attention full o " + tag, out[1].o_full, out[0].o_full, 0, attn_tol(type));
  expect_rel("attention full lse " + tag, out[1].lse_full, out[0].lse_full, 0, attn_tol(type));
  expect_rel("attention causal o " + tag, out[1].o_causal, out[0].o_causal, 0, attn_tol(type));
  expect_rel("attention causal lse " + tag, out[1].lse_causal, out[0].lse_causal, 0, attn_tol(type));
  expect_rel("attention one key o " + tag, out[1].o_one, out[0].o_one, 0, attn_tol(type));
  expect_rel("attention one key lse " + tag, out[1].lse_one, out[0].lse_one, 0, attn_tol(type));
  expect_rel("attention rows split o " + tag, out[1].o_rows_split, out[0].o_causal, 0, attn_tol(type));
  expect_rel("attention rows split lse " + tag, out[1].lse_rows_split, out[0].lse_causal, 0, attn_tol(type));
  expect_rel("attention tree mask o " + tag, out[1].o_mask, out[0].o_mask, 0, attn_tol(type));
  expect_rel("attention tree mask lse " + tag, out[1].lse_mask, out[0].lse_mask, 0, attn_tol(type));
  // A row whose limit stops at the mask's base sees what the causal one
  // does; one with a hidden key past it sees less (a smaller lse).
  for (int r = 0; r < nr; r++) {
    const int lim = limits[(size_t)r];
    const uint64_t seen = lim > kMaskBase ? masks[(size_t)r] | (lim - kMaskBase >= 64 ? 0 : ~0ull << (lim - kMaskBase))
                                          : ~0ull;
    for (int b = 0; b < 2; b++) {
      if (lim <= kMaskBase) CHECK(out[b].lse_mask[(size_t)r] == out[b].lse_causal[(size_t)r]);
      else if (seen != ~0ull) CHECK(out[b].lse_mask[(size_t)r] < out[b].lse_causal[(size_t)r]);
    }
  }
  // Rows that see nothing: lse -inf, o exactly 0, on both backends.
  for (int b = 0; b < 2; b++) {
    for (int r = 0; r < nr; r++) {
      CHECK(std::isinf(out[b].lse_empty[(size_t)r]) && out[b].lse_empty[(size_t)r] < 0);
      if (limits[(size_t)r] == 0) CHECK(std::isinf(out[b].lse_causal[(size_t)r]) && out[b].lse_causal[(size_t)r] < 0);
    }
    for (float v : out[b].o_empty) CHECK(v == 0.0f);
    for (int r = 0; r < nr; r++)
      if (limits[(size_t)r] == 0)
        for (int d = 0; d < hd; d++) CHECK(out[b].o_causal[(size_t)r * hd + d] == 0.0f);
  }
  expect_rel("merge " + tag, out[1].merged_cpu_parts, out[0].merged, 1e-5, 1e-6);
  // Split + merge on the GPU equals one pass over the whole span (CPU).
  std::vector<float> merged_rows(out[1].merged.begin(), out[1].merged.begin() + (size_t)nr * hd);
  expect_rel("split+merge vs full " + tag, merged_rows, out[0].o_full, 0, attn_tol(type));
  for (int d = 0; d < 2 * hd; d++) CHECK(out[1].merged[(size_t)nr * hd + d] == 0.0f);
}

// rope_kv_write (the CUDA backend: RoPE of q and k and the KV write in one
// launch) exactly as the same backend's rope_qk then kv_write_run: q and k
// rotated in place, every destination's K and V bytes, two tokens with no
// destination (rotated only), and a pass where a token has two
// destinations (the CUDA backend falls back to the two calls there).
void test_rope_kv_write(Backend& be, clade_kv_type type, int hd, bool neox) {
  const std::string tag = kv_tag(type, hd) + (neox ? " neox" : "");
  const int kvh = 2, nh = 4;
  struct D {
    int cap, start, n, tok0;
  };
  for (bool twice : {false, true}) {
    std::vector<D> ds = {{300, 0, 130, 0}, {5, 2, 3, 130}, {200, 127, 1, 133}, {140, 120, 20, 134}};
    if (twice) ds.push_back({64, 10, 2, 5});  // tokens 5 and 6 again
    const int T = 156;                        // tokens 154 and 155: no destination
    const size_t es = clade::kv_type_size(type), row = (size_t)kvh * hd;
    std::vector<float> q = randn((size_t)T * nh * hd), k = randn((size_t)T * row), v = randn((size_t)T * row);
    std::vector<int32_t> pos((size_t)T);
    for (int t = 0; t < T; t++) pos[(size_t)t] = (t * 37) % 500;
    std::vector<float> inv((size_t)hd / 2);
    for (int i = 0; i < hd / 2; i++) inv[(size_t)i] = std::pow(10000.0f, -2.0f * (float)i / (float)hd);
    Arena a(be);
    std::vector<float> got_q[2], got_k[2];
    std::vector<std::vector<uint8_t>> kv[2];
    for (int way = 0; way < 2; way++) {
      float* dq = a.put(q);
      float* dk = a.put(k);
      float* dv = a.put(v);
      std::vector<clade::KvDest> dests;
      std::vector<uint8_t*> stores;
      for (const D& d : ds) {
        const size_t bytes = 2 * (size_t)kvh * 2 * d.cap * hd * es;  // two layers
        const std::vector<uint8_t> zero(bytes, 0);
        uint8_t* st = static_cast<uint8_t*>(a.raw(bytes));
        be.copy_to(st, zero.data(), bytes);
        dests.push_back(kv_dest(st, (int64_t)(bytes / 2), d.tok0, d.cap, d.start, d.n, type));
        stores.push_back(st);
      }
      clade::RopeParams rp;
      rp.head_dim = hd;
      rp.neox = neox;
      rp.pos_scale = 0.5f;
      rp.inv_freq = a.put(inv);
      const int32_t* dpos = a.put(pos);
      std::unique_ptr<clade::AttnWork> work = be.make_attn_work();
      be.kv_write_prepare(*work, dests.data(), dests.size());
      if (way == 0) {
        be.rope_kv_write(*work, 1, hd, dq, nh, dk, dv, kvh, T, dpos, rp);
      } else {
        be.rope_qk(dq, nh, dk, kvh, T, dpos, rp);
        be.kv_write_run(*work, 1, kvh, hd, dk, dv);
      }
      got_q[way] = a.get(dq, q.size());
      got_k[way] = a.get(dk, k.size());
      for (size_t i = 0; i < ds.size(); i++)
        kv[way].push_back(a.get(stores[i], 2 * (size_t)kvh * 2 * ds[i].cap * hd * es));
    }
    const std::string t2 = tag + (twice ? ", a token written twice" : "");
    expect_equal("rope_kv_write q " + t2, got_q[0], got_q[1]);
    expect_equal("rope_kv_write k " + t2, got_k[0], got_k[1]);
    for (size_t i = 0; i < ds.size(); i++)
      expect_equal("rope_kv_write destination " + std::to_string(i) + " " + t2, kv[0][i], kv[1][i]);
    CHECK(got_q[0] != q);  // (rotated at all)
  }
}

// A shared node's problem: many rows (several of the tensor-core kernels'
// 64- or 128-row units, the last one partly filled) against a long span whose keys
// are split into chunks, with causal limits, rows that see nothing, rows
// that see all, and a tree mask on a second problem. len: the span's keys
// (1400; 12000 makes the CUDA backend's 512-key chunk floor bind: 6 row
// groups x 12000 keys over up to 140 multiprocessors is above 512 keys
// a unit).
void test_attention_many_rows(Backend& cpu, Backend& gpu, clade_kv_type type, int hd, int len = 1400) {
  const std::string tag = kv_tag(type, hd) + (len == 1400 ? "" : " len " + std::to_string(len));
  const int cap = len + 100, nr = 150, n_q = 200, mask_base = len - 50;
  std::vector<float> kin = randn((size_t)len * hd), vin = randn((size_t)len * hd), q = randn((size_t)n_q * hd, 2.0f);
  std::vector<int32_t> rows(nr), lim(nr), lim_mask(nr);
  std::vector<uint64_t> masks(nr);
  for (int r = 0; r < nr; r++) {
    rows[(size_t)r] = (r * 13) % n_q;
    lim[(size_t)r] = r % 7 == 3 ? 0 : r % 5 == 1 ? len : (r * 97) % (len + 1);
    lim_mask[(size_t)r] = mask_base + (r * 11) % 51;
    masks[(size_t)r] = (0x9e3779b97f4a7c15ull * (uint64_t)(r + 3)) ^ ((uint64_t)r << 29);
  }
  const float scale = 1.0f / std::sqrt((float)hd);
  std::vector<float> o[2];
  std::vector<double> lse[2];
  Backend* bes[2] = {&cpu, &gpu};
  for (int b = 0; b < 2; b++) {
    Backend& be = *bes[b];
    Arena a(be);
    const size_t es = clade::kv_type_size(type), span_bytes = (size_t)2 * cap * hd * es;
    void* KV = a.raw(span_bytes);
    be.kv_write(KV, type, cap, 1, hd, 0, a.put(kin), a.put(vin), len);
    float* dq = a.put(q);
    float* dout = static_cast<float*>(a.raw((size_t)2 * nr * hd * 4));
    double* dlse = static_cast<double*>(a.raw((size_t)2 * nr * sizeof(double)));
    clade::AttnProblem p[2];
    for (int i = 0; i < 2; i++) {
      p[i].rows = a.put(rows);
      p[i].n_rows = nr;
      p[i].kv = KV;
      p[i].cap = cap;
      p[i].len = len;
      p[i].limit = a.put(i ? lim_mask : lim);
      p[i].o = dout + (size_t)i * nr * hd;
      p[i].lse = dlse + (size_t)i * nr;
    }
    p[1].mask = a.put(masks);
    p[1].mask_base = mask_base;
    be.attention(dq, hd, scale, type, p, 2);
    o[b] = a.get(dout, (size_t)2 * nr * hd);
    lse[b] = a.get(dlse, (size_t)2 * nr);
    // The same problems through one prepared work, run three times (the
    // CUDA backend reuses its combine counters from launch to launch):
    // the same numbers each time.
    std::unique_ptr<clade::AttnWork> work = be.make_attn_work();
    clade::AttnSet set;
    set.type = type;
    set.problems = p;
    set.n_problems = 2;
    be.attention_prepare(*work, hd, scale, &set, 1);
    for (int run = 0; run < 3; run++) {
      be.attention_run(*work, 0, dq);
      expect_equal(std::string(be.name()) + " attention many rows run " + std::to_string(run) + " " + tag,
                   a.get(dout, (size_t)2 * nr * hd), o[b]);
    }
  }
  expect_rel("attention many rows o " + tag, o[1], o[0], 0, attn_tol(type));
  expect_rel("attention many rows lse " + tag, lse[1], lse[0], 0, attn_tol(type));
}

// Problems with tails (AttnTail): after the node's keys, ranges of rows go
// on over the keys of their own spans in the same softmax. Tails that cut
// across the kernel's 16-row groups, a problem split into key chunks (the
// tails go with the last), causal node limits, a problem with no keys of
// its own, tail rows that see none of the tail and rows that see nothing.
// Tails out of order or outside their problem are refused on both
// backends, which stay usable. A backend that takes no tails
// (attention_tails() false: the CUDA backend, see cuda_backend.cpp) must
// refuse them.
void test_attention_tails(Backend& cpu, Backend& gpu, clade_kv_type type, int hd) {
  const std::string tag = kv_tag(type, hd);
  const int cap = 300, len = 260, n_q = 40, nr = 40;
  const int tcap[4] = {37, 130, 5, 64}, tlen[4] = {37, 129, 5, 40};
  const int trow0[4] = {0, 4, 25, 33}, trow1[4] = {4, 22, 33, 40};
  const size_t es = clade::kv_type_size(type);
  std::vector<float> q = randn((size_t)n_q * hd);
  const float scale = 1.0f / std::sqrt((float)hd);
  std::vector<int32_t> rows(nr), node_lim(nr), tail_lim(nr, 0);
  for (int r = 0; r < nr; r++) {
    rows[(size_t)r] = (r * 11) % n_q;
    node_lim[(size_t)r] = (r * 53) % (len + 1);
  }
  node_lim[34] = 0;  // with tail_lim[34] = 0 below: sees nothing
  for (int t = 0; t < 4; t++)
    for (int r = trow0[t]; r < trow1[t]; r++) tail_lim[(size_t)r] = (r * 7 + t) % (tlen[t] + 1);
  tail_lim[5] = 0;
  tail_lim[34] = 0;
  tail_lim[26] = tlen[2];
  std::vector<std::vector<float>> tk(4), tv(4);
  for (int t = 0; t < 4; t++) tk[(size_t)t] = randn((size_t)tlen[t] * hd), tv[(size_t)t] = randn((size_t)tlen[t] * hd);
  std::vector<float> kin = randn((size_t)len * hd), vin = randn((size_t)len * hd);

  const int n_slots = 4;  // full node + tails, causal node + tails, no node keys + tails, 4 rows + one tail
  std::vector<float> o_out[2];
  std::vector<double> lse_out[2];
  Backend* bes[2] = {&cpu, &gpu};
  for (int b = 0; b < 2; b++) {
    Backend& be = *bes[b];
    Arena a(be);
    auto span = [&](int c, int n, const std::vector<float>& k, const std::vector<float>& v) {
      void* p = a.raw((size_t)2 * c * hd * es);
      std::vector<uint8_t> zero((size_t)2 * c * hd * es, 0);
      be.copy_to(p, zero.data(), zero.size());
      be.kv_write(p, type, c, 1, hd, 0, a.put(k), a.put(v), n);
      return p;
    };
    void* node = span(cap, len, kin, vin);
    clade::AttnTail tails[4];
    int32_t* dtail_lim = a.put(tail_lim);
    for (int t = 0; t < 4; t++) {
      tails[t].kv = span(tcap[t], tlen[t], tk[(size_t)t], tv[(size_t)t]);
      tails[t].cap = tcap[t];
      tails[t].row0 = trow0[t];
      tails[t].row1 = trow1[t];
      tails[t].limit = dtail_lim + trow0[t];
    }
    float* dq = a.put(q);
    int32_t* drows = a.put(rows);
    int32_t* dnode_lim = a.put(node_lim);
    float* o = static_cast<float*>(a.raw((size_t)n_slots * nr * hd * 4));
    double* lse = static_cast<double*>(a.raw((size_t)n_slots * nr * sizeof(double)));
    auto problem = [&](int slot, int plen, const int32_t* lim, int n_rows, int n_tails) {
      clade::AttnProblem p;
      p.rows = drows;
      p.n_rows = n_rows;
      p.kv = node;
      p.cap = cap;
      p.len = plen;
      p.limit = lim;
      p.o = o + (size_t)slot * nr * hd;
      p.lse = lse + (size_t)slot * nr;
      p.tails = tails;
      p.n_tails = n_tails;
      return p;
    };
    std::vector<clade::AttnProblem> probs = {problem(0, len, nullptr, nr, 4), problem(1, len, dnode_lim, nr, 4),
                                             problem(2, 0, nullptr, nr, 4), problem(3, len, nullptr, 4, 1)};
    std::vector<float> fill((size_t)n_slots * nr * hd, 0.0f);
    be.copy_to(o, fill.data(), fill.size() * 4);
    std::vector<double> fill_lse((size_t)n_slots * nr, 0.0);
    be.copy_to(lse, fill_lse.data(), fill_lse.size() * sizeof(double));
    if (!be.attention_tails()) {
      // A backend that takes no tails (the plan then makes none) refuses
      // them and stays usable; nothing to compare (the CPU ran first).
      clade_status st = CLADE_OK;
      try {
        be.attention(dq, hd, scale, type, probs.data(), probs.size());
      } catch (const clade::Error& e) {
        st = e.status();
      }
      CHECK_MSG(st == CLADE_E_INTERNAL, "%s %s: tails taken: status %d", be.name(), tag.c_str(), (int)st);
      for (clade::AttnProblem& p : probs) p.tails = nullptr, p.n_tails = 0;
      be.attention(dq, hd, scale, type, probs.data(), probs.size());
      return;
    }
    be.attention(dq, hd, scale, type, probs.data(), probs.size());
    o_out[b] = a.get(o, (size_t)n_slots * nr * hd);
    lse_out[b] = a.get(lse, (size_t)n_slots * nr);

    // Refused: tails out of order, overlapping, past the problem's rows.
    clade::AttnTail bad[2] = {tails[1], tails[0]};
    for (int k = 0; k < 3; k++) {
      clade::AttnProblem p = problem(0, len, nullptr, nr, 2);
      if (k == 0) p.tails = bad;
      if (k == 1) bad[0] = tails[0], bad[1] = tails[1], bad[1].row0 = 2, p.tails = bad;
      if (k == 2) p.n_rows = 30, p.n_tails = 4;
      clade_status st = CLADE_OK;
      try {
        be.attention(dq, hd, scale, type, &p, 1);
      } catch (const clade::Error& e) {
        st = e.status();
      }
      CHECK_MSG(st == CLADE_E_INTERNAL, "%s %s: bad tails %d: status %d", be.name(), tag.c_str(), k, (int)st);
    }
    // Still usable: the same problems again give the same outputs.
    be.attention(dq, hd, scale, type, probs.data(), probs.size());
    expect_equal(std::string(be.name()) + " tails again o " + tag, a.get(o, (size_t)n_slots * nr * hd), o_out[b]);
  }
  // Slot 3 has 4 rows; the rest of it stays as filled.
  expect_rel("attention tails o " + tag, o_out[1], o_out[0], 0, attn_tol(type));
  expect_rel("attention tails lse " + tag, lse_out[1], lse_out[0], 0, attn_tol(type));
  // Row 34 of the causal problem sees nothing; rows of the keyless problem
  // with tail limit 0 see nothing: lse -inf and o = 0 on both.
  for (int b = 0; b < 2; b++)
    for (int slot : {1, 2})
      for (int r = 0; r < nr; r++) {
        const bool none = tail_lim[(size_t)r] == 0 && (slot == 2 || node_lim[(size_t)r] == 0);
        const double l = lse_out[b][(size_t)slot * nr + r];
        CHECK_MSG(none == (std::isinf(l) && l < 0), "%s slot %d row %d: lse %g", tag.c_str(), slot, r, l);
        if (none)
          for (int d = 0; d < hd; d++) CHECK(o_out[b][((size_t)slot * nr + r) * hd + d] == 0.0f);
      }
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<Backend> gpu;
  const bool harness = argc > 1 && std::strcmp(argv[1], "--cpu-vs-cpu") == 0;
  if (harness) {
    // Checks the harness itself where there is no GPU: a one-thread CPU
    // backend in the CUDA backend's place.
    gpu = clade::make_cpu_backend(1);
  } else {
    try {
      gpu = clade::make_cuda_backend();
      g_attn_single = env_single();
      check_settings(*gpu);
      std::printf("%s\n", gpu->settings().c_str());
    } catch (const clade::Error& e) {
      std::printf("SKIP: %s\n", e.what());
      return 77;
    }
  }
  std::unique_ptr<Backend> cpu = clade::make_cpu_backend(2);
  std::printf("backend '%s' against backend '%s'\n", gpu->name(), cpu->name());
  try {
    using T = clade::TensorType;
    for (T t : {T::F32, T::F16, T::BF16, T::Q8_0, T::Q4_0, T::Q4_1, T::Q5_0, T::Q5_1, T::Q2_K, T::Q3_K, T::Q4_K,
                T::Q5_K, T::Q6_K}) {
      for (int64_t n : {1, 3, 17}) test_matmul(*cpu, *gpu, t, 256, 96, n);
      test_embed(*cpu, *gpu, t);
    }
    // More output rows than one dequantization tile (64 MiB of f16).
    test_matmul(*cpu, *gpu, T::Q4_0, 4096, 8192 + 100, 2);
    test_elementwise(*cpu, *gpu);
    for (T t : {T::F32, T::F16, T::BF16}) test_matmul_many(*cpu, *gpu, t);
    for (T t : {T::F32, T::F16, T::BF16}) test_fused_products(*cpu, *gpu, t);
    test_argmax(*cpu, *gpu);
    test_topk(*cpu, *gpu);
    for (T t : {T::F16, T::BF16}) {
      test_merge_matmul(*gpu, t);
      test_matmul_argmax(*gpu, t, false);
      if (!harness) {
        // (the fused merge is the warp kernels', on the few-row products
        // whatever the environment asks, so that the tests reach them)
        ScopedEnv warp("CLADE_CUDA_WARP_MERGE", "1"), rows("CLADE_CUDA_GEMV_MAX_ROWS", "8");
        test_merge_matmul(*cuda_backend_with("CLADE_CUDA_GEMV_MERGE", "1", "attention rows merged in the product"), t);
        test_matmul_argmax(*cuda_backend_with("CLADE_CUDA_GEMV_ARGMAX", "1", "greedy tokens picked in the product"),
                           t, true);
      }
    }
    if (!harness) {
      // The CUDA backend keeps a released block for the next allocation it
      // fits (unless CLADE_CUDA_POOL_MB=0): a KV store's growth reuses it.
      void* a = gpu->alloc(3 << 20);
      gpu->release(a);
      void* b = gpu->alloc((3 << 20) - 1000);
      const char* pool_env = std::getenv("CLADE_CUDA_POOL_MB");
      CHECK_MSG((a == b) == !(pool_env && std::strcmp(pool_env, "0") == 0),
                "released block %s reused", a == b ? "" : "not");
      gpu->release(b);
    }
    for (T t : {T::F16, T::BF16, T::Q8_0}) test_fused_copies(*gpu, t);
    if (!harness) {
      // Q8_0 and Q4_0 widened at load instead of a tile at each product
      std::unique_ptr<Backend> wide = cuda_backend_with("CLADE_CUDA_WIDEN_QUANT", "1", "Q8_0 and Q4_0 widened at load");
      for (T t : {T::Q8_0, T::Q4_0}) {
        CHECK_MSG(wide->upload_weight(make_weight(t, 256, 96).view()).type == T::F16, "%s not widened at load",
                  type_name(t));
        CHECK(gpu->upload_weight(make_weight(t, 256, 96).view()).type == t);  // (kept by default)
        for (int64_t n : {1, 3, 17}) test_matmul(*cpu, *wide, t, 256, 96, n);
      }
      test_reads(*gpu, !env_off("CLADE_CUDA_PINNED_READ"));
      test_reads(*cuda_backend_with("CLADE_CUDA_PINNED_READ", "0", "reads straight"), false);
    }
    for (bool neox : {false, true})
      for (float s : {1.0f, 0.25f}) test_rope(*cpu, *gpu, neox, s);
    for (clade_kv_type kt : {CLADE_KV_F32, CLADE_KV_F16, CLADE_KV_BF16})
      for (int hd : {64, 65, 80, 128, 256}) {
        test_attention(*cpu, *gpu, kt, hd);
        test_attention_many_rows(*cpu, *gpu, kt, hd);
        test_kv_write_many(*gpu, kt, hd);
        if (hd % 2 == 0)
          for (bool neox : {false, true}) test_rope_kv_write(*gpu, kt, hd, neox);
        test_attention_tails(*cpu, *gpu, kt, hd);
      }
    // Long enough for the chunk floor (on the GPU every type and tensor-core
    // head dimension; the harness checks the test itself once).
    for (clade_kv_type kt : {CLADE_KV_F16, CLADE_KV_BF16})
      for (int hd : {64, 128})
        if (!harness || (kt == CLADE_KV_F16 && hd == 64)) test_attention_many_rows(*cpu, *gpu, kt, hd, 12000);
    if (!harness) {
      // The CUDA backend sends a set's few-row problems to the tensor-core
      // launch when they would not fill the device alone, as in the tests
      // above: a backend that keeps them apart runs them on the FP32 kernel
      // on its side stream, beside the tensor-core units.
      {
        ScopedEnv fold("CLADE_CUDA_MMA_FOLD", "0");
        std::unique_ptr<Backend> apart = clade::make_cuda_backend();
        for (clade_kv_type kt : {CLADE_KV_F16, CLADE_KV_BF16})
          for (int hd : {64, 128}) test_attention(*cpu, *apart, kt, hd);
      }
      // The tensor-core units on the other kernels and unit sizes
      // (attention_reg_kernel or attention_mma_kernel, whichever
      // CLADE_CUDA_MMA_REG does not pick; the register kernel with its
      // split groups combined by the combine launch, by their last unit
      // when small (the default) and always, and with 128-row units; with
      // single numbers, CLADE_CUDA_MMA_HILO=0, within attn_tol's wider
      // bound; with chunk floors of 128 keys (none) and 256 (the default
      // is 512; no floor binds on these problems, the long many-rows test
      // above has that); with expf and every score's visibility tested,
      // CLADE_CUDA_MMA_EXP2=0, and the merges a block a row,
      // CLADE_CUDA_WARP_MERGE=0; with the many-row problems' units apart,
      // CLADE_CUDA_MMA_UNITS_PER_SM=3, which the long many-rows test
      // splits by): the same comparisons.
      const bool reg_default = !env_off("CLADE_CUDA_MMA_REG");
      const bool single_default = g_attn_single;
      struct Variant {
        const char *reg, *hilo, *rows, *fused, *chunk, *exp2, *warp, *many;
      };
      for (const Variant& v : {Variant{reg_default ? "0" : "1", "1", "64", "256", "128", "1", "1", "0"},
                               Variant{"1", "1", "64", "0", "128", "1", "1", "0"},
                               Variant{"1", "1", "128", "1000000", "128", "1", "1", "0"},
                               Variant{"1", "0", "64", "1000000", "128", "1", "1", "0"},
                               Variant{"1", "0", "128", "256", "128", "1", "1", "0"},
                               Variant{"1", "1", "64", "256", "256", "1", "1", "0"},
                               Variant{"1", "1", "64", "0", "128", "0", "0", "0"},
                               Variant{"1", "0", "128", "1000000", "512", "0", "0", "0"},
                               Variant{"1", "1", "64", "256", "512", "1", "1", "3"}}) {
        ScopedEnv reg("CLADE_CUDA_MMA_REG", v.reg), hilo("CLADE_CUDA_MMA_HILO", v.hilo),
            rows("CLADE_CUDA_MMA_ROWS", v.rows), fused("CLADE_CUDA_FUSE_MAX_PARTS", v.fused),
            chunk("CLADE_CUDA_MMA_MIN_CHUNK", v.chunk), exp2("CLADE_CUDA_MMA_EXP2", v.exp2),
            warp("CLADE_CUDA_WARP_MERGE", v.warp), many("CLADE_CUDA_MMA_UNITS_PER_SM", v.many);
        std::unique_ptr<Backend> other = clade::make_cuda_backend();
        g_attn_single = env_single();
        check_settings(*other);
        for (clade_kv_type kt : {CLADE_KV_F16, CLADE_KV_BF16})
          for (int hd : {64, 128}) {
            test_attention(*cpu, *other, kt, hd);
            test_attention_many_rows(*cpu, *other, kt, hd);
            test_attention_tails(*cpu, *other, kt, hd);
          }
      }
      g_attn_single = single_default;
    }
  } catch (const clade::Error& e) {
    std::fprintf(stderr, "error %d: %s\n", (int)e.status(), e.what());
    return 1;
  }
  return check_exit();
}
