// `clade model random` and `clade model info`.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>

#include "cli.h"
#include "format/gguf.h"
#include "random_model.h"

namespace cli {

namespace {

// The ChatML template as ChatML models ship it (Qwen's, without its default
// system message).
const char* kChatMLTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// A vocabulary file: vocab_from's tokenizer.* keys plus
// tokenizer.chat_template, which write_random_model then copies in.
void write_vocab_with_template(const std::string& path, const std::string& vocab_from, const std::string& tmpl) {
  auto vf = clade::GGUFFile::open(vocab_from);
  clade::GGUFWriter w;
  for (const clade::GGUFKV& kv : vf->kvs())
    if (kv.key.rfind("tokenizer.", 0) == 0 && kv.key != "tokenizer.chat_template") w.set_value(kv.key, kv.value);
  w.set_str("tokenizer.chat_template", tmpl);
  w.write(path);
}

// A size flag's value as an int; past int's range it is refused here (the
// model's own limits, far smaller, are checked by write_random_model, each
// naming its flag).
int size_flag(const std::string& v, const std::string& flag) {
  long x = to_long(v, flag);
  if (x < -1000000000L || x > 1000000000L) Args::die("model random: " + flag + " " + v + " is far too large");
  return (int)x;
}

}  // namespace

int cmd_model_random(Args& a) {
  std::string out, type = "f16", vocab_from, arch = "llama", chat_template;
  int layers = 2, dim = 256, heads = 8, kv_heads = 0, ff = 0, vocab = 1024, ctx = 4096;
  uint64_t seed = 1;
  bool have_vocab = false, peaked = false;
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "-o" || f == "--output") out = a.next(f);
    else if (f == "--layers") layers = size_flag(a.next(f), f);
    else if (f == "--dim") dim = size_flag(a.next(f), f);
    else if (f == "--heads") heads = size_flag(a.next(f), f);
    else if (f == "--kv-heads") kv_heads = size_flag(a.next(f), f);
    else if (f == "--ff") ff = size_flag(a.next(f), f);
    else if (f == "--vocab") { vocab = size_flag(a.next(f), f); have_vocab = true; }
    else if (f == "--ctx") ctx = size_flag(a.next(f), f);
    else if (f == "--type") type = a.next(f);
    else if (f == "--seed") seed = to_u64(a.next(f), f);
    else if (f == "--vocab-from") vocab_from = a.next(f);
    else if (f == "--arch") arch = word_flag(f, a.next(f), {"llama", "qwen2"});
    else if (f == "--peaked") peaked = true;
    else if (f == "--chat-template") {
      chat_template = a.next(f);
      if (chat_template.empty()) Args::die("--chat-template takes a template name or text");
    }
    else unknown_arg("model random", f);
  }
  if (out.empty()) Args::die("model random: -o FILE is required");
  if (have_vocab && !vocab_from.empty())
    Args::die("--vocab and --vocab-from conflict (--vocab-from's file gives the vocabulary and its size)");
  if (kv_heads == 0) kv_heads = heads;
  if (ff == 0) ff = (int)std::min(std::max((long)dim * 11 / 4 / 32 * 32, 32L), 1L << 30);
  if (!chat_template.empty() && vocab_from.empty())
    Args::die("--chat-template needs --vocab-from GGUF (a template needs a tokenizer)");
  std::string tmp_vocab;
  try {
    if (!chat_template.empty()) {
      // "chatml": the ChatML template's text; another name of
      // clade_chat_template_list is written as is (clade recognizes a
      // template that is just a name); anything else is template text.
      tmp_vocab = out + ".vocab.tmp";
      write_vocab_with_template(tmp_vocab, vocab_from, chat_template == "chatml" ? kChatMLTemplate : chat_template);
      vocab_from = tmp_vocab;
    }
    RandomModelSpec sp;
    sp.layers = layers; sp.dim = dim; sp.heads = heads; sp.kv_heads = kv_heads; sp.ff = ff; sp.vocab = vocab;
    sp.ctx = ctx; sp.type = type; sp.seed = seed; sp.vocab_from = vocab_from; sp.arch = arch;
    sp.supported_only = true;
    sp.peaked = peaked;
    write_random_model(out, sp);
  } catch (const std::exception& e) {
    if (!tmp_vocab.empty()) std::remove(tmp_vocab.c_str());
    Args::die("model random: " + std::string(e.what()));
  }
  if (!tmp_vocab.empty()) std::remove(tmp_vocab.c_str());
  std::fprintf(stderr, "wrote %s (random weights)\n", out.c_str());
  return 0;
}

