// Tests of the fp64 reference forward pass (tests/reference.cpp) against
// hand-derived formulas and known byte patterns, so the oracle itself is
// checked before anything is checked against it.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "format/gguf.h"
#include "reference.h"

using clade::TensorType;
using Vec = std::vector<double>;

static int g_failures = 0;
#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__,    \
                   __LINE__, #cond);                                 \
      ++g_failures;                                                  \
    }                                                                \
  } while (0)

static bool near(double a, double b, double tol = 1e-12) {
  return std::fabs(a - b) <= tol * (1 + std::fabs(b));
}
static bool near_vec(const Vec& a, const Vec& b, double tol = 1e-12) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!near(a[i], b[i], tol)) {
      std::fprintf(stderr, "  [%zu] %.17g vs %.17g\n", i, a[i], b[i]);
      return false;
    }
  return true;
}

// ---- dequantizers -----------------------------------------------------------

static void test_dequant() {
  CHECK(ref::half_to_double(0x3C00) == 1.0);
  CHECK(ref::half_to_double(0xC000) == -2.0);
  CHECK(ref::half_to_double(0x3555) == 0.333251953125);
  CHECK(ref::half_to_double(0x7BFF) == 65504.0);
  CHECK(ref::half_to_double(0x0001) == std::ldexp(1.0, -24));   // smallest subnormal
  CHECK(ref::half_to_double(0x03FF) == 1023 * std::ldexp(1.0, -24));
  CHECK(ref::half_to_double(0x0400) == std::ldexp(1.0, -14));   // smallest normal
  CHECK(ref::half_to_double(0x8000) == 0.0 && std::signbit(ref::half_to_double(0x8000)));
  CHECK(std::isinf(ref::half_to_double(0x7C00)) && ref::half_to_double(0x7C00) > 0);
  CHECK(std::isinf(ref::half_to_double(0xFC00)) && ref::half_to_double(0xFC00) < 0);
  CHECK(std::isnan(ref::half_to_double(0x7E00)));
  CHECK(ref::bf16_to_double(0x3F80) == 1.0);
  CHECK(ref::bf16_to_double(0xC0A0) == -5.0);
  CHECK(ref::bf16_to_double(0x3EAB) == 0.333984375);

  {  // F16 / BF16 / F32 arrays, little-endian bytes
    const uint8_t f16[] = {0x00, 0x3C, 0x00, 0xC0};
    CHECK(near_vec(ref::dequantize(1, f16, 4, 2), {1.0, -2.0}, 0));
    const uint8_t bf[] = {0x80, 0x3F, 0xA0, 0xC0};
    CHECK(near_vec(ref::dequantize(30, bf, 4, 2), {1.0, -5.0}, 0));
    const uint8_t f32[] = {0x00, 0x00, 0xC0, 0x3F};  // 1.5f
    CHECK(near_vec(ref::dequantize(0, f32, 4, 1), {1.5}, 0));
  }
  {  // Q8_0: d = 0.5 (0x3800), q = 0, 1, -1, 2, -2, ..., 127 at the end
    uint8_t b[34] = {0x00, 0x38};
    Vec want(32);
    for (int j = 0; j < 32; ++j) {
      const int q = j == 31 ? -128 : (j % 2 ? (j + 1) / 2 : -(j / 2));
      b[2 + j] = uint8_t(int8_t(q));
      want[j] = 0.5 * q;
    }
    CHECK(near_vec(ref::dequantize(8, b, 34, 32), want, 0));
  }
  {  // Q4_0: d = 2.0 (0x4000); byte j = 0x(hi)(lo) with lo = j, hi = 15 - j
    uint8_t b[18] = {0x00, 0x40};
    Vec want(32);
    for (int j = 0; j < 16; ++j) {
      b[2 + j] = uint8_t(((15 - j) << 4) | j);
      want[j] = 2.0 * (j - 8);
      want[j + 16] = 2.0 * (15 - j - 8);
    }
    CHECK(near_vec(ref::dequantize(2, b, 18, 32), want, 0));
    CHECK(want[0] == -16 && want[16] == 14);  // the pattern itself
  }
  bool threw = false;
  try {
    uint8_t b[18] = {};
    ref::dequantize(2, b, 17, 32);  // too short
  } catch (const std::runtime_error&) {
    threw = true;
  }
  CHECK(threw);
}

