// `clade`: the command-line tool. Everything here goes through the public C
// API (include/clade/clade.h), except `model random`, which uses the GGUF
// writer.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "cli.h"
#include "random_model.h"

namespace cli {

long to_long(const std::string& s, const std::string& flag) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end) Args::die("bad integer '" + s + "' for " + flag);
  return v;
}

double to_double(const std::string& s, const std::string& flag) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end) Args::die("bad number '" + s + "' for " + flag);
  return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t a = 0;
  for (;;) {
    size_t b = s.find(sep, a);
    out.push_back(s.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return out;
}

void check(clade_status st, const char* what) {
  if (st < 0) {
    std::fprintf(stderr, "clade: %s: %s: %s\n", what, clade_status_string(st), clade_last_error());
    std::exit(1);
  }
}

}  // namespace cli

using namespace cli;

namespace {

const char* kUsage =
    "usage: clade <command> [options]\n"
    "  demo                         make a small random model and run a shared-prompt generation\n"
    "  model random -o FILE [--layers N --dim N --heads N --kv-heads N --ff N --vocab N --ctx N\n"
    "               --type f32|f16|bf16|q8_0|q4_0 --seed S --vocab-from GGUF --arch llama|qwen2]\n"
    "  model info FILE\n"
    "  generate -m FILE (-p TEXT | --tokens \"1 2 3\")... [-n N] [--samples N] [--temp T] [--seed S]\n"
    "           [--attention shared|flat] [--threads T] [--backend cpu|cuda] [--no-mmap] [--json]\n"
    "      each -p / --tokens is one level of the prompt tree; siblings are separated by '|'\n"
    "  tokenize -m FILE [--no-bos] [--special] [--pieces] [--file PATH | TEXT]\n"
    "  bench decode -m FILE --batch B[,B..] --prefix P[,P..] [--suffix S] [--gen G]\n"
    "           [--mode shared,flat,noattn] [--threads T] [--rounds R] [--min-seconds S] [--machine]\n"
    "           [--kv f16|bf16|f32] [--backend cpu|cuda] [--no-mmap] [--csv]\n"
    "  bench prefill -m FILE --prompts N --lengths fixed:N|uniform:A:B|lognormal:MEDIAN:MAX|file:PATH\n"
    "           [--mode packed,padded,serial] [--parent-tokens P] [--batch B] [--chunk C] [--threads T]\n"
    "           [--seed S] [--rounds R] [--no-mmap] [--csv]\n"
    "  bench machine [--threads T] [--csv]\n"
    "  --no-mmap: read the model file into memory of its own (huge pages where the kernel allows;\n"
    "             faster decode steps) instead of mapping it\n";

clade_model* load_model(const std::string& path, int threads, bool vocab_only, clade_backend backend,
                        bool map_file = true) {
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = threads;
  mp.use_mmap = map_file;
  mp.backend = backend;
  mp.vocab_only = vocab_only;
  clade_model* m = nullptr;
  check(clade_model_load(path.c_str(), &mp, &m), ("loading " + path).c_str());
  return m;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '"') o += "\\\"";
    else if (c == '\\') o += "\\\\";
    else if (c == '\n') o += "\\n";
    else if (c == '\r') o += "\\r";
    else if (c == '\t') o += "\\t";
    else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else o += (char)c;
  }
  return o;
}

