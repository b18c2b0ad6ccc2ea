// Linked into the ABI test's "future" library only (tests/abi/meson.build):
// what a 1.x release that grows the structs ships for their *_init
// functions. Binaries built against clade 1.0 are bound to the CLADE_1
// version of each *_init; here that version fills exactly the 1.0 size (the
// grown struct's defaults, cut), so it never writes past an old caller's
// struct. The default version, CLADE_FUTURE, fills the grown struct, for
// callers built against the grown header.
//
// This library is compiled with -Dclade_X_init=clade_X_init_current for
// each *_init, so lib/api/'s definitions come out under that name and
// both exported versions are defined here (glibc's way: every definition
// of a versioned name carries its version explicitly).
#define CLADE_EXPERIMENTAL
#include "clade/clade.h"

#include "api/abi.h"

// `init` expands to the library's clade_X_init_current; #init and init##
// keep the public name.
// The versions are given with the assembler's .symver directive, which GCC
// and clang both pass through (clang 14 has no symver attribute).
// node: the version node of the struct's first release.
#define CLADE_INIT_VERSIONS_IN(T, init, node)                               \
  extern "C" CLADE_API void init##_1_0(T* p) {                              \
    clade::abi::init_prefix(p, clade::abi::Abi<T>::first_size, &init);      \
  }                                                                         \
  extern "C" CLADE_API void init##_future(T* p) { init(p); }                \
  __asm__(".symver " #init "_1_0, " #init "@" node "\n\t"                   \
          ".symver " #init "_future, " #init "@@CLADE_FUTURE");
// (spelled out, not through CLADE_INIT_VERSIONS_IN: a nested macro would
// expand init, renamed by -D, before #init)
#define CLADE_INIT_VERSIONS(T, init)                                        \
  extern "C" CLADE_API void init##_1_0(T* p) {                              \
    clade::abi::init_prefix(p, clade::abi::Abi<T>::first_size, &init);      \
  }                                                                         \
  extern "C" CLADE_API void init##_future(T* p) { init(p); }                \
  __asm__(".symver " #init "_1_0, " #init "@CLADE_1\n\t"                    \
          ".symver " #init "_future, " #init "@@CLADE_FUTURE");

CLADE_INIT_VERSIONS(clade_model_params, clade_model_params_init)
CLADE_INIT_VERSIONS(clade_tree_params, clade_tree_params_init)
CLADE_INIT_VERSIONS(clade_cache_params, clade_cache_params_init)
CLADE_INIT_VERSIONS(clade_batch, clade_batch_init)
CLADE_INIT_VERSIONS(clade_sampler_params, clade_sampler_params_init)
CLADE_INIT_VERSIONS(clade_append_item, clade_append_item_init)
CLADE_INIT_VERSIONS(clade_generate_params, clade_generate_params_init)
CLADE_INIT_VERSIONS_IN(clade_speculative_params, clade_speculative_params_init, "CLADE_1.1")
CLADE_INIT_VERSIONS_IN(clade_grammar_params, clade_grammar_params_init, "CLADE_1.5")
