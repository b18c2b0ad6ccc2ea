// Attention alone, against its roofline: the backend's attention op on the
// problems one decode step of one layer gives, flat (every sequence reads
// its own copy of the prefix) and shared (the prefix read once for all the
// query rows of a KV head), KV in f16/bf16/f32.
//
// usage: bench_attention [--batch B] [--len L] [--kv-heads H] [--group G]
//                        [--head-dim D] [--kv f16|bf16|f32] [--threads T]
//                        [--reps N] [--bw GB/s] [--peak GFLOP/s] [--mode flat|shared]
//                        [--pair-bw MiB] [--layers N] [--own N]
//
// Prints, per mode, ms per call, GB/s of KV read, GFLOP/s, and the ratio to
// the roofline max(bytes / bw, FLOPs / peak) (bw and peak: give the figures
// of `clade bench machine`, or leave the defaults measured there).
//
// --layers N: layers per KV store (default 8, the sweep's models): each
// store is allocated as the library allocates it, see below.
//
// --own N: the whole attention of the layer as a decode step runs it, not
// the op alone: every sequence also has N tokens of its own (the new one
// included) in its own store, as a cache keeps them, and the problems come
// from the library's plan (lib/plan.h) and run with its merge (HostAttention in
// lib/forward.h). Shared: the span's problems, each sequence's own tokens
// a tail of them where the backend takes tails (else one causal problem per
// sequence and KV head, and a merge of two partials per row;
// BENCH_NO_TAILS=1 asks for that). Flat: each sequence's private store
// holds the span and its own tokens (L + N keys), one problem per sequence
// and KV head, then the merge (one partial per row). Bytes and FLOPs count
// the own tokens too.
//
// --pair-bw M: before every call, one pass of the read-bandwidth measurement
// of `clade bench machine` over M MiB, with the same threads; stderr then
// gets a line per call, "pair,MODE,REP,READ_GB_S,MS,KV_GB_S,X" (X: the call
// against the roofline of the bandwidth just read), so that a call's speed
// can be set against the state of the machine's memory in the same second.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/forward.h"
#include "engine/kv_store.h"
#include "engine/plan.h"
#include "format/quant.h"
#include "read_bandwidth.h"

using namespace clade;
using Clock = std::chrono::steady_clock;