int cmd_model_info(Args& a) {
  if (a.done()) Args::die("model info FILE");
  std::string path = a.next("info");
  clade_model_params mp;
  clade_model_params_init(&mp);
  clade_model* m = nullptr;
  clade_status st = clade_model_load(path.c_str(), &mp, &m);
  if (st == CLADE_E_FORMAT || st == CLADE_E_UNSUPPORTED) {
    // maybe a vocabulary-only file
    mp.vocab_only = 1;
    if (clade_model_load(path.c_str(), &mp, &m) != CLADE_OK) check(st, ("loading " + path).c_str());
  } else {
    check(st, ("loading " + path).c_str());
  }
  clade_model_info in;
  in.size = sizeof in;
  check(clade_model_describe(m, &in), "describe");
  const char* types[] = {"f32", "f16", "q4_0"};
  const char* wt = in.weight_type <= 2 ? types[in.weight_type] : in.weight_type == 8 ? "q8_0" : "bf16";
  std::printf("architecture   %s\n", in.architecture);
  std::printf("name           %s\n", in.name);
  if (in.vocab_only) {
    std::printf("vocab_only     yes\nvocab          %d\n", in.n_vocab);
  } else {
    std::printf("layers         %d\nembedding      %d\nheads          %d\nkv_heads       %d\nhead_dim       %d\n",
                in.n_layers, in.n_embd, in.n_heads, in.n_kv_heads, in.head_dim);
    std::printf("feed_forward   %d\nvocab          %d\ncontext        %d\n", in.n_ff, in.n_vocab, in.n_ctx);
    std::printf("rope_base      %g\nrope_scale     %g\nrope_scaling   %s\nnorm_eps       %g\n", in.rope_freq_base,
                in.rope_freq_scale,
                in.rope_scaling == CLADE_ROPE_SCALING_LLAMA3 ? "llama3" : in.rope_scaling == CLADE_ROPE_SCALING_LINEAR ? "linear" : "none",
                in.norm_eps);
    std::printf("weights        %s\nqkv_bias       %s\ntied_output    %s\n", wt, in.has_qkv_bias ? "yes" : "no",
                in.tied_output ? "yes" : "no");
    std::printf("parameters     %llu\nweight_bytes   %llu\n", (unsigned long long)in.n_params,
                (unsigned long long)in.weight_bytes);
  }
  clade_special_tokens sp;
  sp.size = sizeof sp;
  if (clade_model_special_tokens(m, &sp) == CLADE_OK)
    std::printf("tokenizer      bos %d eos %d eot %d add_bos %d\n", sp.bos, sp.eos, sp.eot, sp.add_bos);
  else
    std::printf("tokenizer      none\n");
  clade_model_free(m);
  return 0;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) Args::die("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::vector<clade_token> tokenize(clade_model* m, const std::string& text, bool add_special, bool parse_special) {
  uint32_t flags = (add_special ? CLADE_TOKENIZE_ADD_SPECIAL : 0) | (parse_special ? CLADE_TOKENIZE_PARSE_SPECIAL : 0);
  size_t n = 0;
  clade_status st = clade_tokenize(m, text.data(), text.size(), flags, nullptr, 0, &n);
  if (st != CLADE_BUFFER_SMALL) check(st, "tokenize");
  std::vector<clade_token> ids(n);
  check(clade_tokenize(m, text.data(), text.size(), flags, ids.data(), ids.size(), &n), "tokenize");
  return ids;
}

std::string piece(clade_model* m, clade_token t) {
  char buf[256];
  size_t n = 0;
  clade_status st = clade_token_to_piece(m, t, 1, buf, sizeof buf, &n);
  if (st == CLADE_BUFFER_SMALL) {
    std::string s(n, 0);
    check(clade_token_to_piece(m, t, 1, s.data(), s.size(), &n), "token_to_piece");
    return s;
  }
  check(st, "token_to_piece");
  return std::string(buf, n);
}

std::string detokenize(clade_model* m, const std::vector<clade_token>& ids) {
  size_t n = 0;
  clade_status st = clade_detokenize(m, ids.data(), ids.size(), 0, nullptr, 0, &n);
  if (st != CLADE_BUFFER_SMALL) check(st, "detokenize");
  std::string s(n, 0);
  check(clade_detokenize(m, ids.data(), ids.size(), 0, s.data(), s.size(), &n), "detokenize");
  return s;
}

