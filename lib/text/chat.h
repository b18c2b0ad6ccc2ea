// Chat templates: a list of (role, content) messages formatted as one of the
// prompt formats of the model families people run, the family recognized
// from the model's Jinja template text (GGUF tokenizer.chat_template) by
// distinctive substrings. No Jinja is evaluated: each family's format is
// written out here, following the family's reference template.
//
// The formatted text never begins with BOS: clade_tokenize with
// CLADE_TOKENIZE_ADD_SPECIAL adds it as the model asks, and
// CLADE_TOKENIZE_PARSE_SPECIAL turns the markers in the text (<|im_start|>,
// </s>, ...) into their tokens. The header (clade_chat_apply) documents the
// roles and the exact format of each family.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace clade {

enum class ChatFamily {
  Unknown = -1,
  Llama2 = 0,
  Llama3,
  ChatML,
  Mistral,
  Gemma,
  Phi3,
  Zephyr,
  Count
};

struct ChatMessage {
  std::string_view role;
  std::string_view content;
};

// The family's name ("llama2", "chatml", ...); nullptr for Unknown.
const char* chat_family_name(ChatFamily f);
// The family of a name given by the caller (exact, lower case); Unknown if
// none.
ChatFamily chat_family_from_name(std::string_view name);
// The family a template text belongs to, by its distinctive substrings (or
// the text being a family's name); Unknown if none matches.
ChatFamily chat_detect(std::string_view tmpl);

// Texts a family's template takes from the tokenizer (bos_token and
// eos_token): Llama 2 puts BOS inside the history and Llama 2, Mistral and
// Zephyr end messages with EOS. Empty: the family's usual "<s>" / "</s>".
struct ChatTokens {
  std::string bos, eos;
};

// Format messages[0..n) in family f (not Unknown). add_assistant_prompt:
// end with the opening of an assistant message, where the family has one.
// Throws Error(CLADE_E_INVALID_ARG) for a role the family does not take or
// an order of roles its template refuses.
std::string chat_format(ChatFamily f, const ChatMessage* messages, size_t n, bool add_assistant_prompt,
                        const ChatTokens& tokens = ChatTokens());

}  // namespace clade
