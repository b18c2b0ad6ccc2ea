// libFuzzer harness: the tokenizers (SentencePiece and BPE vocabularies of
// tests/data/vocab) on arbitrary bytes. Valid UTF-8 must tokenize, the
// tokens must detokenize, and the streaming detokenizer must give the same
// bytes as clade_detokenize; with the BPE (byte-level) vocabulary and no
// special tokens, the text must come back exactly. Invalid UTF-8 must be
// CLADE_E_UTF8.
#include <cstdio>
#include <string>
#include <vector>

#include "clade/clade.h"
#include "fuzz_common.h"

static clade_model* vocab(int which) {
  static clade_model* m[2] = {nullptr, nullptr};
  if (!m[which]) {
    clade_model_params mp;
    clade_model_params_init(&mp);
    mp.vocab_only = 1;
    if (clade_model_load(vocab_path(which).c_str(), &mp, &m[which]) != CLADE_OK) {
      std::fprintf(stderr, "cannot load %s: %s\n", vocab_path(which).c_str(), clade_last_error());
      std::abort();
    }
  }
  return m[which];
}

static bool valid_utf8(const uint8_t* s, size_t n) {
  for (size_t i = 0; i < n;) {
    const uint8_t c = s[i];
    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!k || i + k > n) return false;
    uint32_t cp = k == 1 ? c : k == 2 ? (c & 0x1f) : k == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t j = 1; j < k; j++) {
      if ((s[i + j] & 0xc0) != 0x80) return false;
      cp = cp << 6 | (s[i + j] & 0x3f);
    }
    if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += k;
  }
  return true;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Bytes in{data, size};
  const uint8_t mode = in.byte();
  const int which = mode & 1;
  const uint32_t flags = (mode >> 1) & 3u;  // add special, parse special
  const int special = (mode >> 3) & 1;
  clade_model* m = vocab(which);
  const char* text = (const char*)in.p;
  const size_t len = in.n;
  size_t n = 0;
  clade_status st = clade_tokenize(m, text, len, flags, nullptr, 0, &n);
  if (!valid_utf8(in.p, len)) {
    FUZZ_CHECK(st == CLADE_E_UTF8);
    return 0;
  }
  FUZZ_CHECK(st == CLADE_OK || st == CLADE_BUFFER_SMALL);
  std::vector<clade_token> toks(n);
  size_t n2 = 0;
  FUZZ_CHECK(clade_tokenize(m, text, len, flags, toks.data(), toks.size(), &n2) == CLADE_OK && n2 == n);
  size_t bytes = 0;
  st = clade_detokenize(m, toks.data(), n, special, nullptr, 0, &bytes);
  FUZZ_CHECK(st == CLADE_OK || st == CLADE_BUFFER_SMALL);
  std::string back(bytes, '\0');
  FUZZ_CHECK(clade_detokenize(m, toks.data(), n, special, &back[0], back.size(), &bytes) == CLADE_OK &&
             bytes == back.size());
  // The streaming detokenizer gives the same bytes.
  clade_detokenizer* d = nullptr;
  FUZZ_CHECK(clade_detokenizer_create(m, special, 1, &d) == CLADE_OK);
  std::string streamed;
  const char* piece = nullptr;
  size_t plen = 0;
  for (clade_token t : toks) {
    FUZZ_CHECK(clade_detokenizer_push(d, t, &piece, &plen) == CLADE_OK);
    streamed.append(piece, plen);
  }
  FUZZ_CHECK(clade_detokenizer_flush(d, &piece, &plen) == CLADE_OK);
  streamed.append(piece, plen);
  clade_detokenizer_free(d);
  FUZZ_CHECK(streamed == back);
  // Byte-level BPE, no special tokens added or parsed: the exact text.
  if (which == 1 && flags == 0) FUZZ_CHECK(back == std::string(text, len));
  return 0;
}