// ---- tiny models ------------------------------------------------------------

static std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("clade_test_reference_" + std::to_string(getpid()) + "_" + name + ".gguf"))
      .string();
}

struct Config {
  std::string arch = "llama";
  uint32_t dim = 2, ff = 1, heads = 1, kv_heads = 1, hd = 2;
};

static void write_meta(clade::GGUFWriter& w, const Config& c) {
  const std::string a = c.arch + ".";
  w.set_str("general.architecture", c.arch);
  w.set_u32(a + "block_count", 1);
  w.set_u32(a + "embedding_length", c.dim);
  w.set_u32(a + "feed_forward_length", c.ff);
  w.set_u32(a + "attention.head_count", c.heads);
  w.set_u32(a + "attention.head_count_kv", c.kv_heads);
  w.set_u32(a + "attention.key_length", c.hd);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 0.0f);
}

static void f32(clade::GGUFWriter& w, const std::string& name,
                std::vector<uint64_t> dims, const std::vector<float>& v) {
  w.add_tensor(name, TensorType::F32, dims, v.data(), v.size() * sizeof(float));
}

static Vec run(clade::GGUFWriter& w, const std::string& name,
               const std::vector<int32_t>& tokens) {
  const std::string path = tmp_path(name);
  w.write(path);
  auto m = ref::load(path);
  std::filesystem::remove(path);
  const Vec logits = ref::forward(*m, tokens);
  CHECK(logits.size() == tokens.size() * size_t(ref::n_vocab(*m)));
  // Causal: the logits of a prefix do not depend on the tokens after it.
  if (tokens.size() > 1) {
    const Vec prefix = ref::forward(*m, {tokens.begin(), tokens.end() - 1});
    CHECK(near_vec(prefix, {logits.begin(), logits.begin() + prefix.size()}, 0));
  }
  bool threw = false;
  try {
    ref::forward(*m, {-1});
  } catch (const std::runtime_error&) {
    threw = true;
  }
  CHECK(threw);
  return logits;
}

