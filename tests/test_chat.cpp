// Chat templates (clade_chat_apply, clade_chat_template_name,
// clade_chat_template_list):
// - each family's text for a fixed conversation (system, user, assistant,
//   user, with the assistant prompt) against the exact string of the
//   family's documented format (sources named at each string);
// - recognition of each family from a template text of its kind, written
//   here with the family's markers, on tiny GGUF models carrying it as
//   tokenizer.chat_template (a random model with the SentencePiece
//   vocabulary of tests/data/vocab, CLADE_VOCAB_DIR);
// - an unknown template, no template, explicit names, roles a family
//   refuses, a buffer too small, NULL arguments;
// - the BOS rule: the text has no leading BOS, and tokenizing it with
//   ADD_SPECIAL | PARSE_SPECIAL gives BOS first and the markers as tokens.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "clade/clade.h"
#include "format/gguf.h"
#include "random_model.h"

#define CHECK_ST(call, want)                                                                          \
  do {                                                                                                \
    clade_status got_ = (call);                                                                       \
    CHECK_MSG(got_ == (want), "%s gave %d (%s), want %d: %s", #call, (int)got_, clade_status_string(got_), \
              (int)(want), clade_last_error());                                                       \
  } while (0)

namespace {

const clade_chat_message kConv[] = {
    {"system", "You are a terse assistant."},
    {"user", "Hello!"},
    {"assistant", "Hi. How can I help?"},
    {"user", "Name a colour."},
};
const size_t kConvN = 4;

// The conversation formatted by each family, with the assistant prompt.
struct Expected {
  const char* name;
  std::string text;
};

std::vector<Expected> expected() {
  return {
      // ChatML as Qwen2/Qwen2.5 write it: "<|im_start|>" role "\n" content
      // "<|im_end|>\n" per message, "<|im_start|>assistant\n" to prompt
      // (OpenAI's chatml.md; Qwen2 tokenizer_config.json chat_template).
      {"chatml",
       "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n"
       "<|im_start|>user\nHello!<|im_end|>\n"
       "<|im_start|>assistant\nHi. How can I help?<|im_end|>\n"
       "<|im_start|>user\nName a colour.<|im_end|>\n"
       "<|im_start|>assistant\n"},
      // Llama 3: Meta's "Meta Llama 3" prompt format (llama.com model cards):
      // <|begin_of_text|> (the tokenizer's BOS, not in the text), then
      // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> per
      // message and the assistant header to prompt.
      {"llama3",
       "<|start_header_id|>system<|end_header_id|>\n\nYou are a terse assistant.<|eot_id|>"
       "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
       "<|start_header_id|>assistant<|end_header_id|>\n\nHi. How can I help?<|eot_id|>"
       "<|start_header_id|>user<|end_header_id|>\n\nName a colour.<|eot_id|>"
       "<|start_header_id|>assistant<|end_header_id|>\n\n"},
      // Llama 2 Chat: Hugging Face's "How to prompt Llama 2" and the
      // meta-llama/Llama-2-7b-chat-hf chat_template: <s>[INST] <<SYS>>\n S
      // \n<</SYS>>\n\n U1 [/INST] A1 </s><s>[INST] U2 [/INST] (the first
      // <s> is the tokenizer's).
      {"llama2",
       "[INST] <<SYS>>\nYou are a terse assistant.\n<</SYS>>\n\nHello! [/INST] Hi. How can I help? </s>"
       "<s>[INST] Name a colour. [/INST]"},
      // Mistral tokenizer V3 (docs.mistral.ai, "Tokenization: templates";
      // Mistral-7B-Instruct-v0.3's chat_template): <s>[INST] U1[/INST]
      // A1</s>[INST] U2[/INST], the system prompt before the last user
      // message's text, followed by "\n\n".
      {"mistral",
       "[INST] Hello![/INST] Hi. How can I help?</s>"
       "[INST] You are a terse assistant.\n\nName a colour.[/INST]"},
      // Gemma: ai.google.dev "Gemma formatting and system instructions":
      // <start_of_turn>user\n ... <end_of_turn>\n, "model" for the
      // assistant, system instructions at the start of the first user turn
      // (Gemma 3's chat_template: system text + "\n\n").
      {"gemma",
       "<start_of_turn>user\nYou are a terse assistant.\n\nHello!<end_of_turn>\n"
       "<start_of_turn>model\nHi. How can I help?<end_of_turn>\n"
       "<start_of_turn>user\nName a colour.<end_of_turn>\n"
       "<start_of_turn>model\n"},
      // Phi-3: microsoft/Phi-3-mini-4k-instruct model card and
      // chat_template: <|role|>\n content <|end|>\n, <|assistant|>\n to
      // prompt.
      {"phi3",
       "<|system|>\nYou are a terse assistant.<|end|>\n"
       "<|user|>\nHello!<|end|>\n"
       "<|assistant|>\nHi. How can I help?<|end|>\n"
       "<|user|>\nName a colour.<|end|>\n"
       "<|assistant|>\n"},
      // Zephyr: HuggingFaceH4/zephyr-7b-beta model card and chat_template:
      // <|role|>\n content </s>\n (EOS), <|assistant|>\n to prompt.
      {"zephyr",
       "<|system|>\nYou are a terse assistant.</s>\n"
       "<|user|>\nHello!</s>\n"
       "<|assistant|>\nHi. How can I help?</s>\n"
       "<|user|>\nName a colour.</s>\n"
       "<|assistant|>\n"},
  };
}

// Template texts of each family's kind, written for these tests with the
// family's distinctive markers (shortened Jinja, not any model's file).
struct Sample {
  const char* name;
  const char* tmpl;
};
const Sample kSamples[] = {
    {"chatml",
     "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
     "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"},
    {"llama2",
     "{% if messages[0]['role'] == 'system' %}{% set sys = '<<SYS>>\\n' + messages[0]['content'] + "
     "'\\n<</SYS>>\\n\\n' %}{% endif %}{% for m in messages %}{% if m['role'] == 'user' %}"
     "{{ bos_token + '[INST] ' + m['content'].strip() + ' [/INST]' }}{% endif %}{% endfor %}"},
    {"mistral",
     "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '[INST] ' + m['content'] + "
     "'[/INST]' }}{% elif m['role'] == 'assistant' %}{{ ' ' + m['content']|trim + eos_token }}{% endif %}"
     "{% endfor %}"},
    {"llama3",
     "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' "
     "+ m['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
     "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"},
    {"gemma",
     "{{ bos_token }}{% for m in messages %}{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
     "{{ '<start_of_turn>' + role + '\\n' + m['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
     "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"},
    {"phi3",
     "{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}{% endfor %}"
     "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"},
    {"zephyr",
     "{% for m in messages %}{% if m['role'] == 'user' %}{{ '<|user|>\\n' + m['content'] + eos_token }}"
     "{% elif m['role'] == 'system' %}{{ '<|system|>\\n' + m['content'] + eos_token }}"
     "{% elif m['role'] == 'assistant' %}{{ '<|assistant|>\\n' + m['content'] + eos_token }}{% endif %}"
     "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}{% endfor %}"},
    // A template that is just a family's name (as llama.cpp accepts).
    {"gemma", "gemma"},
};

std::string apply(const clade_model* m, const char* name, const clade_chat_message* msgs, size_t n, int add,
                  clade_status* st_out = nullptr) {
  size_t need = 0;
  clade_status st = clade_chat_apply(m, name, msgs, n, add, nullptr, 0, &need);
  std::string out;
  if (st == CLADE_BUFFER_SMALL || (st == CLADE_OK && need == 0)) {
    out.resize(need);
    size_t got = 0;
    st = clade_chat_apply(m, name, msgs, n, add, need ? &out[0] : nullptr, need, &got);
    if (st == CLADE_OK && got != need) {
      std::fprintf(stderr, "clade_chat_apply: %zu bytes, %zu announced\n", got, need);
      check_failures()++;
    }
  }
  if (st_out) *st_out = st;
  else if (st != CLADE_OK) {
    std::fprintf(stderr, "clade_chat_apply(%s): %s: %s\n", name ? name : "(model's)", clade_status_string(st),
                 clade_last_error());
    check_failures()++;
  }
  return out;
}

void check_text(const char* what, const std::string& got, const std::string& want) {
  if (got == want) return;
  std::fprintf(stderr, "%s: got\n[%s]\nwant\n[%s]\n", what, got.c_str(), want.c_str());
  check_failures()++;
}

// A copy of a model file with tokenizer.chat_template set (or removed:
// tmpl NULL).
void write_with_template(const std::string& src, const std::string& dst, const char* tmpl) {
  std::unique_ptr<clade::GGUFFile> f = clade::GGUFFile::open(src);
  clade::GGUFWriter w;
  for (const clade::GGUFKV& kv : f->kvs())
    if (kv.key != "tokenizer.chat_template") w.set_value(kv.key, kv.value);
  if (tmpl) w.set_str("tokenizer.chat_template", tmpl);
  for (const clade::GGUFTensor& t : f->tensors()) {
    std::vector<uint64_t> dims(t.ne, t.ne + t.n_dims);
    w.add_tensor(t.name, t.type, dims, t.data, t.nbytes);
  }
  w.write(dst);
}

clade_model* load(const std::string& path) {
  clade_model_params mp;
  clade_model_params_init(&mp);
  mp.n_threads = 1;
  clade_model* m = nullptr;
  CHECK_OK(clade_model_load(path.c_str(), &mp, &m));
  return m;
}

void test_list() {
  size_t n = clade_chat_template_list(nullptr, 0);
  CHECK(n == 7);
  std::vector<const char*> names(n + 2, nullptr);
  CHECK(clade_chat_template_list(names.data(), 3) == n);
  CHECK(names[3] == nullptr);  // only capacity written
  CHECK(clade_chat_template_list(names.data(), names.size()) == n);
  CHECK(names[n] == nullptr);
  std::vector<Expected> want = expected();
  for (const Expected& e : want) {
    bool found = false;
    for (size_t i = 0; i < n; i++) found |= names[i] && std::strcmp(names[i], e.name) == 0;
    CHECK_MSG(found, "%s is not listed", e.name);
  }
}

// Explicit names, without a model: each family's exact text.
void test_formats() {
  for (const Expected& e : expected()) {
    std::string got = apply(nullptr, e.name, kConv, kConvN, 1);
    check_text(e.name, got, e.text);
    // Without the assistant prompt: the same text less the prompt (Llama 2
    // and Mistral have none).
    std::string no_prompt = apply(nullptr, e.name, kConv, kConvN, 0);
    std::string name = e.name;
    size_t cut = e.text.size();
    if (name == "chatml") cut -= std::strlen("<|im_start|>assistant\n");
    if (name == "llama3") cut -= std::strlen("<|start_header_id|>assistant<|end_header_id|>\n\n");
    if (name == "gemma") cut -= std::strlen("<start_of_turn>model\n");
    if (name == "phi3" || name == "zephyr") cut -= std::strlen("<|assistant|>\n");
    check_text((name + " without the prompt").c_str(), no_prompt, e.text.substr(0, cut));
  }
  // Without a system message, Llama 2, Mistral and Gemma start at the user.
  check_text("llama2 no system", apply(nullptr, "llama2", kConv + 1, 1, 1), "[INST] Hello! [/INST]");
  check_text("mistral no system", apply(nullptr, "mistral", kConv + 1, 3, 1),
             "[INST] Hello![/INST] Hi. How can I help?</s>[INST] Name a colour.[/INST]");
  check_text("gemma no system", apply(nullptr, "gemma", kConv + 1, 1, 1),
             "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n");
  // A lone system message: an empty user message of its own there.
  check_text("llama2 system only", apply(nullptr, "llama2", kConv, 1, 1),
             "[INST] <<SYS>>\nYou are a terse assistant.\n<</SYS>> [/INST]");
  check_text("mistral system only", apply(nullptr, "mistral", kConv, 1, 1),
             "[INST] You are a terse assistant.\n\n[/INST]");
  check_text("gemma system only", apply(nullptr, "gemma", kConv, 1, 0),
             "<start_of_turn>user\nYou are a terse assistant.\n\n<end_of_turn>\n");
  // Trimming where the reference templates trim, not elsewhere.
  const clade_chat_message spaced[] = {{"user", "  Hi there \n"}, {"assistant", " Yes. "}};
  check_text("llama3 trims", apply(nullptr, "llama3", spaced, 2, 0),
             "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\nYes.<|eot_id|>");
  check_text("llama2 trims", apply(nullptr, "llama2", spaced, 2, 0), "[INST] Hi there [/INST] Yes. </s>");
  check_text("mistral trims the assistant", apply(nullptr, "mistral", spaced, 2, 0),
             "[INST]   Hi there \n[/INST] Yes.</s>");
  check_text("chatml keeps", apply(nullptr, "chatml", spaced, 1, 0), "<|im_start|>user\n  Hi there \n<|im_end|>\n");
  // Roles that ChatML and Llama 3 pass through.
  const clade_chat_message tool[] = {{"tool", "42"}};
  check_text("chatml tool", apply(nullptr, "chatml", tool, 1, 0), "<|im_start|>tool\n42<|im_end|>\n");
  check_text("llama3 ipython", apply(nullptr, "llama3", tool, 1, 0),
             "<|start_header_id|>tool<|end_header_id|>\n\n42<|eot_id|>");
  // No messages: the prompt alone, or nothing.
  check_text("chatml empty", apply(nullptr, "chatml", nullptr, 0, 1), "<|im_start|>assistant\n");
  check_text("llama2 empty", apply(nullptr, "llama2", nullptr, 0, 1), "");
}

void test_refused_roles() {
  const clade_chat_message two_users[] = {{"user", "a"}, {"user", "b"}};
  const clade_chat_message late_system[] = {{"user", "a"}, {"assistant", "b"}, {"system", "c"}};
  const clade_chat_message starts_assistant[] = {{"assistant", "a"}};
  const clade_chat_message odd_role[] = {{"user", "a"}, {"tool", "b"}};
  const clade_chat_message empty_role[] = {{"", "a"}};
  size_t n = 0;
  char buf[256];
  for (const char* name : {"llama2", "mistral", "gemma"}) {
    CHECK_ST(clade_chat_apply(nullptr, name, two_users, 2, 1, buf, sizeof buf, &n), CLADE_E_INVALID_ARG);
    CHECK_ST(clade_chat_apply(nullptr, name, late_system, 3, 1, buf, sizeof buf, &n), CLADE_E_INVALID_ARG);
    CHECK(std::strstr(clade_last_error(), "message 2") != nullptr);
    CHECK_ST(clade_chat_apply(nullptr, name, starts_assistant, 1, 1, buf, sizeof buf, &n), CLADE_E_INVALID_ARG);
  }
  for (const char* name : {"llama2", "mistral", "gemma", "phi3", "zephyr"}) {
    CHECK_ST(clade_chat_apply(nullptr, name, odd_role, 2, 1, buf, sizeof buf, &n), CLADE_E_INVALID_ARG);
    CHECK(std::strstr(clade_last_error(), "tool") != nullptr);
  }
  // Phi-3 and Zephyr take the three roles in any order.
  CHECK_OK(clade_chat_apply(nullptr, "phi3", two_users, 2, 1, buf, sizeof buf, &n));
  CHECK_OK(clade_chat_apply(nullptr, "zephyr", late_system, 3, 1, buf, sizeof buf, &n));
  for (const char* name : {"chatml", "llama3"})
    CHECK_ST(clade_chat_apply(nullptr, name, empty_role, 1, 1, buf, sizeof buf, &n), CLADE_E_INVALID_ARG);
}

void test_buffer_and_nulls() {
  const std::string want = expected()[0].text;  // chatml
  size_t n = 12345;
  std::vector<char> buf(want.size() + 8, '#');
  // too small by one: the count needed, nothing written
  CHECK_ST(clade_chat_apply(nullptr, "chatml", kConv, kConvN, 1, buf.data(), want.size() - 1, &n),
           CLADE_BUFFER_SMALL);
  CHECK(n == want.size());
  CHECK(buf[0] == '#');
  // exact fit, and not NUL-terminated
  n = 0;
  CHECK_OK(clade_chat_apply(nullptr, "chatml", kConv, kConvN, 1, buf.data(), want.size(), &n));
  CHECK(n == want.size() && std::string(buf.data(), n) == want && buf[n] == '#');
  // capacity 0, buf NULL: the size only
  n = 0;
  CHECK_ST(clade_chat_apply(nullptr, "chatml", kConv, kConvN, 1, nullptr, 0, &n), CLADE_BUFFER_SMALL);
  CHECK(n == want.size());

  CHECK_ST(clade_chat_apply(nullptr, nullptr, kConv, kConvN, 1, buf.data(), buf.size(), &n), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_chat_apply(nullptr, "chatml", nullptr, 2, 1, buf.data(), buf.size(), &n), CLADE_E_INVALID_ARG);
  CHECK_ST(clade_chat_apply(nullptr, "chatml", kConv, kConvN, 1, buf.data(), buf.size(), nullptr),
           CLADE_E_INVALID_ARG);
  CHECK_ST(clade_chat_apply(nullptr, "chatml", kConv, kConvN, 1, nullptr, buf.size(), &n), CLADE_E_INVALID_ARG);
  const clade_chat_message null_role[] = {{"user", "a"}, {nullptr, "b"}};
  const clade_chat_message null_content[] = {{"user", nullptr}};
  CHECK_ST(clade_chat_apply(nullptr, "chatml", null_role, 2, 1, buf.data(), buf.size(), &n), CLADE_E_INVALID_ARG);
  CHECK(std::strstr(clade_last_error(), "messages[1].role") != nullptr);
  CHECK_ST(clade_chat_apply(nullptr, "chatml", null_content, 1, 1, buf.data(), buf.size(), &n),
           CLADE_E_INVALID_ARG);
  // unknown names
  for (const char* bad : {"vicuna", "", "ChatML", "chatml "}) {
    CHECK_ST(clade_chat_apply(nullptr, bad, kConv, kConvN, 1, buf.data(), buf.size(), &n), CLADE_E_UNSUPPORTED);
  }
  CHECK(std::strstr(clade_last_error(), "chatml ") != nullptr);
  const char* name = "x";
  CHECK_ST(clade_chat_template_name(nullptr, &name), CLADE_E_INVALID_ARG);
  CHECK(name == nullptr);
}

// Models carrying templates: recognition, the model's template applied,
// unknown and missing templates, the BOS rule with the tokenizer.
void test_models(const std::string& dir, const std::string& base) {
  std::vector<Expected> want = expected();
  for (const Sample& s : kSamples) {
    std::string path = dir + "/tmpl-" + s.name + ".gguf";
    write_with_template(base, path, s.tmpl);
    clade_model* m = load(path);
    if (!m) continue;
    const char* name = nullptr;
    CHECK_OK(clade_chat_template_name(m, &name));
    CHECK_MSG(name && std::strcmp(name, s.name) == 0, "template of %s recognized as %s", s.name,
              name ? name : "(none)");
    for (const Expected& e : want)
      if (std::strcmp(e.name, s.name) == 0) check_text(s.name, apply(m, nullptr, kConv, kConvN, 1), e.text);
    // An explicit name wins over the model's template.
    check_text("explicit over the model's", apply(m, "chatml", kConv, kConvN, 1), want[0].text);
    clade_model_free(m);
  }

  // Unknown (Vicuna-style, Phi-4, Mistral v7) and missing templates.
  const char* unknown[] = {
      "{% for m in messages %}{% if m['role'] == 'user' %}{{ 'USER: ' + m['content'] + '\\n' }}"
      "{% else %}{{ 'ASSISTANT: ' + m['content'] + '\\n' }}{% endif %}{% endfor %}",
      "{{ '<|im_start|>' + m['role'] + '<|im_sep|>' + m['content'] + '<|im_end|>' }}",
      "{{ '[SYSTEM_PROMPT]' + s + '[/SYSTEM_PROMPT]' }}{{ '[INST]' + m['content'] + '[/INST]' }}",
      nullptr,
  };
  for (const char* tmpl : unknown) {
    std::string path = dir + "/tmpl-unknown.gguf";
    write_with_template(base, path, tmpl);
    clade_model* m = load(path);
    if (!m) continue;
    const char* name = "x";
    CHECK_ST(clade_chat_template_name(m, &name), CLADE_E_UNSUPPORTED);
    CHECK(name == nullptr);
    CHECK(std::strstr(clade_last_error(), tmpl ? "not one clade recognizes" : "no chat template") != nullptr);
    size_t n = 0;
    char buf[8];
    CHECK_ST(clade_chat_apply(m, nullptr, kConv, kConvN, 1, buf, sizeof buf, &n), CLADE_E_UNSUPPORTED);
    // a name still works
    check_text("name for an unknown template", apply(m, "zephyr", kConv, kConvN, 1), want[6].text);
    clade_model_free(m);
  }

  // The BOS rule, with the model's tokenizer (SentencePiece: <s> = 1,
  // </s> = 2): ADD_SPECIAL adds the one leading BOS; PARSE_SPECIAL turns
  // the <s> and </s> inside the Llama 2 history into BOS and EOS.
  clade_model* m = load(base);
  if (!m) return;
  clade_special_tokens sp;
  sp.size = sizeof sp;
  CHECK_OK(clade_model_special_tokens(m, &sp));
  CHECK(sp.bos == 1 && sp.eos == 2 && sp.add_bos == 1);
  std::string text = apply(m, "llama2", kConv, kConvN, 1);
  CHECK(text == want[2].text);  // the model's BOS/EOS texts are <s> and </s>
  std::vector<clade_token> toks(512);
  size_t nt = 0;
  CHECK_OK(clade_tokenize(m, text.data(), text.size(), CLADE_TOKENIZE_ADD_SPECIAL | CLADE_TOKENIZE_PARSE_SPECIAL,
                          toks.data(), toks.size(), &nt));
  toks.resize(nt);
  int n_bos = 0, n_eos = 0;
  for (clade_token t : toks) n_bos += t == sp.bos, n_eos += t == sp.eos;
  CHECK(!toks.empty() && toks[0] == sp.bos);
  CHECK_MSG(n_bos == 2 && n_eos == 1, "%d BOS, %d EOS", n_bos, n_eos);
  clade_model_free(m);
}

}  // namespace

int main() {
  test_list();
  test_formats();
  test_refused_roles();
  test_buffer_and_nulls();

  const char* vdir = std::getenv("CLADE_VOCAB_DIR");
  std::string vocab = std::string(vdir ? vdir : "tests/data/vocab") + "/ggml-vocab-llama-spm.gguf";
  std::string dir = temp_dir();
  std::string base = dir + "/base.gguf";
  cli::RandomModelSpec spec;
  spec.layers = 1;
  spec.dim = 32;
  spec.heads = 2;
  spec.ff = 32;
  spec.ctx = 64;
  spec.type = "f32";
  spec.vocab_from = vocab;
  try {
    cli::write_random_model(base, spec);
    test_models(dir, base);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot write the test models (%s): %s\n", vocab.c_str(), e.what());
    check_failures()++;
  }
  std::string cmd = "rm -rf '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  return check_exit();
}
