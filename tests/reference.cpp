// The naive fp64 reference forward pass. See reference.h.
//
// Conventions (llama.cpp / GGML):
// - A weight with ne0 = in, ne1 = out computes y[o] = sum_i W[o*in + i] x[i].
// - RoPE angle of pair i at position p: p * pos_scale * base^(-2i/hd) / ff_i
//   (pos_scale = 1/factor for linear scaling, ff_i = rope_freqs[i] or the
//   Llama 3.1 factors). "llama" rotates pairs (2i, 2i+1) (GGML normal mode),
//   "qwen2" rotates pairs (i, i + hd/2) (GGML neox mode).
#include "reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "format/gguf.h"

namespace ref {

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("reference: " + what);
}

uint16_t read_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

}  // namespace

// ---- element types --------------------------------------------------------

double half_to_double(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double v;
  if (exponent == 0) {
    v = std::ldexp(double(mantissa), -24);  // zero or subnormal
  } else if (exponent == 31) {
    v = mantissa ? NAN : INFINITY;
  } else {
    v = std::ldexp(double(1024 + mantissa), exponent - 25);  // 1.m * 2^(e-15)
  }
  return sign ? -v : v;
}

double bf16_to_double(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The K types (super-blocks of 256 elements), from GGML's block layouts:
//  Q2_K (84 bytes):  scales[16] (low nibble scale, high nibble min), qs[64]
//                    (2 bits), f16 d, f16 dmin.
//  Q3_K (110 bytes): hmask[32] (third bit), qs[64] (2 bits), 12 bytes of
//                    16 6-bit scales (stored + 32), f16 d.
//  Q4_K (144 bytes): f16 d, f16 dmin, 12 bytes of 8 6-bit scales and 8
//                    6-bit mins, qs[128] (nibbles).
//  Q5_K (176 bytes): as Q4_K with qh[32] (fifth bit) before qs.
//  Q6_K (210 bytes): ql[128] (low 4 bits), qh[64] (high 2 bits), int8
//                    scales[16], f16 d.
// The 2-bit fields of Q2_K / Q3_K and the 2-bit high parts of Q6_K: element
// e = 128 h + 32 g + l takes bits 2g of byte l of the h-th 32-byte group.
namespace {

// 6-bit scale / min pairs of Q4_K and Q5_K: the first four sit in the low 6
// bits of bytes 0-3 (scales) and 4-7 (mins); the last four take their low
// 4 bits from bytes 8-11 (scale low nibble, min high nibble) and their top
// 2 bits from the top 2 bits of bytes 0-3 (scales) and 4-7 (mins).
void k4_pair(const uint8_t* s, int j, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 0x3f;
    min = s[4 + j] & 0x3f;
    return;
  }
  const int i = j - 4;
  scale = (s[8 + i] & 0x0f) + 16 * (s[i] >> 6);
  min = (s[8 + i] >> 4) + 16 * (s[4 + i] >> 6);
}

int two_bits(const uint8_t* group_base, int e) {  // e < 256
  const int h = e / 128, g = (e % 128) / 32, l = e % 32;
  return (group_base[32 * h + l] >> (2 * g)) & 3;
}

}  // namespace