int cmd_tokenize(Args& a) {
  std::string model, file, text;
  bool bos = true, special = false, pieces = false, have_text = false;
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "-m") model = a.next(f);
    else if (f == "--no-bos") bos = false;
    else if (f == "--special") special = true;
    else if (f == "--pieces") pieces = true;
    else if (f == "--file") file = a.next(f);
    else if (!f.empty() && f[0] == '-' && f.size() > 1) Args::die("tokenize: unknown option " + f);
    else {
      text = f;
      have_text = true;
    }
  }
  if (model.empty()) Args::die("tokenize: -m FILE is required");
  if (!file.empty()) text = read_all(file);
  else if (!have_text) Args::die("tokenize: give TEXT or --file PATH");
  clade_model* m = load_model(model, 1, true, CLADE_BACKEND_CPU);
  std::vector<clade_token> ids = tokenize(m, text, bos, special);
  std::string line;
  for (size_t i = 0; i < ids.size(); i++) {
    if (i) line += ' ';
    line += pieces ? piece(m, ids[i]) : std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
  clade_model_free(m);
  return 0;
}

struct GenOptions {
  std::string model;
  std::vector<std::string> levels;  // raw level strings
  bool levels_are_tokens = false;
  int n_gen = 32, samples = 1, threads = 0;
  float temp = 0.0f;
  uint64_t seed = 0;
  bool json = false, flat = false, map_file = true;
  clade_backend backend = CLADE_BACKEND_CPU;
};

// One leaf of the prompt tree: its path of level texts / token lists.
struct Leaf {
  std::vector<std::vector<clade_token>> parts;
  std::string text;
};

