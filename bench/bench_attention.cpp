// Attention alone, against its roofline: the backend's attention op on the
// problems one decode step of one layer gives, flat (every sequence reads
// its own copy of the prefix) and shared (the prefix read once for all the
// query rows of a KV head), KV in f16/bf16/f32.
//
// usage: bench_attention [--batch B] [--len L] [--kv-heads H] [--group G]
//                        [--head-dim D] [--kv f16|bf16|f32] [--threads T]
//                        [--reps N] [--bw GB/s] [--peak GFLOP/s] [--mode flat|shared]
//                        [--pair-bw MiB] [--layers N]
//
// Prints, per mode, ms per call, GB/s of KV read, GFLOP/s, and the ratio to
// the roofline max(bytes / bw, FLOPs / peak) (bw and peak: give the figures
// of `clade bench machine`, or leave the defaults measured there).
//
// --layers N: layers per KV store (default 8, the sweep's models): each
// store is allocated as the library allocates it, see below.
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
#include <memory>
#include <random>
#include <cmath>
#include <string>
#include <vector>

#include "backend.h"
#include "quant.h"
#include "read_bandwidth.h"

using namespace clade;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  int batch = 64, len = 8192, kvh = 4, group = 4, hd = 64, threads = 2, reps = 5, pair_mib = 0, layers = 8;
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
    else {
      std::fprintf(stderr, "bench_attention: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (batch < 1 || len < 1 || kvh < 1 || group < 1 || hd < 1 || threads < 1 || reps < 1 || layers < 1) {
    std::fprintf(stderr, "bench_attention: sizes, --threads, --reps and --layers must be at least 1\n");
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
  std::unique_ptr<readbw::Reader> reader;
  if (pair_mib > 0) reader.reset(new readbw::Reader(threads, (size_t)pair_mib << 20));
  std::printf("mode,batch,len,kv_heads,group,head_dim,kv,threads,ms,kv_gb_s,gflop_s,roofline_ms,x_roofline\n");
  for (int m = 0; m < 2; m++) {
    if (!only.empty() && only != (m == 0 ? "flat" : "shared")) continue;
    const std::vector<AttnProblem>& probs = m == 0 ? flat : shared;
    const double bytes = 2.0 * (double)span * es * (m == 0 ? batch : 1);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
      const double read_bw = reader ? reader->pass() : 0.0;
      auto t0 = Clock::now();
      be->attention(q.data(), hd, scale, type, probs.data(), probs.size());
      double t = std::chrono::duration<double>(Clock::now() - t0).count();
      if (reader)
        std::fprintf(stderr, "pair,%s,%d,%.1f,%.3f,%.1f,%.2f\n", m == 0 ? "flat" : "shared", r, read_bw / 1e9, t * 1e3,
                     bytes / t / 1e9, t / std::max(bytes / read_bw, flops / (peak * 1e9)));
      if (std::getenv("BENCH_VERBOSE")) std::fprintf(stderr, "rep %d: %.3f ms\n", r, t * 1e3);
      best = std::min(best, t);
    }
    const double roof = std::max(bytes / (bw * 1e9), flops / (peak * 1e9));
    std::printf("%s,%d,%d,%d,%d,%d,%s,%d,%.3f,%.1f,%.1f,%.3f,%.2f\n", m == 0 ? "flat" : "shared", batch, len, kvh,
                group, hd, kv.c_str(), threads, best * 1e3, bytes / best / 1e9, flops / best / 1e9, roof * 1e3,
                best / roof);
  }
  for (Span& sp : flat_spans) be->release(sp.kv);
  be->release(one.kv);
  return 0;
}
