// `clade bench decode` and `clade bench machine` (`bench prefill`: bench_prefill.cpp).
#define CLADE_EXPERIMENTAL 1  // clade_backend_measure_peaks
#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "cli.h"
#include "read_bandwidth.h"

extern "C" void openblas_set_num_threads(int);

namespace cli {

namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// STREAM triad a = b + s*c over arrays far larger than the caches, one
// slice per thread; best of several runs.
double measure_bandwidth(int threads) {
  const size_t n = (size_t)64 << 20;  // 3 arrays of 256 MiB
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  double best = 0;
  for (int rep = 0; rep < 6; rep++) {
    auto t0 = Clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; t++)
      ts.emplace_back([&, t] {
        size_t lo = n * t / threads, hi = n * (t + 1) / threads;
        float* pa = a.data();
        const float* pb = b.data();
        const float* pc = c.data();
        for (size_t i = lo; i < hi; i++) pa[i] = pb[i] + 3.0f * pc[i];
      });
    for (auto& t : ts) t.join();
    double s = secs(t0, Clock::now());
    if (rep > 0) best = std::max(best, 3.0 * n * sizeof(float) / s);
  }
  return best;
}

// The middle element of v once sorted (the upper one of an even count).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Read-only bandwidth (what streaming weights and KV needs): best of 5
// passes over 512 MiB (read_bandwidth.h).
double measure_read_bandwidth(int threads) {
  readbw::Reader reader(threads, (size_t)512 << 20);
  return reader.best(5);
}

double measure_gemm(int threads, int m, int n, int k) {
  openblas_set_num_threads(threads);
  std::vector<float> A((size_t)m * k, 0.5f), B((size_t)k * n, 0.25f), C((size_t)m * n);
  double best = 0;
  for (int rep = 0; rep < 5; rep++) {
    auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, A.data(), k, B.data(), k, 0.0f, C.data(), n);
    double s = secs(t0, Clock::now());
    if (rep > 0) best = std::max(best, 2.0 * m * n * k / s);
  }
  openblas_set_num_threads(1);
  return best;
}

// The CPU's model name and the kernel set clade's CPU backend picks on it
// (lib/cpu/kernels.cpp: AVX-512 with BF16 / VNNI dot products where the CPU
// has them, unless CLADE_NO_AVX512 is set; else AVX2).
std::pair<std::string, std::string> cpu_and_kernels() {
  std::string model = "unknown";
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  std::string k;
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && !std::getenv("CLADE_NO_AVX512");
  if (avx512) {
    k = "avx512";
    std::ifstream f("/proc/cpuinfo");
    std::string flags;
    while (std::getline(f, line))
      if (line.rfind("flags", 0) == 0) {
        flags = line;
        break;
      }
    if (flags.find(" avx512_bf16") != std::string::npos) k += "+bf16";
    if (flags.find(" avx512_vnni") != std::string::npos) k += "+vnni";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    k = std::getenv("CLADE_NO_AVX512") ? "avx2 (CLADE_NO_AVX512)" : "avx2";
  } else {
    k = "scalar";
  }
#else
  k = "scalar";
#endif
  return {model, k};
}

// The GPU's ceilings (clade_backend_measure_peaks), for rooflines against
// steps measured in the same run (scripts/gpu_check.sh).
int bench_machine_device(clade_backend backend, bool csv) {
  clade_device_peaks p;
  clade_device_peaks_init(&p);
  check(clade_backend_measure_peaks(backend, &p), "bench machine");
  if (csv) {
    std::printf("gpu,copy_gb_s,f16_tflop_s\n\"%s\",%.1f,%.1f\n", p.device, p.copy_bytes_per_s / 1e9,
                p.f16_flop_per_s / 1e12);
  } else {
    std::printf("gpu                             %s\n", p.device);
    std::printf("memory bandwidth (1 GiB copy)   %.1f GB/s (read + written)\n", p.copy_bytes_per_s / 1e9);
    std::printf("F16 GEMM 8192^3 (tensor cores)  %.1f TFLOP/s\n", p.f16_flop_per_s / 1e12);
    std::printf("FLOP per byte                   %.1f\n", p.f16_flop_per_s / p.copy_bytes_per_s);
  }
  return 0;
}