int run_generate(const GenOptions& o) {
  clade_model* m = load_model(o.model, o.threads, false, o.backend, o.map_file);
  clade_model_info info;
  info.size = sizeof info;
  check(clade_model_describe(m, &info), "describe");
  clade_special_tokens sp;
  sp.size = sizeof sp;
  bool has_tok = clade_model_special_tokens(m, &sp) == CLADE_OK;
  if (!o.levels_are_tokens && !has_tok) Args::die("this model has no tokenizer: use --tokens");

  // Leaves: the cartesian product of each level's siblings.
  std::vector<Leaf> leaves(1);
  for (size_t l = 0; l < o.levels.size(); l++) {
    std::vector<Leaf> next;
    for (const std::string& sib : split(o.levels[l], '|')) {
      std::vector<clade_token> ids;
      if (o.levels_are_tokens) {
        std::istringstream ss(sib);
        std::string w;
        while (ss >> w) ids.push_back((clade_token)to_long(w, "--tokens"));
      } else {
        ids = tokenize(m, sib, l == 0, false);
      }
      for (const Leaf& p : leaves) {
        Leaf c = p;
        c.parts.push_back(ids);
        // Text levels join as written; token levels are lists, joined by a space.
        if (o.levels_are_tokens && !c.text.empty()) c.text += ' ';
        c.text += sib;
        next.push_back(c);
      }
    }
    leaves = next;
  }
  // Build the tree: identical prefixes of parts share nodes.
  clade_tree_params tp;
  clade_tree_params_init(&tp);
  clade_tree* tree = nullptr;
  check(clade_tree_create(m, &tp, &tree), "tree");
  int n_seqs = (int)leaves.size() * o.samples;
  int max_prompt = 0;
  for (const Leaf& lf : leaves) {
    int n = 0;
    for (const auto& p : lf.parts) n += (int)p.size();
    max_prompt = std::max(max_prompt, n);
  }
  clade_cache_params cp;
  clade_cache_params_init(&cp);
  cp.max_seqs = n_seqs;
  cp.max_tokens = o.n_gen + 1 + (o.flat ? max_prompt : 0);
  cp.attention = o.flat ? CLADE_ATTENTION_FLAT : CLADE_ATTENTION_AUTO;
  clade_cache* cache = nullptr;
  check(clade_cache_create(tree, &cp, &cache), "cache");

  auto t0 = std::chrono::steady_clock::now();
  std::vector<clade_seq_id> seq(n_seqs);
  std::vector<std::vector<float>> first_logits(leaves.size());
  std::vector<std::vector<clade_token>> out(n_seqs);
  std::vector<std::string> finish(n_seqs, "");
  std::vector<float> logits((size_t)n_seqs * info.n_vocab);
  std::vector<clade_node_id> made;
  if (!o.flat) {
    // shared: one node per distinct prefix of parts (a new one for every
    // leaf), all evaluated by one batch append; a child of a new node names
    // it as CLADE_ITEM_NODE(its item).
    std::vector<std::pair<std::vector<std::vector<clade_token>>, size_t>> known;  // prefix -> item
    std::vector<clade_append_item> items;
    std::vector<size_t> leaf_item(leaves.size());
    for (size_t li = 0; li < leaves.size(); li++) {
      clade_node_id parent = 0;
      std::vector<std::vector<clade_token>> prefix;
      for (size_t d = 0; d < leaves[li].parts.size(); d++) {
        prefix.push_back(leaves[li].parts[d]);
        long item = -1;
        for (auto& k : known)
          if (k.first == prefix) item = (long)k.second;
        bool last = d + 1 == leaves[li].parts.size();
        if (item < 0 || last) {
          const auto& toks = leaves[li].parts[d];
          if (last && toks.empty()) Args::die("a leaf prompt level is empty");
          clade_append_item it;
          clade_append_item_init(&it);
          it.parent = parent;
          it.tokens = toks.data();
          it.n_tokens = toks.size();
          if (last) {
            first_logits[li].resize((size_t)info.n_vocab);
            it.logits = first_logits[li].data();
            leaf_item[li] = items.size();
          }
          item = (long)items.size();
          items.push_back(it);
          known.push_back({prefix, (size_t)item});
        }
        parent = CLADE_ITEM_NODE(item);
      }
    }
    check(clade_tree_append_batch(tree, items.data(), items.size()), "append");
    for (const clade_append_item& it : items) made.push_back(it.node);
    for (size_t li = 0; li < leaves.size(); li++)
      for (int s = 0; s < o.samples; s++)
        check(clade_cache_add(cache, items[leaf_item[li]].node, nullptr, 0, 0, &seq[li * o.samples + s]), "add");
  } else {
    // flat: every sequence evaluates its whole prompt in its own cache
    std::vector<clade_seq_id> ids;
    std::vector<int32_t> zero;
    for (size_t li = 0; li < leaves.size(); li++) {
      std::vector<clade_token> all;
      for (const auto& p : leaves[li].parts) all.insert(all.end(), p.begin(), p.end());
      for (int s = 0; s < o.samples; s++) {
        check(clade_cache_add(cache, 0, all.data(), all.size(), 0, &seq[li * o.samples + s]), "add");
        ids.push_back(seq[li * o.samples + s]);
        zero.push_back(0);
      }
    }
    clade_batch b;
    clade_batch_init(&b);
    b.n_seqs = ids.size();
    b.seq_ids = ids.data();
    b.n_tokens = zero.data();
    b.logits = logits.data();
    b.logits_rows = (size_t)n_seqs;
    check(clade_decode(cache, &b), "prefill");
  }
  auto t1 = std::chrono::steady_clock::now();

  clade_sampler_params spp;
  clade_sampler_params_init(&spp);
  spp.temperature = o.temp;
  spp.seed = o.seed;
  clade_sampler* sampler = nullptr;
  check(clade_sampler_create(&spp, &sampler), "sampler");

  bool stream = n_seqs == 1 && !o.json && has_tok;
  clade_detokenizer* detok = nullptr;
  if (stream) {
    check(clade_detokenizer_create(m, 0, 0, &detok), "detokenizer");
    std::printf("%s", leaves[0].text.c_str());
    std::fflush(stdout);
  }
  std::vector<int> live(n_seqs);
  for (int i = 0; i < n_seqs; i++) live[i] = i;
  long generated = 0;
  for (int step = 0; step < o.n_gen && !live.empty(); step++) {
    std::vector<clade_seq_id> ids;
    std::vector<int32_t> ones;
    std::vector<clade_token> next;
    std::vector<int> still;
    for (size_t r = 0; r < live.size(); r++) {
      int i = live[r];
      const float* lg = (step == 0 && !o.flat) ? first_logits[(size_t)i / o.samples].data()
                                               : logits.data() + r * (size_t)info.n_vocab;
      clade_token t;
      check(clade_sample(sampler, (uint64_t)i, lg, info.n_vocab, nullptr, 0, &t), "sample");
      out[i].push_back(t);
      generated++;
      if (stream) {
        const char* txt;
        size_t len;
        check(clade_detokenizer_push(detok, t, &txt, &len), "detokenize");
        std::fwrite(txt, 1, len, stdout);
        std::fflush(stdout);
      }
      if (has_tok && clade_token_is_eog(m, t)) {
        finish[i] = "stop";
        continue;
      }
      if ((int)out[i].size() >= o.n_gen) {
        finish[i] = "length";
        continue;
      }
      still.push_back(i);
      ids.push_back(seq[i]);
      ones.push_back(1);
      next.push_back(t);
    }
    live = still;
    if (live.empty()) break;
    clade_batch b;
    clade_batch_init(&b);
    b.n_seqs = ids.size();
    b.seq_ids = ids.data();
    b.n_tokens = ones.data();
    b.tokens = next.data();
    b.logits = logits.data();
    b.logits_rows = (size_t)n_seqs;
    clade_status st = clade_decode(cache, &b);
    if (st == CLADE_CACHE_FULL) {
      for (int i : live) finish[i] = "length";
      break;
    }
    check(st, "decode");
  }
  auto t2 = std::chrono::steady_clock::now();
  if (stream) {
    const char* txt;
    size_t len;
    check(clade_detokenizer_flush(detok, &txt, &len), "detokenize");
    std::fwrite(txt, 1, len, stdout);
    std::printf("\n");
    clade_detokenizer_free(detok);
  } else {
    for (int i = 0; i < n_seqs; i++) {
      std::string text = has_tok ? detokenize(m, out[i]) : "";
      if (o.json) {
        std::string toks;
        for (size_t k = 0; k < out[i].size(); k++) toks += (k ? "," : "") + std::to_string(out[i][k]);
        std::printf("{\"id\":%d,\"prompt\":\"%s\",\"tokens\":[%s]", i, json_escape(leaves[(size_t)i / o.samples].text).c_str(),
                    toks.c_str());
        if (has_tok) std::printf(",\"text\":\"%s\"", json_escape(text).c_str());
        std::printf(",\"finish_reason\":\"%s\"}\n", finish[i].c_str());
      } else if (has_tok) {
        std::printf("[%d] %s%s\n", i, leaves[(size_t)i / o.samples].text.c_str(), text.c_str());
      } else {
        std::string toks;
        for (size_t k = 0; k < out[i].size(); k++) toks += (k ? " " : "") + std::to_string(out[i][k]);
        std::printf("%s\n", toks.c_str());
      }
    }
  }
  double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  double gen_s = std::chrono::duration<double>(t2 - t1).count();
  std::fprintf(stderr, "%d sequences, prompt tree %.1f ms, %ld tokens generated in %.2f s: %.1f tokens/s (%s attention)\n",
               n_seqs, prefill_s * 1e3, generated, gen_s, gen_s > 0 ? generated / gen_s : 0.0, o.flat ? "flat" : "shared");
  clade_sampler_free(sampler);
  clade_cache_free(cache);
  clade_tree_free(tree);
  clade_model_free(m);
  return 0;
}

