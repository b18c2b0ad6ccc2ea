// `clade bench prefill`: many prompts evaluated into one tree, three ways.
//   packed  one clade_tree_append_batch of every prompt (the library packs
//           the passes, never pads);
//   padded  the usual framework baseline: batches of --batch prompts, every
//           prompt of a batch padded to the batch's longest with pad
//           tokens that are really computed (one clade_tree_append_batch
//           per batch, all its items of that length);
//   serial  one clade_tree_append per prompt.
// No logits are asked for in any mode (a padded prompt's last token is a
// pad, so its logits would be meaningless there).
#define CLADE_EXPERIMENTAL 1  // clade_tree_get_stats

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>

#include "cli.h"

namespace cli {

namespace {

using Clock = std::chrono::steady_clock;

// The sigma of `lognormal:MEDIAN:MAX` (of the length's natural log): the
// 90th percentile is then 3.6x the median and the 99th 10x, the long tail
// of real prompt lengths.
constexpr double kLognormalSigma = 1.0;

const char* kModes[] = {"packed", "padded", "serial"};

// splitmix64: the same lengths and tokens from the same --seed on every
// platform (the <random> distributions differ between libraries).
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  long below(long n) { return (long)(next() % (uint64_t)n); }
  double normal() {  // Box-Muller
    const double u = 1.0 - uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
};

struct Lengths {
  enum Kind { FIXED, UNIFORM, LOGNORMAL, FILE } kind = FIXED;
  long a = 0, b = 0;
  std::vector<long> listed;  // file:PATH
};

[[noreturn]] void bad_lengths(const std::string& s, const std::string& why) {
  Args::die("bench prefill: bad --lengths '" + s + "': " + why +
            " (fixed:N, uniform:A:B, lognormal:MEDIAN:MAX or file:PATH)");
}

long positive_field(const std::string& s, const std::string& field) {
  char* end = nullptr;
  long v = std::strtol(field.c_str(), &end, 10);
  if (field.empty() || *end) bad_lengths(s, "'" + field + "' is not an integer");
  if (v < 1) bad_lengths(s, "'" + field + "' is not positive");
  return v;
}

Lengths parse_lengths(const std::string& s) {
  Lengths d;
  const size_t colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  if (colon == std::string::npos) bad_lengths(s, "no ':'");
  if (kind == "file") {
    d.kind = Lengths::FILE;
    const std::string path = s.substr(colon + 1);
    std::ifstream f(path);
    if (path.empty() || !f) bad_lengths(s, "cannot read '" + path + "'");
    std::string line;
    for (int no = 1; std::getline(f, line); no++) {
      line.erase(0, line.find_first_not_of(" \t\r"));
      line.erase(line.find_last_not_of(" \t\r") + 1);
      if (line.empty()) continue;
      char* end = nullptr;
      long v = std::strtol(line.c_str(), &end, 10);
      if (*end || v < 1) bad_lengths(s, "line " + std::to_string(no) + " ('" + line + "') is not a positive integer");
      d.listed.push_back(v);
    }
    if (d.listed.empty()) bad_lengths(s, "the file lists no length");
    return d;
  }
  const std::vector<std::string> f = split(s.substr(colon + 1), ':');
  if (kind == "fixed") {
    if (f.size() != 1) bad_lengths(s, "fixed takes one number");
    d.kind = Lengths::FIXED;
    d.a = positive_field(s, f[0]);
  } else if (kind == "uniform" || kind == "lognormal") {
    if (f.size() != 2) bad_lengths(s, kind + " takes two numbers");
    d.kind = kind == "uniform" ? Lengths::UNIFORM : Lengths::LOGNORMAL;
    d.a = positive_field(s, f[0]);
    d.b = positive_field(s, f[1]);
    if (d.a > d.b) bad_lengths(s, kind == "uniform" ? "A > B" : "MEDIAN > MAX");
  } else {
    bad_lengths(s, "unknown distribution '" + kind + "'");
  }
  return d;
}

// n lengths: file lengths in the file's order (cycled when n is larger).
std::vector<long> draw_lengths(const Lengths& d, long n, Rng& rng) {
  std::vector<long> v((size_t)n);
  for (long i = 0; i < n; i++) {
    long x = d.a;
    if (d.kind == Lengths::UNIFORM) x = d.a + rng.below(d.b - d.a + 1);
    else if (d.kind == Lengths::LOGNORMAL) {
      const double l = std::exp(std::log((double)d.a) + kLognormalSigma * rng.normal());
      x = (long)std::min((double)d.b, std::max(1.0, std::round(l)));
    } else if (d.kind == Lengths::FILE) x = d.listed[(size_t)i % d.listed.size()];
    v[(size_t)i] = x;
  }
  return v;
}

struct PrefillOptions {
  std::string model, lengths_arg;
  Lengths lengths;
  long prompts = 0, parent = 0, batch = 16, chunk = 0, seed = 1;
  int threads = 0, rounds = 3;
  std::vector<std::string> modes{"packed", "padded", "serial"};
  bool csv = false, map_file = true;
};

long positive(const std::string& v, const std::string& flag, long min = 1) {
  return int_flag(flag, v, min, 1L << 30);
}

PrefillOptions parse_prefill_options(Args& a) {
  PrefillOptions o;
  bool have_prompts = false;
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "-m") o.model = a.next(f);
    else if (f == "--prompts") { o.prompts = positive(a.next(f), f); have_prompts = true; }
    else if (f == "--lengths") o.lengths_arg = a.next(f);
    else if (f == "--mode") o.modes = split(a.next(f), ',');
    else if (f == "--parent-tokens") o.parent = positive(a.next(f), f, 0);
    else if (f == "--batch") o.batch = positive(a.next(f), f);
    else if (f == "--chunk") {
      o.chunk = positive(a.next(f), f);
      if (o.chunk > (1 << 20)) Args::die("bench prefill: --chunk must be at most 1048576");
    } else if (f == "--threads") o.threads = (int)int_flag(f, a.next(f), 0, 1024);
    else if (f == "--seed") o.seed = to_long(a.next(f), f);
    else if (f == "--rounds") o.rounds = (int)positive(a.next(f), f);
    else if (f == "--csv") o.csv = true;
    else if (f == "--no-mmap") o.map_file = false;
    else unknown_arg("bench prefill", f);
  }
  if (o.model.empty()) Args::die("bench prefill: -m FILE is required");
  if (o.lengths_arg.empty()) Args::die("bench prefill: --lengths DIST is required");
  o.lengths = parse_lengths(o.lengths_arg);
  if (!have_prompts) {
    if (o.lengths.kind != Lengths::FILE) Args::die("bench prefill: --prompts N is required");
    o.prompts = (long)o.lengths.listed.size();  // file:PATH: one prompt per line
  }
  for (size_t i = 0; i < o.modes.size(); i++) {
    const std::string& m = o.modes[i];
    if (std::find(std::begin(kModes), std::end(kModes), m) == std::end(kModes))
      Args::die("bench prefill: unknown --mode '" + m + "' (takes packed, padded, serial)");
    if (std::find(o.modes.begin(), o.modes.begin() + (long)i, m) != o.modes.begin() + (long)i)
      Args::die("bench prefill: --mode lists '" + m + "' twice");
  }
  return o;
}