static void dequantize_k(uint32_t type, const uint8_t* data, size_t nbytes, size_t n, double* out) {
  static const size_t kBytes[15] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 84, 110, 144, 176, 210};
  const size_t bytes = kBytes[type];
  if (n % 256 != 0) throw std::runtime_error("reference: K-quant tensor size not a multiple of 256");
  if (nbytes < n / 256 * bytes) throw std::runtime_error("reference: tensor data too short");
  for (size_t b = 0; b < n / 256; ++b) {
    const uint8_t* p = data + bytes * b;
    double* y = out + 256 * b;
    for (int e = 0; e < 256; ++e) {
      double v = 0;
      if (type == 10) {
        const double d = half_to_double(read_u16(p + 80)), dmin = half_to_double(read_u16(p + 82));
        const uint8_t sm = p[e / 16];
        v = d * (sm & 0x0f) * two_bits(p + 16, e) - dmin * (sm >> 4);
      } else if (type == 11) {
        const double d = half_to_double(read_u16(p + 108));
        const uint8_t* s = p + 96;
        const int k = e / 16;
        const int low = k < 8 ? (s[k] & 0x0f) : (s[k - 8] >> 4);
        const int high = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
        const int h = e / 128, g = (e % 128) / 32, l = e % 32;
        const int third = (p[l] >> (4 * h + g)) & 1;
        v = d * (low + 16 * high - 32) * (two_bits(p + 32, e) + 4 * third - 4);
      } else if (type == 12 || type == 13) {
        const double d = half_to_double(read_u16(p)), dmin = half_to_double(read_u16(p + 2));
        const int j = e / 32, l = e % 32;
        int scale, min;
        k4_pair(p + 4, j, scale, min);
        const uint8_t* qs = p + (type == 12 ? 16 : 48);
        int q = (j % 2 == 0) ? (qs[32 * (j / 2) + l] & 0x0f) : (qs[32 * (j / 2) + l] >> 4);
        if (type == 13) q += 16 * ((p[16 + l] >> j) & 1);
        v = d * scale * q - dmin * min;
      } else {
        const double d = half_to_double(read_u16(p + 208));
        const int h = e / 128, c = (e % 128) / 32, l = e % 32;
        const uint8_t lowbyte = p[64 * h + 32 * (c % 2) + l];
        const int low = c < 2 ? (lowbyte & 0x0f) : (lowbyte >> 4);
        const int high = (p[128 + 32 * h + l] >> (2 * c)) & 3;
        v = d * double(int8_t(p[192 + e / 16])) * (low + 16 * high - 32);
      }
      y[e] = v;
    }
  }
}

std::vector<double> dequantize(uint32_t type, const uint8_t* data,
                               size_t nbytes, size_t n) {
  std::vector<double> out(n);
  auto need = [&](size_t bytes) {
    if (nbytes < bytes) fail("tensor data too short");
  };
  auto need_blocks = [&](size_t block_bytes) {
    if (n % 32 != 0) fail("quantized tensor size not a multiple of 32");
    need(n / 32 * block_bytes);
  };
  switch (type) {
    case 0:  // F32 (little-endian, like the host)
      need(4 * n);
      for (size_t i = 0; i < n; ++i) {
        float f;
        std::memcpy(&f, data + 4 * i, 4);
        out[i] = f;
      }
      break;
    case 1:  // F16
      need(2 * n);
      for (size_t i = 0; i < n; ++i) out[i] = half_to_double(read_u16(data + 2 * i));
      break;
    case 30:  // BF16
      need(2 * n);
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_double(read_u16(data + 2 * i));
      break;
    case 8:  // Q8_0: fp16 d, 32 x int8 q; value = d * q
      need_blocks(34);
      for (size_t b = 0; b < n / 32; ++b) {
        const uint8_t* p = data + 34 * b;
        const double d = half_to_double(read_u16(p));
        for (int j = 0; j < 32; ++j) out[32 * b + j] = d * double(int8_t(p[2 + j]));
      }
      break;
    case 2:  // Q4_0: fp16 d, 16 bytes; element j: low nibble of byte j,
             // element j+16: its high nibble; value = d * (nibble - 8)
      need_blocks(18);
      for (size_t b = 0; b < n / 32; ++b) {
        const uint8_t* p = data + 18 * b;
        const double d = half_to_double(read_u16(p));
        for (int j = 0; j < 16; ++j) {
          out[32 * b + j] = d * (double(p[2 + j] & 0x0f) - 8);
          out[32 * b + j + 16] = d * (double(p[2 + j] >> 4) - 8);
        }
      }
      break;
    case 3:   // Q4_1: f16 d, f16 m, 16 bytes of nibbles as Q4_0; d * q + m
    case 6:   // Q5_0: f16 d, 32 high bits, nibbles; d * (q - 16)
    case 7: {  // Q5_1: f16 d, f16 m, 32 high bits, nibbles; d * q + m
      const bool has_m = type != 6, five = type != 3;
      const size_t bytes = 2 + (has_m ? 2 : 0) + (five ? 4 : 0) + 16;
      need_blocks(bytes);
      for (size_t b = 0; b < n / 32; ++b) {
        const uint8_t* p = data + bytes * b;
        const double d = half_to_double(read_u16(p));
        const double m = has_m ? half_to_double(read_u16(p + 2)) : 0.0;
        const uint8_t* hi = p + (has_m ? 4 : 2);
        const uint8_t* nib = hi + (five ? 4 : 0);
        for (int j = 0; j < 32; ++j) {
          int q = j < 16 ? (nib[j] & 0x0f) : (nib[j - 16] >> 4);
          if (five) q += 16 * ((hi[j / 8] >> (j % 8)) & 1);
          out[32 * b + j] = type == 6 ? d * (q - 16) : d * q + m;
        }
      }
      break;
    }
    case 10: case 11: case 12: case 13: case 14:
      dequantize_k(type, data, nbytes, n, out.data());
      break;
    default:
      fail("unsupported tensor type " + std::to_string(type));
  }
  return out;
}