int cmd_generate(Args& a) {
  GenOptions o;
  bool have_p = false, have_t = false;
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "-m") o.model = a.next(f);
    else if (f == "-p" || f == "--prompt") { o.levels.push_back(a.next(f)); have_p = true; }
    else if (f == "--tokens") { o.levels.push_back(a.next(f)); have_t = true; }
    else if (f == "-n") o.n_gen = (int)to_long(a.next(f), f);
    else if (f == "--samples") o.samples = (int)to_long(a.next(f), f);
    else if (f == "--temp") o.temp = (float)to_double(a.next(f), f);
    else if (f == "--seed") o.seed = (uint64_t)to_long(a.next(f), f);
    else if (f == "--threads") o.threads = (int)to_long(a.next(f), f);
    else if (f == "--json") o.json = true;
    else if (f == "--no-mmap") o.map_file = false;
    else if (f == "--backend") o.backend = parse_backend(a.next(f));
    else if (f == "--attention") {
      std::string v = a.next(f);
      if (v != "shared" && v != "flat") Args::die("--attention shared|flat");
      o.flat = v == "flat";
    } else Args::die("generate: unknown option " + f);
  }
  if (o.model.empty()) Args::die("generate: -m FILE is required");
  if (have_p == have_t) Args::die("generate: give the prompt levels with -p or with --tokens (not both)");
  if (o.n_gen < 1 || o.samples < 1) Args::die("generate: -n and --samples must be positive");
  o.levels_are_tokens = have_t;
  return run_generate(o);
}