// 1 layer, dim 2, one head, ff 1, one token: attention returns v exactly and
// RoPE at position 0 is the identity, so everything has a closed form.
// Embedding of token 1: (2, -2), so rmsnorm gives (1, -1).
static void test_one_token(bool qwen2_bias) {
  Config c;
  c.arch = qwen2_bias ? "qwen2" : "llama";
  clade::GGUFWriter w;
  write_meta(w, c);
  f32(w, "token_embd.weight", {2, 2}, {5, 7, 2, -2});
  f32(w, "blk.0.attn_norm.weight", {2}, {1, 1});
  f32(w, "blk.0.attn_q.weight", {2, 2}, {0.3f, -0.7f, 1.1f, 0.2f});  // irrelevant
  f32(w, "blk.0.attn_k.weight", {2, 2}, {-0.4f, 0.9f, 0.6f, 0.1f});  // irrelevant
  f32(w, "blk.0.attn_v.weight", {2, 2}, {1, 0, 0, 1});
  const double b0 = 1.0, b1 = 0.5;  // v bias (qwen2 only)
  if (qwen2_bias) {
    f32(w, "blk.0.attn_q.bias", {2}, {3, 4});  // irrelevant
    f32(w, "blk.0.attn_k.bias", {2}, {-1, 2});  // irrelevant
    f32(w, "blk.0.attn_v.bias", {2}, {float(b0), float(b1)});
  }
  f32(w, "blk.0.attn_output.weight", {2, 2}, {0.5f, 0, 0, 0.5f});
  f32(w, "blk.0.ffn_norm.weight", {2}, {1, 1});
  f32(w, "blk.0.ffn_gate.weight", {2, 1}, {1, -1});
  f32(w, "blk.0.ffn_up.weight", {2, 1}, {0.5f, -0.5f});
  f32(w, "blk.0.ffn_down.weight", {1, 2}, {1, 0});
  f32(w, "output_norm.weight", {2}, {1, 3});
  f32(w, "output.weight", {2, 3}, {1, 0, 0, 1, 1, 1});  // vocab 3
  const Vec got = run(w, qwen2_bias ? "one_qwen2" : "one_llama", {1});

  // By hand. v = (1, -1) + bias; x1 = (2, -2) + v / 2.
  const double v0 = 1 + (qwen2_bias ? b0 : 0), v1 = -1 + (qwen2_bias ? b1 : 0);
  const double x0 = 2 + v0 / 2, x1 = -2 + v1 / 2;
  const double r1 = std::sqrt((x0 * x0 + x1 * x1) / 2);
  const double h0 = x0 / r1, h1 = x1 / r1;
  const double g = h0 - h1, u = 0.5 * h0 - 0.5 * h1;
  const double y0 = x0 + g / (1 + std::exp(-g)) * u, y1 = x1;
  const double r2 = std::sqrt((y0 * y0 + y1 * y1) / 2);
  const double n0 = y0 / r2, n1 = 3 * y1 / r2;
  CHECK(near_vec(got, {n0, n1, n0 + n1}));
  if (!qwen2_bias) {  // the values themselves: x1 = (2.5, -2.5), g = 2, u = 1
    const double s = 2 / (1 + std::exp(-2.0)), a = 2.5 + s;
    CHECK(near(got[0], a / std::sqrt((a * a + 6.25) / 2)));
  }
}

// Pair rotation by angle t.
static void rot(double& x, double& y, double t) {
  const double c = std::cos(t), s = std::sin(t);
  const double nx = x * c - y * s, ny = x * s + y * c;
  x = nx;
  y = ny;
}

// 1 layer, dim 4, one head of 4, two tokens; q = k = v = rmsnorm(x) (identity
// weights), FFN zero, identity output. e0 = (1,1,1,1), e1 = (1,-1,1,-1).
// Position 0 attends only to itself: logits e0. Position 1: q1 = R(e1),
// scores (q1.e0, |e1|^2) / 2, out = softmax-weighted e0, e1; x = e1 + out.
// `angle` gives the RoPE angles of pairs 0 and 1 at position 1.
struct RopeCase {
  std::string name, arch = "llama", scaling;
  float base = 10000, factor = 1, orig_ctx = 0, low = 0, high = 0;
  std::vector<float> rope_freqs;
  double angle0, angle1;
};