namespace {

struct Shape {
  int batch, len, kvh, group, hd, layers, own, reps, pair_mib, threads;
  double bw, peak;  // GB/s, GFLOP/s
  clade_kv_type type;
  std::string kv, only;
};

// The capacity a cache's store has once it holds n tokens, having started
// at `from` (lib/cache.cpp, Cache::grow: steps of an eighth, at least 16
// tokens, multiples of 16).
int32_t grown_capacity(int32_t from, int32_t n) {
  int64_t cap = from;
  while (cap < n) cap = (std::max<int64_t>(n, cap + std::max<int64_t>(16, cap / 8)) + 15) / 16 * 16;
  return (int32_t)cap;
}

// Times --reps calls of one mode (each after a read pass with --pair-bw,
// its line on stderr) and prints the CSV row of the best.
void time_mode(const Shape& a, bool flat, double bytes, double flops, readbw::Reader* reader,
               const std::function<void()>& call) {
  const char* mode = flat ? "flat" : "shared";
  double best = 1e30;
  for (int r = 0; r < a.reps; r++) {
    const double read_bw = reader ? reader->pass() : 0.0;
    auto t0 = Clock::now();
    call();
    double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (reader)
      std::fprintf(stderr, "pair,%s,%d,%.1f,%.3f,%.1f,%.2f\n", mode, r, read_bw / 1e9, t * 1e3, bytes / t / 1e9,
                   t / std::max(bytes / read_bw, flops / (a.peak * 1e9)));
    if (std::getenv("BENCH_VERBOSE")) std::fprintf(stderr, "rep %d: %.3f ms\n", r, t * 1e3);
    best = std::min(best, t);
  }
  const double roof = std::max(bytes / (a.bw * 1e9), flops / (a.peak * 1e9));
  std::printf("%s,%d,%d,%d,%d,%d,%s,%d,%.3f,%.1f,%.1f,%.3f,%.2f,%d\n", mode, a.batch, a.len, a.kvh, a.group, a.hd,
              a.kv.c_str(), a.threads, best * 1e3, bytes / best / 1e9, flops / best / 1e9, roof * 1e3, best / roof,
              a.own);
}

// --own: the layer's whole attention through the library's plan and merge.
int step_attention(Backend& be, const Shape& a, const std::vector<float>& q, readbw::Reader* reader,
                   const std::function<std::vector<uint8_t>(size_t)>& fill) {
  const int nh = a.kvh * a.group;
  const size_t es = kv_type_size(a.type);
  // Only the measured layer (0) is written; see the comment in main.
  auto make_store = [&](int32_t cap, int32_t n) {
    std::unique_ptr<KVStore> s(new KVStore(be, a.type, a.layers, a.kvh, a.hd));
    s->reserve(cap);
    s->length = n;
    std::vector<uint8_t> host = fill((size_t)a.kvh * 2 * cap * a.hd);
    be.copy_to(s->kv(0), host.data(), host.size());
    return s;
  };
  std::unique_ptr<KVStore> node;
  std::vector<std::unique_ptr<KVStore>> shared_own, flat_own;
  if (a.only != "flat") {
    node = make_store(a.len, a.len);
    for (int b = 0; b < a.batch; b++) shared_own.push_back(make_store(grown_capacity(0, a.own), a.own));
  }
  if (a.only != "shared")
    for (int b = 0; b < a.batch; b++) flat_own.push_back(make_store(grown_capacity(a.len, a.len + a.own), a.len + a.own));
  std::vector<float> out((size_t)a.batch * nh * a.hd);
  const float scale = 1.0f / std::sqrt((float)a.hd);
  const double flops = 4.0 * a.hd * (double)nh * a.batch * (a.len + a.own);
  const double token_bytes = 2.0 * a.kvh * a.hd * (double)es;
  for (int m = 0; m < 2; m++) {
    const bool flat = m == 0;
    if (!a.only.empty() && a.only != (flat ? "flat" : "shared")) continue;
    AttnPlan plan;
    for (int b = 0; b < a.batch; b++) {
      PassSeq s;
      s.own = (flat ? flat_own : shared_own)[(size_t)b].get();
      s.own_before = s.own->length - 1;  // the new token is the last one
      s.pos0 = a.len + a.own - 1;
      s.n_tokens = 1;
      s.tok0 = b;
      const PassSpan span{node.get(), a.len};
      plan.add(s, &span, flat ? 0 : 1);
    }
    plan.build(nh, a.kvh, a.hd, flat ? CLADE_ATTENTION_FLAT : CLADE_ATTENTION_SHARED, a.type, be.attention_cost(),
               be.attention_tails() && !std::getenv("BENCH_NO_TAILS"));
    HostAttention ha(be);
    ha.prepare(plan, a.hd, scale);
    const double bytes = token_bytes * (flat ? (double)a.batch * (a.len + a.own) : a.len + (double)a.batch * a.own);
    time_mode(a, flat, bytes, flops, reader, [&] {
      ha.run(0, q.data(), out.data());
    });
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int batch = 64, len = 8192, kvh = 4, group = 4, hd = 64, threads = 2, reps = 5, pair_mib = 0, layers = 8, own = 0;
  double bw = 52.5, peak = 202.0;
  std::string kv = "f16", only;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--batch") batch = std::atoi(v);
    else if (a == "--len") len = std::atoi(v);
    else if (a == "--kv-heads") kvh = std::atoi(v);
    else if (a == "--group") group = std::atoi(v);
    else if (a == "--head-dim") hd = std::atoi(v);
    else if (a == "--threads") threads = std::atoi(v);
    else if (a == "--reps") reps = std::atoi(v);
    else if (a == "--bw") bw = std::atof(v);
    else if (a == "--peak") peak = std::atof(v);
    else if (a == "--kv") kv = v;
    else if (a == "--mode") only = v;
    else if (a == "--pair-bw") pair_mib = std::atoi(v);
    else if (a == "--layers") layers = std::atoi(v);
    else if (a == "--own") own = std::atoi(v);
    else {
      std::fprintf(stderr, "bench_attention: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (batch < 1 || len < 1 || kvh < 1 || group < 1 || hd < 1 || threads < 1 || reps < 1 || layers < 1 || own < 0) {
    std::fprintf(stderr, "bench_attention: sizes, --threads, --reps and --layers must be at least 1, --own at least 0\n");
    return 2;
  }
  const clade_kv_type type = kv == "f32" ? CLADE_KV_F32 : kv == "bf16" ? CLADE_KV_BF16 : CLADE_KV_F16;
  const size_t es = kv_type_size(type);
  auto be = make_cpu_backend(threads);
  const int nh = kvh * group;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);

  // One token per sequence: q [batch][nh][hd].
  std::vector<float> q((size_t)batch * nh * hd);
  for (float& x : q) x = nd(rng);
  // Flat: batch copies of the span; shared: one. Each [kvh][len][hd].
  const size_t span = (size_t)kvh * len * hd;
  const TensorType tt = type == CLADE_KV_F32 ? TensorType::F32 : type == CLADE_KV_BF16 ? TensorType::BF16 : TensorType::F16;
  auto fill = [&](size_t n) {
    std::vector<float> f(n);
    for (float& x : f) x = nd(rng);
    std::vector<uint8_t> buf(n * es);
    quantize_row(tt, f.data(), buf.data(), (int64_t)n);
    return buf;
  };
  const Shape shape{batch, len, kvh, group, hd, layers, own, reps, pair_mib, threads, bw, peak, type, kv, only};
  std::unique_ptr<readbw::Reader> reader;
  if (pair_mib > 0) reader.reset(new readbw::Reader(threads, (size_t)pair_mib << 20));
  std::printf("mode,batch,len,kv_heads,group,head_dim,kv,threads,ms,kv_gb_s,gflop_s,roofline_ms,x_roofline,own\n");
  if (own > 0) return step_attention(*be, shape, q, reader.get(), fill);
  // KV in the backend's memory, as the library keeps it: a span's store
  // holds every layer ([layer][kv_heads][2 * cap][head_dim], lib/kv.h), one
  // store per sequence when flat, and the measured layer is the first of
  // --layers. The store's size is what decides whether the backend gives it
  // huge pages (from 8 MiB, lib/pages.h): a one-layer buffer of a 2048-key
  // span (512 KiB) would get 4 KiB pages where the library's 8-layer store
  // gets huge ones. Only the first layer is written (the others stay
  // untouched, so not resident beyond its huge pages). The stored values do
  // not matter: the same random bytes serve as every span's K and V.
  std::vector<uint8_t> host_kv = fill(2 * span);
  struct Span {
    uint8_t* kv;
  };
  auto make_span = [&]() {
    Span sp{static_cast<uint8_t*>(be->alloc(2 * span * es * (size_t)layers))};
    be->copy_to(sp.kv, host_kv.data(), 2 * span * es);
    return sp;
  };
  Span one = make_span();
  std::vector<Span> flat_spans;
  for (int b = 0; b < batch && only != "shared"; b++) flat_spans.push_back(make_span());
  std::vector<float> o((size_t)batch * nh * hd);
  std::vector<double> lse((size_t)batch * nh);
  const float scale = 1.0f / std::sqrt((float)hd);

  // Rows: query row index = token * nh + head; KV head h serves heads
  // h*group .. h*group+group-1.
  std::vector<int32_t> flat_rows, shared_rows;
  std::vector<AttnProblem> flat, shared;
  flat_rows.reserve((size_t)batch * nh);
  shared_rows.reserve((size_t)batch * nh);
  for (int b = 0; b < batch; b++)
    for (int h = 0; h < kvh; h++)
      for (int j = 0; j < group; j++) flat_rows.push_back(b * nh + h * group + j);
  for (int h = 0; h < kvh; h++)
    for (int b = 0; b < batch; b++)
      for (int j = 0; j < group; j++) shared_rows.push_back(b * nh + h * group + j);
  for (int b = 0; b < (int)flat_spans.size(); b++)
    for (int h = 0; h < kvh; h++) {
      AttnProblem p;
      p.rows = flat_rows.data() + ((size_t)b * kvh + h) * group;
      p.n_rows = group;
      p.kv = flat_spans[(size_t)b].kv + (size_t)h * 2 * len * hd * es;
      p.cap = len;
      p.len = len;
      p.o = o.data() + ((size_t)b * kvh + h) * group * hd;
      p.lse = lse.data() + ((size_t)b * kvh + h) * group;
      flat.push_back(p);
    }
  for (int h = 0; h < kvh; h++) {
    AttnProblem p;
    p.rows = shared_rows.data() + (size_t)h * batch * group;
    p.n_rows = batch * group;
    p.kv = one.kv + (size_t)h * 2 * len * hd * es;
    p.cap = len;
    p.len = len;
    p.o = o.data() + (size_t)h * batch * group * hd;
    p.lse = lse.data() + (size_t)h * batch * group;
    shared.push_back(p);
  }

  const double flops = 4.0 * hd * (double)nh * batch * len;
  for (int m = 0; m < 2; m++) {
    if (!only.empty() && only != (m == 0 ? "flat" : "shared")) continue;
    const std::vector<AttnProblem>& probs = m == 0 ? flat : shared;
    const double bytes = 2.0 * (double)span * es * (m == 0 ? batch : 1);
    time_mode(shape, m == 0, bytes, flops, reader.get(),
              [&] { be->attention(q.data(), hd, scale, type, probs.data(), probs.size()); });
  }
  for (Span& sp : flat_spans) be->release(sp.kv);
  be->release(one.kv);
  return 0;
}