int bench_machine(Args& a) {
  int threads = (int)std::thread::hardware_concurrency();
  bool csv = false;
  clade_backend backend = CLADE_BACKEND_CPU;
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "--threads") threads = (int)int_flag(f, a.next(f), 1, 1024);
    else if (f == "--backend") backend = parse_backend(a.next(f));
    else if (f == "--csv") csv = true;
    else unknown_arg("bench machine", f);
  }
  if (backend != CLADE_BACKEND_CPU) return bench_machine_device(backend, csv);
  double bw = measure_bandwidth(threads);
  double rbw = measure_read_bandwidth(threads);
  double peak = measure_gemm(threads, 2048, 2048, 2048);
  double dec = measure_gemm(threads, 64, 2816, 1024);
  const auto ck = cpu_and_kernels();
  if (csv) {
    std::printf("cpu,kernels,threads,bandwidth_gb_s,read_bandwidth_gb_s,gemm_gflop_s,gemm_64x2816x1024_gflop_s\n"
                "\"%s\",%s,%d,%.1f,%.1f,%.1f,%.1f\n",
                ck.first.c_str(), ck.second.c_str(), threads, bw / 1e9, rbw / 1e9, peak / 1e9, dec / 1e9);
  } else {
    std::printf("cpu                             %s\n", ck.first.c_str());
    std::printf("clade kernels                   %s\n", ck.second.c_str());
    std::printf("threads                         %d\n", threads);
    std::printf("memory bandwidth (triad)        %.1f GB/s\n", bw / 1e9);
    std::printf("memory bandwidth (read only)    %.1f GB/s\n", rbw / 1e9);
    std::printf("F32 GEMM 2048^3 (OpenBLAS)      %.1f GFLOP/s\n", peak / 1e9);
    std::printf("F32 GEMM 64x2816x1024           %.1f GFLOP/s\n", dec / 1e9);
    std::printf("FLOP per byte (read bandwidth)  %.1f\n", peak / rbw);
  }
  return 0;
}

struct DecodeOptions {
  std::string model;
  std::vector<long> batches{1}, prefixes{512};
  std::vector<std::string> modes{"flat"};
  long suffix = 0, gen = 32;
  int threads = 0, rounds = 3, max_rounds = 50;
  double min_seconds = 0;
  bool csv = false, machine = false, map_file = true;
  bool past_context = false;  // --past-context: positions past the model's n_ctx allowed
  bool greedy = false;        // --logits greedy: steps return tokens (clade_batch.argmax), no logits
  std::string kv = "f16";
  clade_backend backend = CLADE_BACKEND_CPU;
};

DecodeOptions parse_decode_options(Args& a) {
  DecodeOptions o;
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "-m") o.model = a.next(f);
    else if (f == "--batch") o.batches = int_list_flag(f, a.next(f), 1, 1 << 20);
    else if (f == "--prefix") o.prefixes = int_list_flag(f, a.next(f), 0, 1 << 24);
    else if (f == "--mode") {
      o.modes = split(a.next(f), ',');
      for (const std::string& m : o.modes) word_flag(f, m, {"shared", "flat", "noattn"});
    } else if (f == "--suffix") o.suffix = int_flag(f, a.next(f), 0, 1 << 24);
    else if (f == "--gen") o.gen = int_flag(f, a.next(f), 2, 1 << 24);
    else if (f == "--threads") o.threads = (int)int_flag(f, a.next(f), 0, 1024);
    else if (f == "--kv") o.kv = word_flag(f, a.next(f), {"f16", "bf16", "f32"});
    else if (f == "--backend") o.backend = parse_backend(a.next(f));
    else if (f == "--rounds") o.rounds = (int)int_flag(f, a.next(f), 1, 100000);
    else if (f == "--min-seconds") o.min_seconds = num_flag(f, a.next(f), 0, 86400);
    else if (f == "--machine") o.machine = true;
    else if (f == "--csv") o.csv = true;
    else if (f == "--no-mmap") o.map_file = false;
    else if (f == "--past-context") o.past_context = true;
    else if (f == "--logits") o.greedy = word_flag(f, a.next(f), {"all", "greedy"}) == "greedy";
    else unknown_arg("bench decode", f);
  }
  if (o.model.empty()) Args::die("bench decode: -m FILE is required");
  o.max_rounds = std::max(o.max_rounds, o.rounds);
  return o;
}