static void test_rope_attention(const RopeCase& rc) {
  Config c;
  c.arch = rc.arch;
  c.dim = 4;
  c.hd = 4;
  const std::string a = c.arch + ".";
  clade::GGUFWriter w;
  write_meta(w, c);
  w.set_f32(a + "rope.freq_base", rc.base);
  if (!rc.scaling.empty()) {
    w.set_str(a + "rope.scaling.type", rc.scaling);
    w.set_f32(a + "rope.scaling.factor", rc.factor);
  }
  if (rc.orig_ctx > 0) {
    w.set_u32(a + "rope.scaling.original_context_length", uint32_t(rc.orig_ctx));
    w.set_f32(a + "rope.scaling.low_freq_factor", rc.low);
    w.set_f32(a + "rope.scaling.high_freq_factor", rc.high);
  }
  if (!rc.rope_freqs.empty()) f32(w, "rope_freqs.weight", {2}, rc.rope_freqs);
  const std::vector<float> I = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  f32(w, "token_embd.weight", {4, 2}, {1, 1, 1, 1, 1, -1, 1, -1});
  f32(w, "blk.0.attn_norm.weight", {4}, {1, 1, 1, 1});
  f32(w, "blk.0.attn_q.weight", {4, 4}, I);
  f32(w, "blk.0.attn_k.weight", {4, 4}, I);
  f32(w, "blk.0.attn_v.weight", {4, 4}, I);
  f32(w, "blk.0.attn_output.weight", {4, 4}, I);
  f32(w, "blk.0.ffn_norm.weight", {4}, {1, 1, 1, 1});
  f32(w, "blk.0.ffn_gate.weight", {4, 1}, {0, 0, 0, 0});
  f32(w, "blk.0.ffn_up.weight", {4, 1}, {1, 1, 1, 1});
  f32(w, "blk.0.ffn_down.weight", {1, 4}, {1, 1, 1, 1});
  f32(w, "output_norm.weight", {4}, {1, 1, 1, 1});
  f32(w, "output.weight", {4, 4}, I);
  const Vec got = run(w, rc.name, {0, 1});

  // Rotate e1 by hand: llama pairs (0,1), (2,3); qwen2 pairs (0,2), (1,3).
  double q[4] = {1, -1, 1, -1};
  if (rc.arch == "qwen2") {
    rot(q[0], q[2], rc.angle0);
    rot(q[1], q[3], rc.angle1);
  } else {
    rot(q[0], q[1], rc.angle0);
    rot(q[2], q[3], rc.angle1);
  }
  const double s0 = (q[0] + q[1] + q[2] + q[3]) / 2, s1 = 4.0 / 2;
  const double p0 = 1 / (1 + std::exp(s1 - s0)), p1 = 1 - p0;
  const double e1[4] = {1, -1, 1, -1};
  double x[4], ss = 0;
  for (int i = 0; i < 4; ++i) {
    x[i] = e1[i] + p0 * 1 + p1 * e1[i];  // e0 = (1, 1, 1, 1)
    ss += x[i] * x[i];
  }
  Vec want = {1, 1, 1, 1};
  for (int i = 0; i < 4; ++i) want.push_back(x[i] / std::sqrt(ss / 4));
  std::fprintf(stderr, "rope case %s\n", rc.name.c_str());
  CHECK(near_vec(got, want));
}

static void test_rope_cases() {
  const double f1 = 0.01;  // base^(-2/4) for base 10000
  std::vector<RopeCase> cases(8);
  cases[0] = {"llama", "llama", "", 10000, 1, 0, 0, 0, {}, 1.0, f1};
  cases[1] = {"qwen2", "qwen2", "", 10000, 1, 0, 0, 0, {}, 1.0, f1};
  cases[2] = {"base100", "llama", "", 100, 1, 0, 0, 0, {}, 1.0, 0.1};
  cases[3] = {"linear", "llama", "linear", 10000, 2, 0, 0, 0, {}, 0.5, f1 / 2};
  cases[4] = {"freqs", "llama", "", 10000, 1, 0, 0, 0, {2, 4}, 0.5, f1 / 4};
  // llama3 from metadata: wavelengths 2pi and 200pi. orig 100, high 4:
  // 2pi < 25 keeps, 200pi > 100 / low divides by the factor.
  cases[5] = {"llama3_div", "llama", "llama3", 10000, 8, 100, 1, 4, {}, 1.0, f1 / 8};
  // orig 1000: 250 < 200pi < 1000, smoothed.
  const double smooth = (1000 / (200 * 3.14159265358979323846) - 1) / 3;
  cases[6] = {"llama3_smooth", "llama", "llama3", 10000, 8, 1000, 1, 4, {}, 1.0,
              (1 - smooth) * f1 / 8 + smooth * f1};
  // rope_freqs takes precedence over the llama3 metadata (no double scaling).
  cases[7] = {"llama3_freqs", "llama", "llama3", 10000, 8, 100, 1, 4, {1, 3}, 1.0, f1 / 3};
  for (const RopeCase& rc : cases) test_rope_attention(rc);
}