int cmd_demo(Args& a) {
  std::string dir;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  dir = xdg ? std::string(xdg) + "/clade" : home ? std::string(home) + "/.cache/clade" : "/tmp/clade";
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "--dir") dir = a.next(f);
    else Args::die("demo: unknown option " + f);
  }
  std::string cmd = "mkdir -p '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) Args::die("cannot create " + dir);
  std::string path = dir + "/demo-random.gguf";
  // A real tokenizer makes the demo print text: use the Llama 2 vocabulary
  // when the shared reference data is next to the checkout.
  std::string vocab;
  for (const char* c : {"../shared/data/vocab/ggml-vocab-llama-spm.gguf", "shared/data/vocab/ggml-vocab-llama-spm.gguf"}) {
    struct stat st;
    if (stat(c, &st) == 0) vocab = c;
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "demo: writing a small random model to %s\n", path.c_str());
    RandomModelSpec sp;
    sp.layers = 4; sp.dim = 512; sp.heads = 8; sp.kv_heads = 2; sp.ff = 1408; sp.vocab = 32000;
    sp.type = "f16"; sp.seed = 7; sp.vocab_from = vocab;
    write_random_model(path, sp);
  }
  std::printf("clade demo: the weights of %s are RANDOM, so the text is gibberish;\n"
              "the point is the machinery: one shared prompt, two branches, two samples each,\n"
              "all decoded together with the prompt's KV stored once.\n"
              "Run a real model with: clade generate -m your-model.gguf -p \"Once upon a time\" -n 64\n\n",
              path.c_str());
  GenOptions o;
  o.model = path;
  o.n_gen = 24;
  o.samples = 2;
  o.temp = 0.8f;
  o.seed = 42;
  if (vocab.empty()) {
    o.levels = {"1 450 1900 6257 16424 3879 338", "349 666 29886 1363|678 2350 1363"};
    o.levels_are_tokens = true;
  } else {
    o.levels = {"The best starter Pokemon is", " Piplup because| Chimchar because"};
  }
  return run_generate(o);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i++) a.v.push_back(argv[i]);
  if (a.done()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string cmd = a.next("");
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("clade %s\n", clade_version_string());
    return 0;
  }
  if (cmd == "demo") return cmd_demo(a);
  if (cmd == "model") {
    std::string sub = a.next("model");
    if (sub == "random") return cmd_model_random(a);
    if (sub == "info") return cmd_model_info(a);
    Args::die("model random|info");
  }
  if (cmd == "generate") return cmd_generate(a);
  if (cmd == "tokenize") return cmd_tokenize(a);
  if (cmd == "bench") return cmd_bench(a);
  std::fputs(kUsage, stderr);
  return 2;
}
