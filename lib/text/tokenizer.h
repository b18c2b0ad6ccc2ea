// Tokenizers read from GGUF metadata (tokenizer.ggml.*):
// SentencePiece-style BPE ("llama") and byte-level BPE ("gpt2").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/gguf.h"

namespace clade {

class Tokenizer {
 public:
  // Build from a file's metadata. Returns nullptr when the file has no
  // tokenizer.ggml.model key. Throws Error(CLADE_E_FORMAT) for malformed
  // metadata and Error(CLADE_E_UNSUPPORTED) for an unknown model or
  // pre-tokenizer name.
  static std::unique_ptr<Tokenizer> from_gguf(const GGUFFile& file);
  virtual ~Tokenizer() = default;

  virtual int32_t n_vocab() const = 0;

  // Encode text (must be valid UTF-8, else Error(CLADE_E_UTF8) naming the
  // byte offset). add_special: BOS/EOS as the metadata's add flags say.
  // parse_special: control, user-defined and unknown token texts in the
  // input are matched as those tokens (at character boundaries; a token whose
  // text is empty or not valid UTF-8 is never matched); otherwise they are
  // encoded as plain text.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;

  // Bytes of one token as it appears in the middle of a decoded text.
  // special: control tokens render as their text, else as nothing.
  // Throws Error(CLADE_E_TOKEN) for an id outside the vocabulary.
  virtual std::string token_to_piece(int32_t id, bool special) const = 0;

  // Decode a whole sequence (SPM: the leading space the encoder added is
  // removed from the first token).
  virtual std::string decode(const int32_t* ids, size_t n, bool special) const = 0;

  int32_t bos = -1, eos = -1, eot = -1, pad = -1, unk = -1;
  bool add_bos = false, add_eos = false;
  // SPM: the encoder puts a space before the text (and after a special
  // token matched in it); decode and DetokenizeStream remove it again.
  bool add_space_prefix = false;
  virtual bool is_eog(int32_t id) const = 0;

  // GGUF token type of an id: 1 normal, 2 unknown, 3 control,
  // 4 user-defined, 5 unused, 6 byte. Throws Error(CLADE_E_TOKEN).
  virtual int token_type(int32_t id) const = 0;
  // The vocabulary's raw text of a token (as stored in the file).
  // Throws Error(CLADE_E_TOKEN).
  virtual const std::string& token_text(int32_t id) const = 0;
};

// Incremental detokenizer for streaming: feed tokens one at a time, get the
// bytes that are complete. Never emits part of a UTF-8 character; the SPM
// leading space is removed only at the very start of the stream (so a
// continuation after a prompt keeps its space when first_in_text is false).
class DetokenizeStream {
 public:
  DetokenizeStream(const Tokenizer& tok, bool special, bool first_in_text);
  std::string push(int32_t id);  // complete bytes so far
  std::string flush();           // whatever is left (may be partial UTF-8)

 private:
  const Tokenizer& tok_;
  bool special_;
  bool at_start_;
  std::string pending_;
};

}  // namespace clade