// GQA: dim 4, 4 query heads of 2, 2 kv heads (k = v = identity: kv head g is
// dims 2g, 2g+1). Query heads 0 and 2 copy the dims of kv heads 0 and 1;
// heads 1 and 3 have zero queries (uniform attention). Output: dims of kv
// head g = head 2g + head 2g+1. So query head h must use kv head h / 2.
static void test_gqa() {
  Config c;
  c.dim = 4;
  c.heads = 4;
  c.kv_heads = 2;
  c.hd = 2;
  clade::GGUFWriter w;
  write_meta(w, c);
  const std::vector<float> I = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  std::vector<float> wq(4 * 8, 0), wo(8 * 4, 0);
  for (int i = 0; i < 2; ++i) {
    wq[i * 4 + i] = 1;              // head 0 <- dims 0, 1
    wq[(4 + i) * 4 + 2 + i] = 1;    // head 2 <- dims 2, 3
  }
  for (int h = 0; h < 4; ++h)
    for (int i = 0; i < 2; ++i) wo[(2 * (h / 2) + i) * 8 + 2 * h + i] = 1;
  f32(w, "token_embd.weight", {4, 2}, {1, 1, 1, 1, 1, -1, -1, 1});
  f32(w, "blk.0.attn_norm.weight", {4}, {1, 1, 1, 1});
  f32(w, "blk.0.attn_q.weight", {4, 8}, wq);
  f32(w, "blk.0.attn_k.weight", {4, 4}, I);
  f32(w, "blk.0.attn_v.weight", {4, 4}, I);
  f32(w, "blk.0.attn_output.weight", {8, 4}, wo);
  f32(w, "blk.0.ffn_norm.weight", {4}, {1, 1, 1, 1});
  f32(w, "blk.0.ffn_gate.weight", {4, 1}, {0, 0, 0, 0});
  f32(w, "blk.0.ffn_up.weight", {4, 1}, {1, 1, 1, 1});
  f32(w, "blk.0.ffn_down.weight", {1, 4}, {1, 1, 1, 1});
  f32(w, "output_norm.weight", {4}, {1, 1, 1, 1});
  // no output.weight: tied to token_embd (vocab 2)
  const Vec got = run(w, "gqa", {0, 1});

  const double e0[4] = {1, 1, 1, 1}, e1[4] = {1, -1, -1, 1};
  double x0[4], x1[4];
  for (int g = 0; g < 2; ++g) {
    // Position 0: both heads of group g return e0's dims; position 1: the
    // zero-query head averages, the other weighs by its scores.
    double q0 = e1[2 * g], q1 = e1[2 * g + 1];
    rot(q0, q1, 1.0);  // hd 2: one pair, angle = position
    const double s0 = (q0 * e0[2 * g] + q1 * e0[2 * g + 1]) / std::sqrt(2.0);
    const double s1 = 2 / std::sqrt(2.0);
    const double p0 = 1 / (1 + std::exp(s1 - s0)), p1 = 1 - p0;
    for (int i = 2 * g; i < 2 * g + 2; ++i) {
      x0[i] = e0[i] + 2 * e0[i];
      x1[i] = e1[i] + p0 * e0[i] + p1 * e1[i] + (e0[i] + e1[i]) / 2;
    }
  }
  Vec want;
  for (const double* x : {x0, x1}) {
    double ss = 0;
    for (int i = 0; i < 4; ++i) ss += x[i] * x[i];
    const double r = std::sqrt(ss / 4);
    for (const double* e : {e0, e1}) {
      double dot = 0;
      for (int i = 0; i < 4; ++i) dot += e[i] * x[i] / r;
      want.push_back(dot);
    }
  }
  CHECK(near_vec(got, want));
}

// ---- every weight format gives the same model --------------------------------

static uint16_t exact_half(double v) {  // v = k/8 with |k| <= 8
  if (v == 0) return 0;
  int e;
  const double m = std::frexp(std::fabs(v), &e);  // v = m 2^e, m in [0.5, 1)
  const uint16_t mant = uint16_t((m * 2 - 1) * 1024);
  return uint16_t((v < 0 ? 0x8000 : 0) | (e - 1 + 15) << 10 | mant);
}

