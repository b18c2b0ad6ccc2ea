// How the caller-sized structs of the C API grow (the rule is stated for
// callers in clade.h's Conventions). This is the one place that records each
// struct's first published size, the size it had in clade 1.0; every entry
// point of lib/api/ reads and writes those structs through the helpers
// below.
//
// - In-structs (parameters): a size below the 1.0 size is
//   CLADE_E_INVALID_ARG. The fields the caller's size covers are copied over
//   the defaults (what the struct's *_init sets); the rest keep their
//   defaults. Bytes past the struct this library knows must be zero, else
//   CLADE_E_UNSUPPORTED: the caller asks for a field of a newer clade.
// - Out-structs (descriptions): a size below the 1.0 size is
//   CLADE_E_INVALID_ARG; the library fills a whole struct of its own and
//   copies min(caller's size, its size) bytes back, keeping the caller's
//   size field. Bytes past that are left as the caller had them.
//
// Adding a field to one of these structs, later:
// - add it at the end, starting at or past the struct's previous sizeof
//   (never in its tail padding: an older caller's padding bytes are copied
//   in as they are), with a default that keeps the old behaviour;
// - its *_init gets a new symbol version (clade.map) that fills the new
//   size, while the old version, which binaries built against the older
//   header are bound to, keeps filling exactly the older size
//   (init_prefix below), so their smaller struct is never overrun;
// - nothing changes here: the 1.0 sizes below stay as they are.
// tests/abi/ builds such a grown library and runs a 1.0 caller against it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "clade/clade.h"
#include "base/error.h"

namespace clade {
namespace abi {

constexpr size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Abi<T>: name, and first_size: the struct's size in clade 1.0.
template <typename T>
struct Abi;

// One line per struct: its last field in 1.0 and its 1.0 size on 64-bit
// targets (LP64 and LLP64), as a literal that never follows later edits.
// On 64-bit targets the literal must still be where the 1.0 fields end (a
// compile-time check that no 1.0 field moved or changed size); on 32-bit
// targets, whose sizes differ, that end is the first size.
#define CLADE_ABI_STRUCT(T, last_field, size64)                                                   \
  template <>                                                                                    \
  struct Abi<T> {                                                                                \
    static constexpr const char* name = #T;                                                      \
    static constexpr size_t end_1_0 =                                                            \
        round_up(offsetof(T, last_field) + sizeof(T::last_field), alignof(T));                   \
    static constexpr size_t first_size = sizeof(void*) == 8 ? size_t(size64) : end_1_0;          \
  };                                                                                             \
  static_assert(sizeof(void*) != 8 || Abi<T>::end_1_0 == (size64),                               \
                #T ": a field of clade 1.0 moved or changed size");                              \
  static_assert(Abi<T>::first_size <= sizeof(T), #T ": smaller than in clade 1.0");             \
  static_assert(offsetof(T, size) == 0 && sizeof(T::size) == sizeof(size_t), #T ": size first")

CLADE_ABI_STRUCT(clade_model_params, use_mmap, 24);
CLADE_ABI_STRUCT(clade_model_info, weight_bytes, 216);
CLADE_ABI_STRUCT(clade_special_tokens, add_eos, 40);
CLADE_ABI_STRUCT(clade_tree_params, kv_budget, 32);
CLADE_ABI_STRUCT(clade_node_info, n_refs, 32);
CLADE_ABI_STRUCT(clade_cache_params, attention, 24);
CLADE_ABI_STRUCT(clade_batch, logits_rows, 64);
CLADE_ABI_STRUCT(clade_sampler_params, n_threads, 72);
CLADE_ABI_STRUCT(clade_sample_result, logprob, 48);
CLADE_ABI_STRUCT(clade_append_item, seq, 56);
CLADE_ABI_STRUCT(clade_generate_params, first_stream, 104);
// Added in clade 1.1 (first_size: their size in 1.1).
CLADE_ABI_STRUCT(clade_speculative_params, adaptive, 48);
CLADE_ABI_STRUCT(clade_generation_stats, draft_seconds, 72);
// Added in clade 1.5.
CLADE_ABI_STRUCT(clade_grammar_params, jump_forward, 24);
#ifdef CLADE_EXPERIMENTAL
// Experimental (outside the ABI promise), but grown by the same rule.
CLADE_ABI_STRUCT(clade_cache_stats, last_flat, 48);
CLADE_ABI_STRUCT(clade_tree_stats, flat_spans, 48);
CLADE_ABI_STRUCT(clade_device_peaks, f16_flop_per_s, 152);
#endif

#undef CLADE_ABI_STRUCT

// The caller's size, checked against the 1.0 size (CLADE_E_INVALID_ARG).
template <typename T>
size_t checked_size(const T* p) {
  using A = Abi<T>;
  if (!p) fail(CLADE_E_INVALID_ARG, std::string(A::name) + " pointer is NULL");
  size_t n = p->size;
  if (n < A::first_size)
    fail(CLADE_E_INVALID_ARG, std::string(A::name) + ".size is " + std::to_string(n) + ", below " +
                                  std::to_string(A::first_size) + ", its size in clade 1.0 (call " + A::name +
                                  "_init, or set size = sizeof(" + A::name + "))");
  return n;
}

// In-struct: *out holds the defaults (from the struct's *_init); the fields
// the caller's size covers are copied over them. out->size becomes
// sizeof(T).
template <typename T>
void read_in(const T* in, T* out) {
  using A = Abi<T>;
  size_t n = checked_size(in);
  if (n > sizeof(T)) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(in);
    for (size_t i = sizeof(T); i < n; i++)
      if (b[i])
        fail(CLADE_E_UNSUPPORTED, std::string(A::name) + " has a nonzero byte at offset " + std::to_string(i) +
                                      ", past the " + std::to_string(sizeof(T)) + " bytes clade " +
                                      CLADE_VERSION_STRING + " knows (the caller's size is " + std::to_string(n) +
                                      "): a field of a newer clade that this library does not support");
  }
  std::memcpy(out, in, n < sizeof(T) ? n : sizeof(T));
  out->size = sizeof(T);
}

// Out-struct: the caller's size is checked before anything is computed.
template <typename T>
void check_out(const T* out) {
  checked_size(out);
}

// Out-struct: copy the library's whole struct `full` back, as far as the
// caller's size reaches; the caller's size field stays.
template <typename T>
void write_out(T* out, const T& full) {
  size_t n = checked_size(out);
  std::memcpy(out, &full, n < sizeof(T) ? n : sizeof(T));
  out->size = n;
}

// What an *_init of an older symbol version does: the defaults of the
// current struct, cut to the older size `n` (size field = n). init is the
// struct's current *_init.
template <typename T>
void init_prefix(T* p, size_t n, void (*init)(T*)) {
  if (!p) return;
  T full;
  init(&full);
  if (n > sizeof(T)) n = sizeof(T);
  std::memcpy(p, &full, n);
  p->size = n;
}

}  // namespace abi
}  // namespace clade