// One mode at one point (batch, prefix): its cache, and its timings.
struct Run {
  std::string mode;
  clade_cache* cache = nullptr;
  std::vector<clade_seq_id> ids;
  std::vector<double> times;  // seconds per step, one per round
  std::vector<double> step_bw;  // with --machine: per round, the median read bandwidth between its steps
  bool fits = true;
};

// v's values times scale in fmt, ';'-separated; "x" when v is empty.
std::string join(const std::vector<double>& v, double scale, const char* fmt) {
  std::string out;
  char buf[32];
  for (size_t i = 0; i < v.size(); i++) {
    std::snprintf(buf, sizeof buf, fmt, v[i] * scale);
    if (i) out += ';';
    out += buf;
  }
  return out.empty() ? std::string("x") : out;
}

// The buffers of one decode step of a point's whole batch (one token per
// sequence; what a real step needs back: the logits, or with --logits
// greedy each row's greedy token only).
struct StepBuffers {
  std::vector<int32_t> ones;
  std::vector<clade_token> toks, greedy;
  std::vector<float> logits;

  StepBuffers(long batch, int32_t n_vocab, bool greedy_only)
      : ones((size_t)batch, 1),
        toks((size_t)batch),
        greedy(greedy_only ? (size_t)batch : 0),
        logits(greedy_only ? 0 : (size_t)batch * n_vocab) {}
  clade_batch batch_of(Run& r) {
    clade_batch bt;
    clade_batch_init(&bt);
    bt.n_seqs = toks.size();
    bt.seq_ids = r.ids.data();
    bt.n_tokens = ones.data();
    bt.tokens = toks.data();
    bt.logits = logits.empty() ? nullptr : logits.data();
    bt.argmax = greedy.empty() ? nullptr : greedy.data();
    bt.logits_rows = toks.size();
    return bt;
  }
};

// What every point shares: the options, the model, the machine's memory,
// and the one token stream every prompt and step draws from.
struct DecodeBench {
  const DecodeOptions& o;
  clade_model_info info;
  clade_kv_type kvt;
  size_t kv_bytes_per_token;
  double mem_total;
  int threads;
  uint64_t rng = 12345;

  clade_token rand_tok() {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (clade_token)((rng >> 33) % (uint64_t)info.n_vocab);
  }

  std::vector<Run> make_runs(clade_tree* tree, clade_node_id node, long batch, long prefix);
  double time_round(std::vector<Run>& runs, StepBuffers& sb, int round, long steps,
                    readbw::Reader* step_reader);
  void report_kv(clade_tree* tree, const Run& r, long batch, long prefix);
  void print_rows(const std::vector<Run>& runs, long batch, long prefix, const char* extra,
                  const std::string& machine_rounds);
  void point(clade_tree* tree, clade_node_id node, long batch, long prefix);
};

// Every mode of a point gets its own cache (unless its KV would not fit in
// memory), holding batch sequences with suffix tokens of their own.
std::vector<Run> DecodeBench::make_runs(clade_tree* tree, clade_node_id node, long batch, long prefix) {
  std::vector<Run> runs;
  for (const std::string& mode : o.modes) {
    Run r;
    r.mode = mode;
    bool flat = mode == "flat";
    double need = (double)kv_bytes_per_token * batch * ((flat ? prefix : 0) + o.suffix + o.gen + 16);
    for (const Run& other : runs)
      if (other.fits && other.mode == "flat") need += (double)kv_bytes_per_token * batch * prefix;
    if (need > 0.8 * mem_total) {
      r.fits = false;
      runs.push_back(r);
      continue;
    }
    clade_cache_params cp;
    clade_cache_params_init(&cp);
    cp.max_seqs = (int32_t)batch;
    cp.max_tokens = (int32_t)(o.suffix + o.gen + 1);
    cp.attention = mode == "noattn" ? CLADE_ATTENTION_NONE : flat ? CLADE_ATTENTION_FLAT : CLADE_ATTENTION_AUTO;
    check(clade_cache_create(tree, &cp, &r.cache), "cache");
    r.ids.resize((size_t)batch);
    for (long b = 0; b < batch; b++) {
      std::vector<clade_token> own((size_t)o.suffix);
      for (auto& t : own) t = rand_tok();
      check(clade_cache_add(r.cache, node, own.data(), own.size(), flat ? CLADE_SEQ_PRIVATE : 0, &r.ids[(size_t)b]),
            "add");
    }
    runs.push_back(std::move(r));
  }
  return runs;
}