// A 1-layer model, dim 32, 2 heads of 16 (1 kv head), ff 64, vocab 40, tied
// output; every weight is k/8 with k in [-8, 7], exact in every format, so
// the logits must be identical whatever the matrices are stored as.
static Vec format_model(TensorType type, uint32_t seed) {
  Config c;
  c.dim = 32;
  c.ff = 64;
  c.heads = 2;
  c.kv_heads = 1;
  c.hd = 16;
  clade::GGUFWriter w;
  write_meta(w, c);
  std::mt19937 rng(seed);
  auto mat = [&](const std::string& name, uint64_t ne0, uint64_t ne1) {
    std::vector<int> k(ne0 * ne1);
    for (int& v : k) v = int(rng() % 16) - 8;
    std::vector<uint8_t> bytes;
    auto put16 = [&](uint16_t h) { bytes.push_back(uint8_t(h)); bytes.push_back(uint8_t(h >> 8)); };
    for (size_t b = 0; b < k.size(); b += 32) {
      if (type == TensorType::Q8_0 || type == TensorType::Q4_0) put16(0x3000);  // d = 1/8
      for (size_t j = 0; j < 32; ++j) {
        const int q = k[b + j];
        const float f = float(q) / 8;
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        if (type == TensorType::F32) bytes.insert(bytes.end(), (uint8_t*)&f, (uint8_t*)&f + 4);
        if (type == TensorType::F16) put16(exact_half(q / 8.0));
        if (type == TensorType::BF16) put16(uint16_t(bits >> 16));
        if (type == TensorType::Q8_0) bytes.push_back(uint8_t(int8_t(q)));
        if (type == TensorType::Q4_0 && j < 16)
          bytes.push_back(uint8_t((q + 8) | (k[b + j + 16] + 8) << 4));
      }
    }
    w.add_tensor(name, type, {ne0, ne1}, bytes.data(), bytes.size());
  };
  auto norm = [&](const std::string& name, uint64_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = 0.5f + float(rng() % 8) / 8;
    f32(w, name, {n}, v);
  };
  mat("token_embd.weight", 32, 40);
  norm("blk.0.attn_norm.weight", 32);
  mat("blk.0.attn_q.weight", 32, 32);
  mat("blk.0.attn_k.weight", 32, 16);
  mat("blk.0.attn_v.weight", 32, 16);
  mat("blk.0.attn_output.weight", 32, 32);
  norm("blk.0.ffn_norm.weight", 32);
  mat("blk.0.ffn_gate.weight", 32, 64);
  mat("blk.0.ffn_up.weight", 32, 64);
  mat("blk.0.ffn_down.weight", 64, 32);
  norm("output_norm.weight", 32);
  return run(w, "fmt" + std::to_string(int(type)), {3, 17, 39, 0, 3, 22});
}

static void test_formats() {
  const Vec base = format_model(TensorType::F32, 42);
  CHECK(base.size() == 6 * 40);
  bool finite = true;
  for (double v : base) finite = finite && std::isfinite(v);
  CHECK(finite);
  for (TensorType t : {TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0}) {
    std::fprintf(stderr, "format %s\n", clade::tensor_type_name(t));
    CHECK(near_vec(format_model(t, 42), base, 0));
  }
}

// ---- errors -----------------------------------------------------------------

static void test_errors() {
  Config c;
  c.arch = "gpt2";
  clade::GGUFWriter w;
  write_meta(w, c);
  const std::string path = tmp_path("bad_arch");
  w.write(path);
  bool threw = false;
  try {
    ref::load(path);
  } catch (const std::runtime_error&) {
    threw = true;
  }
  std::filesystem::remove(path);
  CHECK(threw);
}

int main() {
  test_dequant();
  test_one_token(false);
  test_one_token(true);
  test_rope_cases();
  test_gqa();
  test_formats();
  test_errors();
  if (g_failures) {
    std::fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  std::printf("test_reference: all checks passed\n");
  return 0;
}
