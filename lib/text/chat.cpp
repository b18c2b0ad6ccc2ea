// Chat templates (chat.h). Each family's format follows its reference
// template; the header's clade_chat_apply lists them with their sources.
#include "text/chat.h"

#include "base/error.h"

namespace clade {

namespace {

const char* const kNames[] = {"llama2", "llama3", "chatml", "mistral", "gemma", "phi3", "zephyr"};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == size_t(ChatFamily::Count), "one name per family");

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Python's str.strip() / Jinja's trim, for ASCII whitespace.
std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string str(std::string_view s) { return std::string(s); }

[[noreturn]] void bad_roles(ChatFamily f, const std::string& what) {
  fail(CLADE_E_INVALID_ARG, std::string("chat template ") + chat_family_name(f) + ": " + what);
}

// Families whose roles are system, user and assistant only.
void check_fixed_roles(ChatFamily f, const ChatMessage* m, size_t n) {
  for (size_t i = 0; i < n; i++) {
    std::string_view r = m[i].role;
    if (r != "system" && r != "user" && r != "assistant")
      bad_roles(f, "message " + std::to_string(i) + " has role '" + str(r) +
                       "'; this family takes system, user and assistant");
  }
}

// Families whose templates take an optional system message first, then
// user and assistant alternating from user (Llama 2, Mistral, Gemma): the
// index of the first message after the system one.
size_t check_alternating(ChatFamily f, const ChatMessage* m, size_t n) {
  check_fixed_roles(f, m, n);
  size_t first = (n > 0 && m[0].role == "system") ? 1 : 0;
  for (size_t i = first; i < n; i++) {
    if (m[i].role == "system")
      bad_roles(f, "message " + std::to_string(i) + " is a system message; this family takes one only as the first");
    const char* want = (i - first) % 2 == 0 ? "user" : "assistant";
    if (m[i].role != want)
      bad_roles(f, "message " + std::to_string(i) + " has role '" + str(m[i].role) + "' where '" + want +
                       "' is due: after the optional system message, roles alternate user, assistant, ...");
  }
  return first;
}

}  // namespace

const char* chat_family_name(ChatFamily f) {
  int i = int(f);
  if (i < 0 || i >= int(ChatFamily::Count)) return nullptr;
  return kNames[i];
}

ChatFamily chat_family_from_name(std::string_view name) {
  for (int i = 0; i < int(ChatFamily::Count); i++)
    if (name == kNames[i]) return ChatFamily(i);
  return ChatFamily::Unknown;
}

ChatFamily chat_detect(std::string_view t) {
  // A template text that is just a family's name (as llama.cpp accepts).
  ChatFamily named = chat_family_from_name(trim(t));
  if (named != ChatFamily::Unknown) return named;
  if (contains(t, "<|im_start|>")) {
    // Phi-4 writes ChatML's markers with <|im_sep|> after the role: another
    // format, not recognized.
    return contains(t, "<|im_sep|>") ? ChatFamily::Unknown : ChatFamily::ChatML;
  }
  if (contains(t, "[INST]")) {
    // Llama 2's system block; Mistral's templates have none. Mistral's v7
    // format ([SYSTEM_PROMPT]) is another format, not recognized.
    if (contains(t, "<<SYS>>")) return ChatFamily::Llama2;
    return contains(t, "[SYSTEM_PROMPT]") ? ChatFamily::Unknown : ChatFamily::Mistral;
  }
  if (contains(t, "<|start_header_id|>") && contains(t, "<|end_header_id|>")) return ChatFamily::Llama3;
  if (contains(t, "<start_of_turn>")) return ChatFamily::Gemma;
  if (contains(t, "<|assistant|>") && contains(t, "<|end|>")) return ChatFamily::Phi3;
  if (contains(t, "<|user|>") && contains(t, "<|assistant|>")) return ChatFamily::Zephyr;
  return ChatFamily::Unknown;
}