// One round at a point: steps - 1 timed decode steps per mode, the modes
// taking turns step by step (mode A's step 1, B's step 1, ..., then A's
// step 2), each step index starting with the next mode, so that no mode is
// always the one after the machine measurement or the truncation, and the
// modes of a round share the same seconds of a shared, noisy machine (a
// mode's whole run at batch 256 takes 10-40 s; the machine's other tenants
// come and go faster). Appends each mode's time per step (and with
// step_reader its median read bandwidth between steps); returns the
// seconds timed.
double DecodeBench::time_round(std::vector<Run>& runs, StepBuffers& sb, int round, long steps,
                               readbw::Reader* step_reader) {
  if (round == 0)  // one warm-up step per mode (it also evaluates the suffixes)
    for (Run& r : runs) {
      if (!r.fits) continue;
      clade_batch bt = sb.batch_of(r);
      for (auto& t : sb.toks) t = rand_tok();
      check(clade_decode(r.cache, &bt), "decode");
    }
  std::vector<double> total(runs.size(), 0.0);
  std::vector<std::vector<double>> reads(runs.size());
  for (long s = 0; s < steps; s++)
    for (size_t ri = 0; ri < runs.size(); ri++) {
      const size_t k = (ri + (size_t)round + (size_t)s) % runs.size();
      Run& r = runs[k];
      if (!r.fits) continue;
      clade_batch bt = sb.batch_of(r);
      for (auto& t : sb.toks) t = rand_tok();
      if (step_reader) reads[k].push_back(step_reader->pass());
      auto t0 = Clock::now();
      check(clade_decode(r.cache, &bt), "decode");
      total[k] += secs(t0, Clock::now());
    }
  double round_sum = 0;
  for (size_t k = 0; k < runs.size(); k++) {
    Run& r = runs[k];
    if (!r.fits) continue;
    if (step_reader) r.step_bw.push_back(median(reads[k]));
    r.times.push_back(total[k] / steps);
    round_sum += total[k];
  }
  return round_sum;
}

// A mode's KV memory against the ideal: (prefix once + every unique token)
// x bytes per token.
void DecodeBench::report_kv(clade_tree* tree, const Run& r, long batch, long prefix) {
  bool flat = r.mode == "flat";
  size_t tree_b = clade_tree_kv_bytes(tree), cache_b = clade_cache_kv_bytes(r.cache);
  double ideal = ((double)prefix * (flat ? batch + 1 : 1) + (double)batch * (o.suffix + o.gen)) *
                 (double)kv_bytes_per_token;
  std::fprintf(stderr, "  %s batch %ld: KV %.1f MiB (tree %.1f + caches %.1f), ideal %.1f MiB, ratio %.3f\n",
               r.mode.c_str(), batch, (tree_b + cache_b) / 1048576.0, tree_b / 1048576.0, cache_b / 1048576.0,
               ideal / 1048576.0, (tree_b + cache_b) / ideal);
}

