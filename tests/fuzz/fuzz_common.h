// Shared by the libFuzzer harnesses of tests/fuzz/ (and their replay
// driver): a bounded byte reader and the vocabulary files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

// A failed property: the condition and the library's last message, then
// abort (libFuzzer keeps the input).
#define FUZZ_CHECK(c)                                                      \
  do {                                                                     \
    if (!(c)) {                                                            \
      std::fprintf(stderr, "check failed: %s (%s)\n", #c, clade_last_error()); \
      std::abort();                                                        \
    }                                                                      \
  } while (0)

// Takes values off the front of the input; past its end, zeros.
struct Bytes {
  const uint8_t* p;
  size_t n;
  template <typename T>
  T take() {
    T v{};
    const size_t k = n < sizeof v ? n : sizeof v;
    std::memcpy(&v, p, k);
    p += k;
    n -= k;
    return v;
  }
  uint8_t byte() { return take<uint8_t>(); }
};

// A vocabulary GGUF of tests/data/vocab (CLADE_VOCAB_DIR overrides the
// folder): 0 the llama SentencePiece one, 1 the llama 3 BPE one.
inline std::string vocab_path(int which) {
  const char* dir = std::getenv("CLADE_VOCAB_DIR");
  std::string d = dir ? dir : CLADE_DEFAULT_VOCAB_DIR;
  return d + (which == 0 ? "/ggml-vocab-llama-spm.gguf" : "/ggml-vocab-llama-bpe.gguf");
}
