// The C boundary's shared insides (lib/api/): what each handle holds, the
// deferred freeing of models and trees, and the helpers every entry point
// uses (guard, CLADE_CHECK_ARG, copy_out, ...). The entry points themselves
// are in one file per handle: api_common.cpp, model.cpp, detokenizer.cpp,
// tree.cpp, cache.cpp, sampler.cpp and generate.cpp.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#define CLADE_EXPERIMENTAL  // the library defines the experimental calls too
#include "clade/clade.h"
#include "api/abi.h"
#include "base/error.h"
#include "engine/model.h"
#include "gen/generate.h"
#include "gen/sampler.h"
#include "kv/cache.h"
#include "kv/tree.h"
#include "text/tokenizer.h"

// Freeing is deferred (sqlite's close_v2): a model counts its handle and
// every tree and detokenizer made from it, a tree its handle and every
// cache; the last of them to go frees it. So handles may be freed in any
// order and nothing dangles.
struct clade_model {
  std::unique_ptr<clade::Model> m;
  mutable std::atomic<int> refs{1};
};
struct clade_tree {
  std::unique_ptr<clade::Tree> t;
  clade_model* model = nullptr;
  std::atomic<int> refs{1};
};
struct clade_cache {
  std::unique_ptr<clade::Cache> c;
  clade_tree* tree = nullptr;
};
struct clade_sampler {
  std::unique_ptr<clade::Sampler> s;
};
struct clade_generation {
  clade::Generation g;
};
struct clade_detokenizer {
  std::unique_ptr<clade::DetokenizeStream> d;
  std::string out;
  const clade_model* model = nullptr;
};

namespace clade {
namespace api {

inline void unref_model(const clade_model* model) {
  if (model->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete model;
}

inline void unref_tree(clade_tree* tree) {
  if (tree->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  clade_model* model = tree->model;
  delete tree;
  unref_model(model);
}

// CLADE_BUFFER_SMALL with what was needed.
inline clade_status small(size_t need, size_t capacity, const char* what) {
  return clade::with_message(CLADE_BUFFER_SMALL, "buffer too small: " + std::to_string(need) + " " + what +
                                                     " to write, room for " + std::to_string(capacity));
}


template <typename F>
clade_status guard(F&& f) {
  try {
    clade::last_error_text().clear();
    return f();
  } catch (const clade::Error& e) {
    return clade::with_message(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return clade::with_message(CLADE_E_NOMEM, "out of memory");
  } catch (const std::exception& e) {
    return clade::with_message(CLADE_E_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return clade::with_message(CLADE_E_INTERNAL, "internal error");
  }
}

#define CLADE_CHECK_ARG(cond, msg) \
  do {                             \
    if (!(cond)) return clade::with_message(CLADE_E_INVALID_ARG, msg); \
  } while (0)

// Caller-sized structs: read and written through lib/api/abi.h (clade::abi),
// which knows each one's size in clade 1.0.

// A C caller may store any int in an enum field; reading it as the C++ enum
// would be undefined, so read the int.
template <typename E>
int enum_value(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized here");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

inline void copy_cstr(char* dst, size_t cap, const std::string& s) {
  size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = 0;
}

inline clade_status copy_out(const std::string& s, char* buf, size_t cap, size_t* n_bytes) {
  CLADE_CHECK_ARG(n_bytes, "n_bytes is NULL");
  *n_bytes = s.size();
  if (s.size() > cap) return small(s.size(), cap, "bytes");
  CLADE_CHECK_ARG(buf || s.empty(), "buf is NULL");
  if (!s.empty()) std::memcpy(buf, s.data(), s.size());
  return CLADE_OK;
}

inline const clade::Tokenizer* tokenizer_of(const clade_model* model) {
  if (!model) clade::fail(CLADE_E_INVALID_ARG, "model is NULL");
  if (!model->m->tokenizer) clade::fail(CLADE_E_UNSUPPORTED, "the model has no tokenizer metadata");
  return model->m->tokenizer.get();
}

inline bool kv_type_ok(const clade_kv_type& t) {
  int v = enum_value(t);
  return v == CLADE_KV_F32 || v == CLADE_KV_F16 || v == CLADE_KV_BF16;
}

// "" when every field is in range, else the first one out of it, by name
// and range (sampler.cpp; the generation calls check their sampler's too).
std::string sampler_params_bad(const clade_sampler_params& p);

}  // namespace api
}  // namespace clade

// A grown struct has its *_init twice (lib/api/abi.h): binaries built against
// an older header are bound to T_init@old_node, which fills exactly the
// struct's size of that release (Abi<T>::first_size); the default,
// T_init@@new_node (the release that grew it), fills the whole struct.
// Built with CLADE_NO_SYMBOL_VERSIONS it is the plain function: in the ABI
// test's "future" library, which versions every *_init itself
// (tests/abi/future_compat.cpp), and in the fuzz harnesses, linked
// statically without the version script (tests/fuzz).
#ifndef CLADE_NO_SYMBOL_VERSIONS
#define CLADE_GROWN_INIT(T, defaults, old_node, new_node)                  \
  extern "C" CLADE_API void T##_init_old(T* p) {                           \
    clade::abi::init_prefix(p, clade::abi::Abi<T>::first_size, &defaults); \
  }                                                                        \
  extern "C" CLADE_API void T##_init_new(T* p) { defaults(p); }            \
  __asm__(".symver " #T "_init_old, " #T "_init@" old_node                 \
          "\n\t"                                                           \
          ".symver " #T "_init_new, " #T "_init@@" new_node);
#else
#define CLADE_GROWN_INIT(T, defaults, old_node, new_node) \
  void T##_init(T* p) { defaults(p); }
#endif
// A struct grown twice has its *_init three times: old_node fills the 1.0
// size, mid_node mid_size (the struct's size in the release that grew it
// first), new_node the whole struct.
#ifndef CLADE_NO_SYMBOL_VERSIONS
#define CLADE_GROWN_INIT2(T, defaults, old_node, mid_size, mid_node, new_node) \
  extern "C" CLADE_API void T##_init_old(T* p) {                             \
    clade::abi::init_prefix(p, clade::abi::Abi<T>::first_size, &defaults);   \
  }                                                                          \
  extern "C" CLADE_API void T##_init_mid(T* p) {                             \
    clade::abi::init_prefix(p, mid_size, &defaults);                         \
  }                                                                          \
  extern "C" CLADE_API void T##_init_new(T* p) { defaults(p); }              \
  __asm__(".symver " #T "_init_old, " #T "_init@" old_node                   \
          "\n\t"                                                             \
          ".symver " #T "_init_mid, " #T "_init@" mid_node                   \
          "\n\t"                                                             \
          ".symver " #T "_init_new, " #T "_init@@" new_node);
#else
#define CLADE_GROWN_INIT2(T, defaults, old_node, mid_size, mid_node, new_node) \
  void T##_init(T* p) { defaults(p); }
#endif