struct ModeResult {
  std::string mode;
  std::vector<double> seconds;  // per round
  uint64_t workspace = 0, kv = 0;  // largest seen
  uint64_t shared = 0, flat = 0;   // spans its appends attended each way (last round)
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct PrefillBench {
  const PrefillOptions& o;
  clade_model* model;
  int32_t chunk;  // the tree's prefill_chunk (0: the library's default)
  std::vector<clade_token> parent;
  std::vector<std::vector<clade_token>> prompts;
  clade_token pad;

  // The timed appends of one mode under node `under`; returns seconds.
  double run(clade_tree* tree, clade_node_id under, const std::string& mode) {
    std::vector<clade_append_item> items;
    std::vector<std::vector<clade_token>> padded;
    auto item = [&](const std::vector<clade_token>& toks) {
      clade_append_item it;
      clade_append_item_init(&it);
      it.parent = under;
      it.tokens = toks.data();
      it.n_tokens = toks.size();
      items.push_back(it);
    };
    double s = 0;
    if (mode == "packed") {
      for (const auto& p : prompts) item(p);
      const auto t0 = Clock::now();
      check(clade_tree_append_batch(tree, items.data(), items.size()), "packed append");
      s = std::chrono::duration<double>(Clock::now() - t0).count();
    } else if (mode == "serial") {
      for (const auto& p : prompts) {
        clade_node_id id;
        const auto t0 = Clock::now();
        check(clade_tree_append(tree, under, p.data(), p.size(), nullptr, &id), "serial append");
        s += std::chrono::duration<double>(Clock::now() - t0).count();
      }
    } else {  // padded: the padded copies are made before the clock starts
      for (size_t lo = 0; lo < prompts.size(); lo += (size_t)o.batch) {
        const size_t hi = std::min(prompts.size(), lo + (size_t)o.batch);
        size_t longest = 0;
        for (size_t i = lo; i < hi; i++) longest = std::max(longest, prompts[i].size());
        padded.assign(prompts.begin() + (long)lo, prompts.begin() + (long)hi);
        items.clear();
        for (auto& p : padded) {
          p.resize(longest, pad);
          item(p);
        }
        const auto t0 = Clock::now();
        check(clade_tree_append_batch(tree, items.data(), items.size()), "padded append");
        s += std::chrono::duration<double>(Clock::now() - t0).count();
      }
    }
    return s;
  }

  // One mode, one round: a fresh tree, the parent appended untimed, the
  // timed appends, the tree's workspace and KV noted, the tree freed.
  void round(ModeResult& r) {
    clade_tree_params tp;
    clade_tree_params_init(&tp);
    tp.prefill_chunk = chunk;
    clade_tree* tree = nullptr;
    check(clade_tree_create(model, &tp, &tree), "tree");
    clade_node_id under = 0;
    if (!parent.empty()) check(clade_tree_append(tree, 0, parent.data(), parent.size(), nullptr, &under), "parent append");
    clade_tree_stats st0;
    st0.size = sizeof st0;
    check(clade_tree_get_stats(tree, &st0), "tree stats");
    r.seconds.push_back(run(tree, under, r.mode));
    clade_tree_stats st;
    st.size = sizeof st;
    check(clade_tree_get_stats(tree, &st), "tree stats");
    r.shared = st.shared_spans - st0.shared_spans;
    r.flat = st.flat_spans - st0.flat_spans;
    r.workspace = std::max(r.workspace, st.workspace_bytes);
    r.kv = std::max(r.kv, clade_tree_kv_used(tree));
    clade_tree_free(tree);
  }
};

}  // namespace