// ---- model ------------------------------------------------------------------

struct Layer {
  std::vector<double> attn_norm, wq, wk, wv, bq, bk, bv, wo;
  std::vector<double> ffn_norm, w_gate, w_up, w_down;
};

struct Model {
  std::string arch;
  int n_layer = 0, dim = 0, ff = 0, heads = 0, kv_heads = 0, hd = 0;
  int vocab = 0;        // rows of the output matrix (logits per position)
  int embd_rows = 0;    // rows of token_embd (valid token ids)
  double eps = 0;
  bool neox = false;    // pairs (i, i + hd/2) instead of (2i, 2i+1)
  double pos_scale = 1; // linear RoPE scaling
  std::vector<double> inv_freq;  // hd/2 angles per unit position
  std::vector<double> tok_embd, out_norm, output;
  std::vector<Layer> layers;
};

namespace {

// Read a tensor of shape [ne0, ne1] as doubles. Empty when absent and not
// required.
std::vector<double> read_tensor(const clade::GGUFFile& f, const std::string& name,
                                uint64_t ne0, uint64_t ne1, bool required = true) {
  const clade::GGUFTensor* t = f.find_tensor(name);
  if (!t) {
    if (required) fail("missing tensor " + name);
    return {};
  }
  if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
    fail("tensor " + name + " has shape [" + std::to_string(t->ne[0]) + ", " +
         std::to_string(t->ne[1]) + ", ...], expected [" + std::to_string(ne0) +
         ", " + std::to_string(ne1) + "]");
  return dequantize(uint32_t(t->type), t->data, t->nbytes, t->n_elements());
}

int required_int(const clade::GGUFFile& f, const std::string& key) {
  const int64_t v = f.get_int(key, -1);
  if (v <= 0 || v > (1 << 24)) fail("missing or bad metadata " + key);
  return int(v);
}

// Llama 3.1 frequency scaling, from the metadata.
double llama3_freq(double freq, double factor, double orig_ctx, double low,
                   double high) {
  const double pi = 3.14159265358979323846;
  const double wavelen = 2 * pi / freq;
  if (wavelen < orig_ctx / high) return freq;
  if (wavelen > orig_ctx / low) return freq / factor;
  const double smooth = (orig_ctx / wavelen - low) / (high - low);
  return (1 - smooth) * freq / factor + smooth * freq;
}

}  // namespace