namespace {

// What the file's header says of its family: general.basename (or
// general.name) with general.size_label, else a guess from the
// architecture and the tokenizer.
std::string family_of(const clade::GGUFFile& f) {
  std::string base = f.get_str("general.basename", "");
  if (base.empty()) base = f.get_str("general.name", "");
  const std::string size = f.get_str("general.size_label", "");
  if (!base.empty()) return size.empty() || base.find(size) != std::string::npos ? base : base + " " + size;
  const std::string arch = f.get_str("general.architecture", ""), pre = f.get_str("tokenizer.ggml.pre", "");
  const std::string model = f.get_str("tokenizer.ggml.model", "");
  if (arch == "qwen2") return "Qwen2 or Qwen2.5 (guessed from the architecture)";
  if (arch != "llama") return arch + " (guessed from the architecture)";
  if (pre == "llama-bpe" || pre == "llama3") return "Llama 3.x (guessed from the pre-tokenizer)";
  if (pre == "smollm") return "SmolLM (guessed from the pre-tokenizer)";
  if (model == "llama") return "Llama 1/2, TinyLlama, Mistral 7B or another with an SPM vocabulary (guessed)";
  return "a llama-architecture model (no name in the file)";
}

}  // namespace

// What the file holds (read from its header) and what clade made of it
// (loaded through the C API): a file clade does not run is described too,
// with a status line giving the reason.
int cmd_model_info(Args& a) {
  if (a.done()) Args::die("model info: give FILE (clade model info --help)");
  std::string path = a.next("info");
  if (path.size() > 1 && path[0] == '-') unknown_arg("model info", path);
  if (!a.done()) unknown_arg("model info", a.next(""));
  std::unique_ptr<clade::GGUFFile> f;
  try {
    f = clade::GGUFFile::open(path);
  } catch (const std::exception&) {
    // the library's own message and status
    clade_model_params mp;
    clade_model_params_init(&mp);
    mp.vocab_only = 1;
    clade_model* none = nullptr;
    check(clade_model_load(path.c_str(), &mp, &none), ("loading " + path).c_str());
    clade_model_free(none);
    Args::die("model info: cannot read " + path);
  }
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = 1;
  clade_model* m = nullptr;
  clade_status st = clade_model_load(path.c_str(), &mp, &m);
  std::string status = "runs";
  if (st != CLADE_OK) {
    std::string why = clade_last_error();
    if (st != CLADE_E_FORMAT && st != CLADE_E_UNSUPPORTED) check(st, ("loading " + path).c_str());
    status = (st == CLADE_E_UNSUPPORTED ? "not supported: " : "not loadable: ") + why;
    if (f->tensors().empty()) {  // a vocabulary file
      mp.vocab_only = 1;
      if (clade_model_load(path.c_str(), &mp, &m) == CLADE_OK) status = "vocabulary only (no tensors)";
    }
  }
  clade_model_info in;
  clade_model_info_init(&in);
  if (m) check(clade_model_describe(m, &in), "describe");
  const bool full = m && !in.vocab_only;
  const std::string arch = f->get_str("general.architecture", "");
  auto arch_int = [&](const char* k) { return (long long)f->get_int(arch + "." + k, 0); };

  std::printf("architecture   %s\n", arch.empty() ? "(none)" : arch.c_str());
  std::printf("name           %s\n", f->get_str("general.name", "").c_str());
  std::printf("family         %s\n", family_of(*f).c_str());
  std::printf("status         %s\n", status.c_str());
  if (full) {
    std::printf("layers         %d\nembedding      %d\nheads          %d\nkv_heads       %d\nhead_dim       %d\n",
                in.n_layers, in.n_embd, in.n_heads, in.n_kv_heads, in.head_dim);
    std::printf("feed_forward   %d\nvocab          %d\n", in.n_ff, in.n_vocab);
  } else if (m) {
    std::printf("vocab_only     yes\nvocab          %d\n", in.n_vocab);
  }
  // context: clade's (limited to a sliding window) and the file's
  const long long ctx_file = arch_int("context_length"), window = arch_int("attention.sliding_window");
  if (full && in.n_ctx != ctx_file)
    std::printf("context        %d (the file's %lld, limited to its sliding window: clade attends to the whole "
                "context, which equals the window's attention up to it)\n", in.n_ctx, ctx_file);
  else if (ctx_file > 0)
    std::printf("context        %lld\n", ctx_file);
  std::printf("sliding_window %s\n", window > 0 ? std::to_string(window).c_str() : "none");
  if (full) {
    const char* scaling = in.rope_scaling == CLADE_ROPE_SCALING_LLAMA3   ? "llama3"
                          : in.rope_scaling == CLADE_ROPE_SCALING_LINEAR ? "linear"
                                                                         : "none";
    const clade::GGUFTensor* rf = f->find_tensor("rope_freqs.weight");
    std::printf("rope           %s, base %g, scaling %s (scale %g)%s\n",
                arch == "qwen2" ? "neox (pairs i, i + d/2)" : "normal (pairs 2i, 2i + 1)", in.rope_freq_base, scaling,
                in.rope_freq_scale,
                rf ? (", rope_freqs tensor (" + std::to_string(rf->ne[0]) + " factors)").c_str() : "");
    std::printf("norm_eps       %g\n", in.norm_eps);
    std::printf("output         %s\n", in.tied_output ? "tied to token_embd" : "separate (output.weight)");
    std::printf("qkv_bias       %s\n", in.has_qkv_bias ? "yes" : "no");
    // (clade_weight_type numbers the types as GGML does, as TensorType does)
    std::printf("weights        %s (the largest matrices)\nparameters     %llu\nweight_bytes   %llu\n",
                clade::tensor_type_name((clade::TensorType)in.weight_type), (unsigned long long)in.n_params,
                (unsigned long long)in.weight_bytes);
  }
  const std::string tmodel = f->get_str("tokenizer.ggml.model", "");
  const clade::GGUFValue* toks = f->find("tokenizer.ggml.tokens");
  if (tmodel.empty()) {
    std::printf("tokenizer      none\n");
  } else {
    const char* kind = tmodel == "llama" ? " (SPM)" : tmodel == "gpt2" ? " (byte-level BPE)" : "";
    std::printf("tokenizer      %s%s, %zu tokens\n", tmodel.c_str(), kind, toks ? toks->array_size() : (size_t)0);
    std::printf("pre_tokenizer  %s\n", f->find("tokenizer.ggml.pre") ? f->get_str("tokenizer.ggml.pre", "").c_str()
                                                                      : "(none)");
  }
  clade_special_tokens sp;
  clade_special_tokens_init(&sp);
  if (m && clade_model_special_tokens(m, &sp) == CLADE_OK)
    std::printf("special        bos %d eos %d eot %d add_bos %d\n", sp.bos, sp.eos, sp.eot, sp.add_bos);
  if (f->find("tokenizer.chat_template")) {
    const char* family = nullptr;
    if (m && clade_chat_template_name(m, &family) != CLADE_OK) family = nullptr;
    std::printf("chat_template  yes (%s)\n", family ? family : "not recognized");
  } else {
    std::printf("chat_template  none\n");
  }
  std::map<std::string, int> types;
  for (const clade::GGUFTensor& t : f->tensors()) types[clade::tensor_type_name(t.type)]++;
  std::string tl;
  for (const auto& kv : types) tl += (tl.empty() ? "" : ", ") + kv.first + " " + std::to_string(kv.second);
  std::printf("tensors        %zu%s%s\n", f->tensors().size(), tl.empty() ? "" : ": ", tl.c_str());
  clade_model_free(m);
  return 0;
}

}  // namespace cli