int cmd_bench_prefill(Args& a) {
  const PrefillOptions o = parse_prefill_options(a);
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = o.threads;
  mp.use_mmap = o.map_file;
  clade_model* m = nullptr;
  check(clade_model_load(o.model.c_str(), &mp, &m), ("loading " + o.model).c_str());
  clade_model_info info;
  info.size = sizeof info;
  check(clade_model_describe(m, &info), "describe");

  Rng rng{(uint64_t)o.seed};
  std::vector<long> lens = draw_lengths(o.lengths, o.prompts, rng);
  const long longest = *std::max_element(lens.begin(), lens.end());
  if (o.parent + longest > info.n_ctx)
    Args::die("bench prefill: --lengths gives a prompt of " + std::to_string(longest) + " tokens; with --parent-tokens " +
              std::to_string(o.parent) + " that passes the model's context of " + std::to_string(info.n_ctx));
  PrefillBench b{o, m, (int32_t)o.chunk, {}, {}, 0};
  b.parent.resize((size_t)o.parent);
  for (auto& t : b.parent) t = (clade_token)rng.below(info.n_vocab);
  long total = 0;
  for (long n : lens) {
    b.prompts.emplace_back((size_t)n);
    for (auto& t : b.prompts.back()) t = (clade_token)rng.below(info.n_vocab);
    total += n;
  }
  clade_special_tokens sp;
  sp.size = sizeof sp;
  b.pad = 0;
  if (clade_model_special_tokens(m, &sp) == CLADE_OK) b.pad = sp.pad >= 0 ? sp.pad : sp.eos >= 0 ? sp.eos : 0;
  const int threads = o.threads ? o.threads : (int)std::thread::hardware_concurrency();
  // The chunk the trees use: the library's default when --chunk is absent.
  const long chunk = o.chunk ? o.chunk : 1024;

  long padded_total = 0;
  for (size_t lo = 0; lo < lens.size(); lo += (size_t)o.batch) {
    const size_t hi = std::min(lens.size(), lo + (size_t)o.batch);
    padded_total += (long)(hi - lo) * *std::max_element(lens.begin() + (long)lo, lens.begin() + (long)hi);
  }
  std::vector<long> sorted = lens;
  std::sort(sorted.begin(), sorted.end());
  std::fprintf(stderr,
               "bench prefill: %ld prompts, %ld tokens (lengths %s: min %ld, median %ld, max %ld), parent %ld, "
               "chunk %ld, %d threads; padded (batch %ld) computes %ld tokens (%.1f%% padding)\n",
               o.prompts, total, o.lengths_arg.c_str(), sorted.front(), sorted[sorted.size() / 2], sorted.back(),
               o.parent, chunk, threads, o.batch, padded_total, 100.0 * (padded_total - total) / padded_total);

  {  // warm-up, untimed: the weights paged in, the threads started
    clade_tree_params tp;
    clade_tree_params_init(&tp);
    clade_tree* tree = nullptr;
    check(clade_tree_create(m, &tp, &tree), "tree");
    std::vector<clade_token> w((size_t)std::min(64L, info.n_ctx > 0 ? (long)info.n_ctx : 64L), 0);
    clade_node_id id;
    check(clade_tree_append(tree, 0, w.data(), w.size(), nullptr, &id), "warm-up append");
    clade_tree_free(tree);
  }

  std::vector<ModeResult> res;
  for (const std::string& mode : o.modes) res.push_back(ModeResult{mode, {}, 0, 0});
  // Round r runs the modes starting with mode r (mod their count), so no
  // mode is always the first after the warm-up or the one after another.
  for (int r = 0; r < o.rounds; r++)
    for (size_t k = 0; k < res.size(); k++) b.round(res[(k + (size_t)r) % res.size()]);

  struct Row {
    std::string mode;
    double seconds, tps;
    uint64_t peak;
  };
  std::vector<Row> rows;
  for (const ModeResult& r : res) {
    const double s = median(r.seconds);
    rows.push_back({r.mode, s, total / s, r.workspace + r.kv});
    // How the prompts' passes read the shared spans above them (a parent
    // read once for all its prompts' rows counts one shared span a pass).
    std::fprintf(stderr, "bench prefill: %s: spans attended shared %llu, flat %llu (last round)\n", r.mode.c_str(),
                 (unsigned long long)r.shared, (unsigned long long)r.flat);
  }
  const char* header = "mode,prompts,total_tokens,parent_tokens,chunk,threads,seconds,tokens_per_s,peak_bytes";
  if (o.csv) {
    std::printf("%s\n", header);
    for (const Row& r : rows)
      std::printf("%s,%ld,%ld,%ld,%ld,%d,%.6f,%.1f,%llu\n", r.mode.c_str(), o.prompts, total, o.parent, chunk, threads,
                  r.seconds, r.tps, (unsigned long long)r.peak);
  } else {
    std::printf("%-7s %8s %12s %13s %6s %7s %10s %12s %12s\n", "mode", "prompts", "total_tokens", "parent_tokens",
                "chunk", "threads", "seconds", "tokens_per_s", "peak_bytes");
    for (const Row& r : rows)
      std::printf("%-7s %8ld %12ld %13ld %6ld %7d %10.4f %12.1f %12llu\n", r.mode.c_str(), o.prompts, total, o.parent,
                  chunk, threads, r.seconds, r.tps, (unsigned long long)r.peak);
    const Row* packed = nullptr;
    for (const Row& r : rows)
      if (r.mode == "packed") packed = &r;
    if (packed)
      for (const Row& r : rows)
        if (&r != packed)
          std::printf("packed/%s: %.2fx tokens/s, %.2fx peak bytes\n", r.mode.c_str(), packed->tps / r.tps,
                      (double)packed->peak / (double)r.peak);
    std::printf("median of %d rounds; tokens_per_s counts the prompts' own tokens (not the parent, not padding)\n",
                o.rounds);
  }
  clade_model_free(m);
  return 0;
}

}  // namespace cli