std::unique_ptr<Model> load(const std::string& gguf_path) {
  std::unique_ptr<clade::GGUFFile> f = clade::GGUFFile::open(gguf_path);
  auto m = std::make_unique<Model>();
  m->arch = f->get_str("general.architecture");
  if (m->arch != "llama" && m->arch != "qwen2")
    fail("unsupported architecture '" + m->arch + "'");
  const std::string a = m->arch + ".";
  m->neox = m->arch == "qwen2";
  m->n_layer = required_int(*f, a + "block_count");
  m->dim = required_int(*f, a + "embedding_length");
  m->ff = required_int(*f, a + "feed_forward_length");
  m->heads = required_int(*f, a + "attention.head_count");
  m->kv_heads = int(f->get_int(a + "attention.head_count_kv", m->heads));
  m->hd = int(f->get_int(a + "attention.key_length", m->dim / m->heads));
  if (m->kv_heads <= 0 || m->heads % m->kv_heads != 0)
    fail("head_count not a multiple of head_count_kv");
  if (m->hd <= 0 || m->hd % 2 != 0) fail("bad head dimension");
  if (f->get_int(a + "attention.value_length", m->hd) != m->hd)
    fail("value_length != key_length is not supported");
  m->eps = f->get_float(a + "attention.layer_norm_rms_epsilon",
                        m->arch == "qwen2" ? 1e-6 : 1e-5);

  // RoPE frequencies.
  const double base = f->get_float(a + "rope.freq_base", 10000.0);
  const std::string scaling = f->get_str(a + "rope.scaling.type", "none");
  const double factor = f->get_float(a + "rope.scaling.factor", 1.0);
  for (int i = 0; i < m->hd / 2; ++i)
    m->inv_freq.push_back(std::pow(base, -2.0 * i / m->hd));
  const std::vector<double> rope_freqs =
      read_tensor(*f, "rope_freqs.weight", uint64_t(m->hd / 2), 1, false);
  if (!rope_freqs.empty()) {
    for (int i = 0; i < m->hd / 2; ++i) m->inv_freq[i] /= rope_freqs[i];
  } else if (scaling == "llama3") {
    const double orig = f->get_float(a + "rope.scaling.original_context_length", 8192);
    const double low = f->get_float(a + "rope.scaling.low_freq_factor", 1);
    const double high = f->get_float(a + "rope.scaling.high_freq_factor", 4);
    for (double& fr : m->inv_freq) fr = llama3_freq(fr, factor, orig, low, high);
  }
  if (scaling == "linear") {
    if (!(factor > 0)) fail("bad rope.scaling.factor");
    m->pos_scale = 1.0 / factor;
  } else if (scaling != "none" && scaling != "llama3") {
    fail("unsupported rope scaling '" + scaling + "'");
  }

  // Weights.
  const clade::GGUFTensor* te = f->find_tensor("token_embd.weight");
  if (!te) fail("missing tensor token_embd.weight");
  m->embd_rows = int(te->ne[1]);
  const uint64_t d = m->dim, qd = uint64_t(m->heads) * m->hd,
                 kvd = uint64_t(m->kv_heads) * m->hd, ff = m->ff;
  m->tok_embd = read_tensor(*f, "token_embd.weight", d, te->ne[1]);
  m->out_norm = read_tensor(*f, "output_norm.weight", d, 1);
  const clade::GGUFTensor* to = f->find_tensor("output.weight");
  if (to) {
    m->vocab = int(to->ne[1]);
    m->output = read_tensor(*f, "output.weight", d, to->ne[1]);
  } else {
    m->vocab = m->embd_rows;
    m->output = m->tok_embd;  // tied
  }
  for (int l = 0; l < m->n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer L;
    L.attn_norm = read_tensor(*f, p + "attn_norm.weight", d, 1);
    L.wq = read_tensor(*f, p + "attn_q.weight", d, qd);
    L.wk = read_tensor(*f, p + "attn_k.weight", d, kvd);
    L.wv = read_tensor(*f, p + "attn_v.weight", d, kvd);
    L.bq = read_tensor(*f, p + "attn_q.bias", qd, 1, false);
    L.bk = read_tensor(*f, p + "attn_k.bias", kvd, 1, false);
    L.bv = read_tensor(*f, p + "attn_v.bias", kvd, 1, false);
    L.wo = read_tensor(*f, p + "attn_output.weight", qd, d);
    L.ffn_norm = read_tensor(*f, p + "ffn_norm.weight", d, 1);
    L.w_gate = read_tensor(*f, p + "ffn_gate.weight", d, ff);
    L.w_up = read_tensor(*f, p + "ffn_up.weight", d, ff);
    L.w_down = read_tensor(*f, p + "ffn_down.weight", ff, d);
    m->layers.push_back(std::move(L));
  }
  return m;
}

int n_vocab(const Model& m) { return m.vocab; }

}  // namespace ref

void std::default_delete<ref::Model>::operator()(ref::Model* m) const { delete m; }

