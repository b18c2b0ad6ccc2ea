// `clade model random`.
#include <algorithm>
#include <cstdio>
#include <exception>

#include "cli.h"
#include "gguf.h"
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

}  // namespace cli