// A point's CSV rows, one per mode. extra: with --machine, the point's best
// bandwidth and peak; machine_rounds: with --machine, their per-round lists.
void DecodeBench::print_rows(const std::vector<Run>& runs, long batch, long prefix, const char* extra,
                             const std::string& machine_rounds) {
  const long suffix = o.suffix, gen = o.gen;
  // The attention part of a step, paired: per round, this mode's step
  // time minus the noattn step time of the same round (their steps
  // taking turns), median over rounds; a slow moment then shifts both
  // sides of a difference instead of one.
  const Run* na = nullptr;
  for (const Run& r : runs)
    if (r.mode == "noattn" && r.fits) na = &r;
  for (const Run& r : runs) {
    if (!r.fits) {
      std::printf("%s,%ld,%ld,%ld,%ld,%d,x,x,x,0,x%s,x%s%s\n", r.mode.c_str(), batch, prefix, suffix, gen, threads,
                  extra, machine_rounds.c_str(), o.machine ? ",x" : "");
      continue;
    }
    const double best = *std::min_element(r.times.begin(), r.times.end()), med = median(r.times);
    std::string attn = "x", attn_rounds = "x";
    if (na && na->times.size() == r.times.size()) {
      std::vector<double> d;
      for (size_t i = 0; i < r.times.size(); i++) d.push_back(r.times[i] - na->times[i]);
      attn_rounds = join(d, 1e3, "%.3f");
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3f", median(d) * 1e3);
      attn = buf;
    }
    const std::string step_bw = o.machine ? "," + join(r.step_bw, 1e-9, "%.1f") : "";
    std::printf("%s,%ld,%ld,%ld,%ld,%d,%.1f,%.3f,%.3f,%d,%s%s,%s%s%s\n", r.mode.c_str(), batch, prefix, suffix, gen,
                threads, batch / best, best * 1e3, med * 1e3, (int)r.times.size(), attn.c_str(), extra,
                attn_rounds.c_str(), machine_rounds.c_str(), step_bw.c_str());
  }
}