namespace ref {

// ---- forward ----------------------------------------------------------------

namespace {

using Vec = std::vector<double>;

// y = W x (+ bias), W stored [out][in].
Vec matvec(const Vec& W, const Vec& x, const Vec& bias, size_t out) {
  const size_t in = x.size();
  Vec y(out, 0.0);
  for (size_t o = 0; o < out; ++o) {
    double s = 0;
    for (size_t i = 0; i < in; ++i) s += W[o * in + i] * x[i];
    y[o] = s + (bias.empty() ? 0.0 : bias[o]);
  }
  return y;
}

Vec rmsnorm(const Vec& x, const Vec& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w[i];
  return y;
}

// Rotate every head of v (n_heads heads of m.hd) for position pos.
void rope(const Model& m, Vec& v, int n_heads, int pos) {
  const int hd = m.hd;
  for (int h = 0; h < n_heads; ++h) {
    double* x = v.data() + size_t(h) * hd;
    for (int i = 0; i < hd / 2; ++i) {
      const double theta = pos * m.pos_scale * m.inv_freq[i];
      const double c = std::cos(theta), s = std::sin(theta);
      const int i0 = m.neox ? i : 2 * i;
      const int i1 = m.neox ? i + hd / 2 : 2 * i + 1;
      const double x0 = x[i0], x1 = x[i1];
      x[i0] = x0 * c - x1 * s;
      x[i1] = x0 * s + x1 * c;
    }
  }
}

}  // namespace

std::vector<double> forward(const Model& m, const std::vector<int32_t>& tokens) {
  const int n = int(tokens.size()), hd = m.hd;
  const int group = m.heads / m.kv_heads;
  const Vec none;
  std::vector<Vec> X(n);
  for (int t = 0; t < n; ++t) {
    if (tokens[t] < 0 || tokens[t] >= m.embd_rows)
      fail("token id " + std::to_string(tokens[t]) + " out of range");
    X[t].assign(m.tok_embd.begin() + size_t(tokens[t]) * m.dim,
                m.tok_embd.begin() + size_t(tokens[t] + 1) * m.dim);
  }
  for (const Layer& L : m.layers) {
    // Attention: project every position first, then attend causally.
    std::vector<Vec> Q(n), K(n), V(n);
    for (int t = 0; t < n; ++t) {
      const Vec h = rmsnorm(X[t], L.attn_norm, m.eps);
      Q[t] = matvec(L.wq, h, L.bq, size_t(m.heads) * hd);
      K[t] = matvec(L.wk, h, L.bk, size_t(m.kv_heads) * hd);
      V[t] = matvec(L.wv, h, L.bv, size_t(m.kv_heads) * hd);
      rope(m, Q[t], m.heads, t);
      rope(m, K[t], m.kv_heads, t);
    }
    for (int t = 0; t < n; ++t) {
      Vec attn(size_t(m.heads) * hd, 0.0);
      for (int h = 0; h < m.heads; ++h) {
        const size_t qo = size_t(h) * hd, ko = size_t(h / group) * hd;
        Vec score(t + 1);
        double mx = -INFINITY;
        for (int s = 0; s <= t; ++s) {
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += Q[t][qo + i] * K[s][ko + i];
          score[s] = dot / std::sqrt(double(hd));
          mx = std::max(mx, score[s]);
        }
        double sum = 0;
        for (int s = 0; s <= t; ++s) sum += (score[s] = std::exp(score[s] - mx));
        for (int s = 0; s <= t; ++s)
          for (int i = 0; i < hd; ++i) attn[qo + i] += score[s] / sum * V[s][ko + i];
      }
      const Vec o = matvec(L.wo, attn, none, size_t(m.dim));
      for (int i = 0; i < m.dim; ++i) X[t][i] += o[i];
    }
    // Feed-forward (SwiGLU).
    for (int t = 0; t < n; ++t) {
      const Vec h = rmsnorm(X[t], L.ffn_norm, m.eps);
      const Vec g = matvec(L.w_gate, h, none, size_t(m.ff));
      Vec u = matvec(L.w_up, h, none, size_t(m.ff));
      for (int i = 0; i < m.ff; ++i) u[i] *= g[i] / (1.0 + std::exp(-g[i]));
      const Vec o = matvec(L.w_down, u, none, size_t(m.dim));
      for (int i = 0; i < m.dim; ++i) X[t][i] += o[i];
    }
  }
  std::vector<double> logits;
  logits.reserve(size_t(n) * m.vocab);
  for (int t = 0; t < n; ++t) {
    const Vec y = matvec(m.output, rmsnorm(X[t], m.out_norm, m.eps), none,
                         size_t(m.vocab));
    logits.insert(logits.end(), y.begin(), y.end());
  }
  return logits;
}

}  // namespace ref