std::string chat_format(ChatFamily f, const ChatMessage* m, size_t n, bool add_assistant_prompt,
                        const ChatTokens& tokens) {
  const std::string bos = tokens.bos.empty() ? "<s>" : tokens.bos;
  const std::string eos = tokens.eos.empty() ? "</s>" : tokens.eos;
  std::string out;
  switch (f) {
    case ChatFamily::ChatML:
      for (size_t i = 0; i < n; i++) {
        if (m[i].role.empty()) bad_roles(f, "message " + std::to_string(i) + " has an empty role");
        out += "<|im_start|>";
        out += m[i].role;
        out += "\n";
        out += m[i].content;
        out += "<|im_end|>\n";
      }
      if (add_assistant_prompt) out += "<|im_start|>assistant\n";
      return out;

    case ChatFamily::Llama3:
      for (size_t i = 0; i < n; i++) {
        if (m[i].role.empty()) bad_roles(f, "message " + std::to_string(i) + " has an empty role");
        out += "<|start_header_id|>";
        out += m[i].role;
        out += "<|end_header_id|>\n\n";
        out += trim(m[i].content);
        out += "<|eot_id|>";
      }
      if (add_assistant_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;

    case ChatFamily::Llama2: {
      size_t first = check_alternating(f, m, n);
      bool has_sys = first == 1;
      // A lone system message still reaches the model: as the system block
      // of an empty first user message.
      size_t end = (has_sys && n == 1) ? 2 : n;
      for (size_t i = first; i < end; i++) {
        std::string_view content = i < n ? m[i].content : std::string_view();
        bool user = i >= n || m[i].role == "user";
        if (user) {
          std::string c;
          if (i == first && has_sys) c = "<<SYS>>\n" + str(m[0].content) + "\n<</SYS>>\n\n";
          c += content;
          if (i != first) out += bos;  // the first BOS is the tokenizer's
          out += "[INST] ";
          out += trim(c);
          out += " [/INST]";
        } else {
          out += " ";
          out += trim(content);
          out += " ";
          out += eos;
        }
      }
      return out;  // no assistant opening: the reply follows [/INST]
    }

    case ChatFamily::Mistral: {
      size_t first = check_alternating(f, m, n);
      bool has_sys = first == 1;
      // The system message goes with the last user message (mistral-common's
      // rule); alone, it makes a user message of its own.
      size_t last_user = n;
      for (size_t i = first; i < n; i++)
        if (m[i].role == "user") last_user = i;
      size_t end = n;
      if (has_sys && n == 1) last_user = 1, end = 2;
      for (size_t i = first; i < end; i++) {
        std::string_view content = i < n ? m[i].content : std::string_view();
        bool user = i >= n || m[i].role == "user";
        if (user) {
          out += "[INST] ";
          if (has_sys && i == last_user) {
            out += m[0].content;
            out += "\n\n";
          }
          out += content;
          out += "[/INST]";
        } else {
          out += " ";
          out += trim(content);
          out += eos;
        }
      }
      return out;  // no assistant opening: the reply follows [/INST]
    }

    case ChatFamily::Gemma: {
      size_t first = check_alternating(f, m, n);
      bool has_sys = first == 1;
      size_t end = (has_sys && n == 1) ? 2 : n;
      for (size_t i = first; i < end; i++) {
        std::string_view content = i < n ? m[i].content : std::string_view();
        bool user = i >= n || m[i].role == "user";
        out += user ? "<start_of_turn>user\n" : "<start_of_turn>model\n";
        if (i == first && has_sys) {
          out += m[0].content;
          out += "\n\n";
        }
        out += trim(content);
        out += "<end_of_turn>\n";
      }
      if (add_assistant_prompt) out += "<start_of_turn>model\n";
      return out;
    }

    case ChatFamily::Phi3:
      check_fixed_roles(f, m, n);
      for (size_t i = 0; i < n; i++) {
        out += "<|";
        out += m[i].role;
        out += "|>\n";
        out += m[i].content;
        out += "<|end|>\n";
      }
      if (add_assistant_prompt) out += "<|assistant|>\n";
      return out;

    case ChatFamily::Zephyr:
      check_fixed_roles(f, m, n);
      for (size_t i = 0; i < n; i++) {
        out += "<|";
        out += m[i].role;
        out += "|>\n";
        out += m[i].content;
        out += eos;
        out += "\n";
      }
      if (add_assistant_prompt) out += "<|assistant|>\n";
      return out;

    default:
      break;
  }
  fail(CLADE_E_INTERNAL, "chat_format: unknown family");
}

}  // namespace clade