// One point: every mode gets its own cache; then rounds of gen-1 timed
// steps per mode (time_round), each round starting from the same state
// (the steps are truncated away); each mode keeps its fastest round. So the
// modes are compared in the same seconds of a shared, noisy machine.
void DecodeBench::point(clade_tree* tree, clade_node_id node, long batch, long prefix) {
  std::vector<Run> runs = make_runs(tree, node, batch, prefix);
  StepBuffers sb(batch, info.n_vocab, o.greedy);
  const long steps = std::max(1L, o.gen - 1);
  // With --machine, every round also measures the read bandwidth and the
  // GEMM peak (as `clade bench machine` does); the point keeps the best
  // of each, as it keeps each mode's best round.
  double bw_best = 0, peak_best = 0, timed = 0;
  // With --machine, one read pass before every timed step as well (not
  // timed with it): the bandwidth the steps of this mode and round had,
  // as the machine's other tenants left it. The round's first measurement
  // (best of 5 passes) often catches a few quick seconds that the steps
  // then do not see; rooflines per round can use either.
  std::unique_ptr<readbw::Reader> step_reader;
  if (o.machine) step_reader.reset(new readbw::Reader(threads, (size_t)256 << 20));
  std::vector<double> bw_round, peak_round;  // per round, for rooflines paired with that round's steps
  for (int round = 0; round < o.rounds || (round < o.max_rounds && timed < o.min_seconds); round++) {
    if (o.machine) {
      bw_round.push_back(measure_read_bandwidth(threads));
      peak_round.push_back(measure_gemm(threads, 2048, 2048, 2048));
      bw_best = std::max(bw_best, bw_round.back());
      peak_best = std::max(peak_best, peak_round.back());
      // OpenBLAS's threads spin for a while after a parallel GEMM; let
      // them sleep before the first mode is timed.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    timed += time_round(runs, sb, round, steps, step_reader.get());
    for (const Run& r : runs) {
      if (!r.fits) continue;
      if (round == 0) report_kv(tree, r, batch, prefix);
      for (clade_seq_id id : r.ids) check(clade_cache_truncate(r.cache, id, (int32_t)o.suffix + 1), "truncate");
    }
  }
  char extra[64] = "";
  if (o.machine) std::snprintf(extra, sizeof extra, ",%.1f,%.1f", bw_best / 1e9, peak_best / 1e9);
  // Per-round lists (';'-separated, in round order): each mode's
  // attention part, and with --machine the bandwidth and peak measured
  // at the start of that round, so that a report can set every round's
  // attention part against the machine of the same seconds.
  std::string machine_rounds;
  if (o.machine) machine_rounds = "," + join(bw_round, 1e-9, "%.1f") + "," + join(peak_round, 1e-9, "%.1f");
  print_rows(runs, batch, prefix, extra, machine_rounds);
  for (Run& r : runs) clade_cache_free(r.cache);
  std::fflush(stdout);
}

int bench_decode(Args& a) {
  const DecodeOptions o = parse_decode_options(a);
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = o.threads;
  mp.backend = o.backend;
  mp.use_mmap = o.map_file;
  clade_model* m = nullptr;
  check(clade_model_load(o.model.c_str(), &mp, &m), "load");
  DecodeBench b{o, {}, CLADE_KV_F16, 0, 0, 0};
  b.info.size = sizeof b.info;
  check(clade_model_describe(m, &b.info), "describe");
  // Positions past the model's context: refused before any work, naming
  // the flag (the prefill would stop at CLADE_CONTEXT_FULL).
  const long longest = *std::max_element(o.prefixes.begin(), o.prefixes.end());
  if (!o.past_context && longest + o.suffix + o.gen > (long)b.info.n_ctx)
    Args::die("--prefix " + std::to_string(longest) + ": with --suffix " + std::to_string(o.suffix) + " and --gen " +
              std::to_string(o.gen) + " it passes the model's context of " + std::to_string(b.info.n_ctx) +
              " tokens (--past-context to go past it)");
  b.threads = o.threads == 0 ? (int)std::thread::hardware_concurrency() : o.threads;
  b.kvt = o.kv == "f32" ? CLADE_KV_F32 : o.kv == "bf16" ? CLADE_KV_BF16 : CLADE_KV_F16;
  b.kv_bytes_per_token =
      (size_t)b.info.n_layers * 2 * b.info.n_kv_heads * b.info.head_dim * (b.kvt == CLADE_KV_F32 ? 4 : 2);
  b.mem_total = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);

  std::printf("mode,batch,prefix,suffix,gen,threads,tokens_per_s,ms_per_step,ms_median,rounds,attn_ms%s,round_attn_ms%s\n",
              o.machine ? ",read_bandwidth_gb_s,gemm_gflop_s" : "",
              o.machine ? ",round_bw_gb_s,round_gflop_s,round_step_bw_gb_s" : "");
  std::fflush(stdout);
  for (long prefix : o.prefixes) {
    clade_tree_params tp;
    clade_tree_params_init(&tp);
    tp.kv_type = b.kvt;
    if (o.past_context) tp.flags |= CLADE_TREE_ALLOW_LONG_CONTEXT;
    clade_tree* tree = nullptr;
    check(clade_tree_create(m, &tp, &tree), "tree");
    std::vector<clade_token> ptoks((size_t)prefix);
    for (auto& t : ptoks) t = b.rand_tok();
    clade_node_id node = 0;
    auto tp0 = Clock::now();
    if (prefix > 0) check(clade_tree_append(tree, 0, ptoks.data(), ptoks.size(), nullptr, &node), "prefill");
    double prefill_s = secs(tp0, Clock::now());
    if (!o.csv) std::fprintf(stderr, "prefix %ld: prefill %.2f s (%.0f tokens/s)\n", prefix, prefill_s, prefix / prefill_s);
    for (long batch : o.batches) b.point(tree, node, batch, prefix);
    if (node) clade_tree_release(tree, node);
    clade_tree_free(tree);
  }
  clade_model_free(m);
  return 0;
}

}  // namespace

int cmd_bench(Args& a) {
  std::string sub = a.done() ? "" : a.next("bench");
  if (sub == "decode") return bench_decode(a);
  if (sub == "machine") return bench_machine(a);
  if (sub == "prefill") return cmd_bench_prefill(a);
  if (sub == "spec") return cmd_bench_spec(a);
  if (sub == "grammar") return cmd_bench_grammar(a);
  Args::die("bench decode|prefill|spec|grammar|machine");
}

}  // namespace cli
