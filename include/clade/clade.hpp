// clade.hpp: the header-only C++ (17 or later) layer over clade's C API.
// Move-only owning handles (Model, Tree, Cache, Sampler, Detokenizer,
// Generation) that free themselves; parameter structs derived from the C
// structs, filled by their *_init on construction; views (View<T>,
// std::string_view, std::span in C++20) in and out. Every fallible call
// returns clade::Result<T>: T, throwing clade::Error (a std::runtime_error
// with the clade_status and clade_last_error's message), or where
// exceptions are off (-fno-exceptions, or CLADE_HPP_NO_EXCEPTIONS defined)
// a clade::expected<T> (std::expected<T, Error> in C++23).
// TokenStream (Tree::stream), an input range over generated tokens, is
// built on the step API (clade_tree_append_batch, clade_decode,
// clade_sample_ex), not on clade_generate's callback: pulled lazily on the
// caller's thread (no thread, queue or lock; the tree is never used from two
// threads), a loop left early just frees its cache, and it works the same
// without exceptions. It draws clade_generate's tokens; stop strings need
// Tree::generate.
#ifndef CLADE_CLADE_HPP
#define CLADE_CLADE_HPP

#include <clade/clade.h>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <type_traits>
#include <utility>
#include <vector>
#if __has_include(<version>)
#include <version>
#endif
#if defined(__cpp_lib_span)
#include <span>
#endif
#if defined(__cpp_lib_expected) && __cpp_lib_expected >= 202202L
#include <expected>
#define CLADE_HPP_STD_EXPECTED 1
#endif
#if defined(__cpp_exceptions) && !defined(CLADE_HPP_NO_EXCEPTIONS)
#define CLADE_HPP_EXCEPTIONS 1
#endif
// try/catch around a C++ callback called from C: nothing may unwind through C.
#if defined(__cpp_exceptions)
#define CLADE_HPP_TRY try {
#define CLADE_HPP_CATCH(...) } catch (...) { __VA_ARGS__ }
#else
#define CLADE_HPP_TRY {
#define CLADE_HPP_CATCH(...) }
#endif

namespace clade {
using Token = clade_token;
using NodeId = clade_node_id;
using SeqId = clade_seq_id;
// ---- errors ------------------------------------------------------------
// A failed call: its status and message ("<status name>: <clade_last_error>").
class Error : public std::runtime_error {
 public:
  Error(clade_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  // The message of clade_last_error() on this thread, read now.
  explicit Error(clade_status status) : Error(status, describe(status)) {}
  clade_status status() const noexcept { return status_; }
  // CLADE_CACHE_FULL, CLADE_STOPPED, ...: a state; the handle stays usable.
  bool recoverable() const noexcept { return status_ > 0; }
 private:
  static std::string describe(clade_status s) {
    std::string m = clade_status_string(s);
    const char* last = clade_last_error();
    if (last && *last) m.append(": ").append(last);
    return m;
  }
  clade_status status_;
};
namespace detail {
[[noreturn]] inline void bad_access(const Error& e) {
#if defined(CLADE_HPP_EXCEPTIONS)
  throw e;
#else
  std::fprintf(stderr, "clade: the value of an error result: %s\n", e.what());
  std::abort();
#endif
}
}  // namespace detail
#if defined(CLADE_HPP_STD_EXPECTED)
template <class T>
using expected = std::expected<T, Error>;
using unexpected = std::unexpected<Error>;
#else
// The error side of an expected<T>.
class unexpected {
 public:
  explicit unexpected(Error e) : e_(std::move(e)) {}
  const Error& error() const& noexcept { return e_; }
  Error&& error() && noexcept { return std::move(e_); }
 private:
  Error e_;
};
// A value or an Error: std::expected<T, Error>'s common part.
template <class T>
class expected {
 public:
  using value_type = T;
  template <class U = T, class = std::enable_if_t<std::is_convertible<U&&, T>::value>>
  expected(U&& v) : v_(std::in_place_index<0>, std::forward<U>(v)) {}
  expected(unexpected u) : v_(std::in_place_index<1>, std::move(u).error()) {}
  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }
  T& value() & { return check(), *std::get_if<0>(&v_); }
  const T& value() const& { return check(), *std::get_if<0>(&v_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const& { return *std::get_if<1>(&v_); }
 private:
  void check() const { has_value() ? void() : detail::bad_access(*std::get_if<1>(&v_)); }
  std::variant<T, Error> v_;
};
template <>
class expected<void> {
 public:
  using value_type = void;
  expected() = default;
  expected(unexpected u) : e_(std::move(u).error()) {}
  bool has_value() const noexcept { return !e_.has_value(); }
  explicit operator bool() const noexcept { return has_value(); }
  void value() const { e_ ? detail::bad_access(*e_) : void(); }
  const Error& error() const& { return *e_; }
 private:
  std::optional<Error> e_;
};
#endif
#if defined(CLADE_HPP_EXCEPTIONS)
template <class T>
using Result = T;
#define CLADE_HPP_FAIL(err) throw err
#else
template <class T>
using Result = expected<T>;
#define CLADE_HPP_FAIL(err) return ::clade::unexpected(err)
#endif
// Return (or throw) the status of a C call that did not give CLADE_OK.
#define CLADE_HPP_CHECK(call) \
  do { if (const clade_status clade_st_ = (call)) CLADE_HPP_FAIL(::clade::Error(clade_st_)); } while (0)
// Bad input caught by this layer itself.
#define CLADE_HPP_INVALID(msg) CLADE_HPP_FAIL(::clade::Error(CLADE_E_INVALID_ARG, msg))
// The body of a method whose C call has one out-parameter `o` of type T.
#define CLADE_HPP_OUT(T, call) return ::clade::detail::out<T>([&](T* o) { return call; })
// ... whose C call fills (b, c) and gives the count in n: a container V.
#define CLADE_HPP_GROW(V, guess, call) \
  return ::clade::detail::grow<V>([&](V::value_type* b, size_t c, size_t* n) { return call; }, guess)
namespace detail {
inline Result<void> ok() { return Result<void>(); }
inline Result<void> check(clade_status st) { CLADE_HPP_CHECK(st); return ok(); }
template <class T, class F>
Result<T> out(F&& call, T v = T()) { CLADE_HPP_CHECK(call(&v)); return v; }
// Called again with room when the first answer is CLADE_BUFFER_SMALL.
template <class V, class F>
Result<V> grow(F&& call, size_t guess) {
  V out(guess, typename V::value_type());
  size_t n = 0;
  clade_status st = call(&out[0], out.size(), &n);
  if (st == CLADE_BUFFER_SMALL) out.resize(n), st = call(&out[0], out.size(), &n);
  CLADE_HPP_CHECK(st);
  out.resize(n);
  return out;
}
template <class T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const noexcept { Free(p); }
};
// The owner of a C handle (its *_free on destruction): move-only.
template <class T, void (*Free)(T*)>
class Handle {
 public:
  T* get() const noexcept { return h_.get(); }
  T* release() noexcept { return h_.release(); }  // the caller frees it
  explicit operator bool() const noexcept { return h_ != nullptr; }
 protected:
  Handle() noexcept = default;
  explicit Handle(T* p) noexcept : h_(p) {}
  std::unique_ptr<T, Deleter<T, Free>> h_;
};
// H made from the handle that call (a *_create) gives, and extra.
template <class H, class T, class F, class... A>
Result<H> make(F&& call, A... extra) {
  T* p = nullptr;
  CLADE_HPP_CHECK(call(&p));
  return H(p, extra...);
}
}  // namespace detail
// ---- views -------------------------------------------------------------
// A pointer and a size: what the C API takes and gives. Made from a
// vector, an array, a pointer and a size, a braced list (valid for the
// call only) or a std::span (C++20); converts to std::span too.
template <class T>
class View {
 public:
  using value_type = std::remove_cv_t<T>;
  View() noexcept = default;
  View(T* data, size_t size) noexcept : p_(data), n_(size) {}
  View(std::vector<value_type>& v) noexcept : p_(v.data()), n_(v.size()) {}
  View(const std::vector<value_type>& v) noexcept : p_(v.data()), n_(v.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
  View(std::initializer_list<value_type> l) noexcept : p_(l.begin()), n_(l.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  template <size_t N>
  View(std::array<value_type, N>& a) noexcept : p_(a.data()), n_(N) {}
  template <size_t N>
  View(const std::array<value_type, N>& a) noexcept : p_(a.data()), n_(N) {}
  template <size_t N>
  View(T (&a)[N]) noexcept : p_(a), n_(N) {}
#if defined(__cpp_lib_span)
  template <class U, size_t E, class = std::enable_if_t<std::is_convertible<U (*)[], T (*)[]>::value>>
  View(std::span<U, E> s) noexcept : p_(s.data()), n_(s.size()) {}
  operator std::span<T>() const noexcept { return {p_, n_}; }
#endif
  T* data() const noexcept { return p_; }
  size_t size() const noexcept { return n_; }
  bool empty() const noexcept { return n_ == 0; }
  T* begin() const noexcept { return p_; }
  T* end() const noexcept { return p_ + n_; }
  T& operator[](size_t i) const noexcept { return p_[i]; }
 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};
using TokenView = View<const Token>;
// ---- version, status, log ---------------------------------------------
inline int version_number() noexcept { return clade_version_number(); }
inline std::string_view version_string() noexcept { return clade_version_string(); }
inline std::string_view status_string(clade_status s) noexcept { return clade_status_string(s); }
inline std::string_view last_error() noexcept { return clade_last_error(); }
using LogFn = std::function<void(clade_log_level, std::string_view)>;
namespace detail {
inline LogFn& log_fn() { static LogFn fn; return fn; }
inline void log_thunk(clade_log_level level, const char* message, void*) {
  CLADE_HPP_TRY log_fn()(level, message); CLADE_HPP_CATCH()
}
}  // namespace detail
// The process's log receiver (empty: none); as clade_set_log, set it first.
inline void set_log(LogFn fn, clade_log_level min_level = CLADE_LOG_INFO) {
  clade_set_log(nullptr, nullptr, min_level);
  detail::log_fn() = std::move(fn);
  if (detail::log_fn()) clade_set_log(&detail::log_thunk, nullptr, min_level);
}
// ---- parameter and result structs (filled by their *_init) -------------
#define CLADE_HPP_STRUCT(Name, c_type)                  \
  struct Name : c_type {                                \
    Name() noexcept : c_type() { c_type##_init(this); } \
  };                                                    \
  static_assert(sizeof(Name) == sizeof(c_type), #Name " adds no field")
CLADE_HPP_STRUCT(ModelParams, clade_model_params);
CLADE_HPP_STRUCT(ModelInfo, clade_model_info);
CLADE_HPP_STRUCT(SpecialTokens, clade_special_tokens);
CLADE_HPP_STRUCT(TreeParams, clade_tree_params);
CLADE_HPP_STRUCT(NodeInfo, clade_node_info);
CLADE_HPP_STRUCT(CacheParams, clade_cache_params);
CLADE_HPP_STRUCT(GenerateParams, clade_generate_params);
CLADE_HPP_STRUCT(GenerationStats, clade_generation_stats);
CLADE_HPP_STRUCT(AppendItem, clade_append_item);  // parent, tokens, cache, logits; out: node, seq
#undef CLADE_HPP_STRUCT
struct SamplerParams : clade_sampler_params {
  SamplerParams() noexcept : clade_sampler_params() { clade_sampler_params_init(this); }
  // Temperature 0: the highest logit, no random number.
  static SamplerParams greedy() noexcept { return SamplerParams().with_temperature(0.0f); }
  SamplerParams with_temperature(float t) noexcept { return temperature = t, *this; }
};
struct SpeculativeParams : clade_speculative_params {
  SpeculativeParams() noexcept : clade_speculative_params() { clade_speculative_params_init(this); }
  // Prompt lookup: the history's n-grams, up to ngram long.
  static SpeculativeParams lookup(int32_t ngram) noexcept { return SpeculativeParams().with_lookup(ngram); }
  SpeculativeParams with_lookup(int32_t ngram) noexcept { return lookup_ngram = ngram, *this; }
};
// Tokens (pointed to) under parent: -1 (GenerateParams::root) or an earlier prompt.
struct Prompt : clade_prompt {
  Prompt(TokenView t, int32_t parent_index = -1) noexcept : clade_prompt() {
    tokens = t.data(), n_tokens = t.size(), parent = parent_index;
  }
};
// What a streaming callback returns.
enum class Flow : int32_t { Continue = 0, StopSeq = 1, StopAll = 2 };  // CLADE_GENERATE_*
static_assert(CLADE_GENERATE_CONTINUE == 0 && CLADE_GENERATE_STOP_SEQ == 1 && CLADE_GENERATE_STOP_ALL == 2, "Flow");
struct ChatMessage {
  std::string role, content;
};
namespace detail {
inline Result<std::string> chat(const clade_model* model, const char* name, const std::vector<ChatMessage>& messages,
                                bool add_assistant) {
  std::vector<clade_chat_message> cm;
  for (const auto& m : messages) cm.push_back({m.role.c_str(), m.content.c_str()});
  CLADE_HPP_GROW(std::string, 256, clade_chat_apply(model, name, cm.data(), cm.size(), add_assistant, b, c, n));
}
}  // namespace detail
// The chat template names.
inline std::vector<std::string_view> chat_templates() {
  std::vector<const char*> names(clade_chat_template_list(nullptr, 0));
  clade_chat_template_list(names.data(), names.size());
  return std::vector<std::string_view>(names.begin(), names.end());
}
// Messages in the named template's format, without a model.
inline Result<std::string> chat_apply(const std::string& template_name, const std::vector<ChatMessage>& messages,
                                      bool add_assistant_prompt = true) {
  return detail::chat(nullptr, template_name.c_str(), messages, add_assistant_prompt);
}
// ---- model ------------------------------------------------------------
class Model : public detail::Handle<clade_model, clade_model_free> {
 public:
  Model() noexcept = default;
  // Takes ownership of a handle of the C API.
  explicit Model(clade_model* m) noexcept : Handle(m) {
    ModelInfo info;
    if (m && clade_model_describe(m, &info) == CLADE_OK) n_vocab_ = info.n_vocab, n_ctx_ = info.n_ctx;
  }
  static Result<Model> load(const std::string& path, const ModelParams& params = ModelParams()) {
    return detail::make<Model, clade_model>(
        [&](clade_model** o) { return clade_model_load(path.c_str(), &params, o); });
  }
  int32_t n_vocab() const noexcept { return n_vocab_; }
  int32_t n_ctx() const noexcept { return n_ctx_; }
  Result<ModelInfo> info() const { CLADE_HPP_OUT(ModelInfo, clade_model_describe(get(), o)); }
  Result<SpecialTokens> special_tokens() const { CLADE_HPP_OUT(SpecialTokens, clade_model_special_tokens(get(), o)); }
  bool is_eog(Token t) const noexcept { return clade_token_is_eog(get(), t) != 0; }
  Result<std::vector<Token>> tokenize(std::string_view text, bool add_special = true,
                                      bool parse_special = false) const {
    const uint32_t flags =
        (add_special ? CLADE_TOKENIZE_ADD_SPECIAL : 0u) | (parse_special ? CLADE_TOKENIZE_PARSE_SPECIAL : 0u);
    CLADE_HPP_GROW(std::vector<Token>, text.size() + 4,
                   clade_tokenize(get(), text.data(), text.size(), flags, b, c, n));
  }
  Result<std::string> detokenize(TokenView tokens, bool special = false) const {
    CLADE_HPP_GROW(std::string, tokens.size() * 8 + 16,
                   clade_detokenize(get(), tokens.data(), tokens.size(), special, b, c, n));
  }
  Result<std::string> token_to_piece(Token t, bool special = false) const {
    CLADE_HPP_GROW(std::string, 32, clade_token_to_piece(get(), t, special, b, c, n));
  }
  // template_name empty: the model's own template.
  Result<std::string> chat_apply(const std::vector<ChatMessage>& messages, const std::string& template_name = "",
                                 bool add_assistant_prompt = true) const {
    return detail::chat(get(), template_name.empty() ? nullptr : template_name.c_str(), messages,
                        add_assistant_prompt);
  }
  Result<std::string_view> chat_template_name() const {
    const char* name = nullptr;
    CLADE_HPP_CHECK(clade_chat_template_name(get(), &name));
    return std::string_view(name);
  }
 private:
  int32_t n_vocab_ = 0, n_ctx_ = 0;
};
// ---- streaming detokenizer ----------------------------------------------
class Detokenizer : public detail::Handle<clade_detokenizer, clade_detokenizer_free> {
 public:
  Detokenizer() noexcept = default;
  explicit Detokenizer(clade_detokenizer* d) noexcept : Handle(d) {}
  static Result<Detokenizer> create(const Model& model, bool special = false, bool first_in_text = true) {
    return detail::make<Detokenizer, clade_detokenizer>(
        [&](clade_detokenizer** o) { return clade_detokenizer_create(model.get(), special, first_in_text, o); });
  }
  // The bytes the token completes; valid until the next call.
  Result<std::string_view> push(Token t) { return text(clade_detokenizer_push(get(), t, &p_, &n_)); }
  Result<std::string_view> flush() { return text(clade_detokenizer_flush(get(), &p_, &n_)); }
 private:
  Result<std::string_view> text(clade_status st) { CLADE_HPP_CHECK(st); return std::string_view(p_, n_); }
  const char* p_ = nullptr;
  size_t n_ = 0;
};
// ---- sampler -----------------------------------------------------------
struct SampleResult {
  Token token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<Token, float>> top;  // most likely first
};
class Sampler : public detail::Handle<clade_sampler, clade_sampler_free> {
 public:
  Sampler() noexcept = default;
  explicit Sampler(clade_sampler* s) noexcept : Handle(s) {}
  static Result<Sampler> create(const SamplerParams& params = SamplerParams()) {
    return detail::make<Sampler, clade_sampler>([&](clade_sampler** o) { return clade_sampler_create(&params, o); });
  }
  // A row of logits (its size is n_vocab).
  Result<Token> sample(View<const float> logits, uint64_t stream = 0, TokenView history = {}) {
    CLADE_HPP_OUT(Token, clade_sample(get(), stream, logits.data(), (int32_t)logits.size(), history.data(),
                                      history.size(), o));
  }
  // With the token's log-probability and up to `top` alternatives.
  Result<SampleResult> sample_ex(View<const float> logits, uint64_t stream = 0, TokenView history = {},
                                 size_t n_prompt = 0, size_t top = 0) {
    std::vector<Token> tt(top);
    std::vector<float> tl(top);
    clade_sample_result r;
    clade_sample_result_init(&r);
    r.top_tokens = tt.data(), r.top_logprobs = tl.data(), r.top_capacity = top;
    CLADE_HPP_CHECK(clade_sample_ex(get(), stream, logits.data(), (int32_t)logits.size(), history.data(),
                                    history.size(), n_prompt, &r));
    SampleResult out;
    out.token = r.token, out.logprob = r.logprob;
    for (size_t i = 0; i < r.n_top; i++) out.top.emplace_back(tt[i], tl[i]);
    return out;
  }
  Result<void> forget(uint64_t stream) { return detail::check(clade_sampler_forget(get(), stream)); }
};
// ---- generation results --------------------------------------------------
class Generation : public detail::Handle<clade_generation, clade_generation_free> {
 public:
  Generation() noexcept = default;
  Generation(clade_generation* g, bool stopped) noexcept : Handle(g), stopped_(stopped) {}
  // The call gave CLADE_STOPPED (a callback's Flow::StopAll, an abort).
  bool stopped() const noexcept { return stopped_; }
  size_t size() const noexcept { return clade_generation_count(get()); }
  std::string_view text(size_t i) const noexcept {
    size_t n = 0;
    const char* t = clade_generation_text(get(), i, &n);
    return t ? std::string_view(t, n) : std::string_view();
  }
  View<const Token> tokens(size_t i) const noexcept {
    size_t n = 0;
    const Token* t = clade_generation_tokens(get(), i, &n);
    return View<const Token>(t, t ? n : 0);
  }
  // Empty unless GenerateParams::logprobs was set.
  View<const float> logprobs(size_t i) const noexcept {
    const float* p = clade_generation_logprobs(get(), i);
    return p ? View<const float>(p, tokens(i).size()) : View<const float>();
  }
  clade_finish_reason finish(size_t i) const noexcept { return clade_generation_finish(get(), i); }
  int64_t prompt(size_t i) const noexcept { return clade_generation_prompt(get(), i); }
  // Rows of *per_token alternatives (GenerateParams::top_logprobs).
  View<const Token> top(size_t i, size_t* per_token, const float** logprobs = nullptr) const noexcept {
    const Token* t = clade_generation_top(get(), i, logprobs, per_token);
    return t ? View<const Token>(t, tokens(i).size() * *per_token) : View<const Token>();
  }
  Result<GenerationStats> stats() const { CLADE_HPP_OUT(GenerationStats, clade_generation_get_stats(get(), o)); }
 private:
  bool stopped_ = false;
};
// (seq, token, text): token -1 is a sequence's final call.
using StreamFn = std::function<Flow(size_t seq, Token token, std::string_view text)>;
// A drafter: up to max_tokens tokens after history (prompt path, then output).
using DraftFn = std::function<std::vector<Token>(uint64_t seq, TokenView history, size_t n_prompt, int32_t max_tokens)>;
namespace detail {
// A call's C++ callbacks: an exception in one is rethrown after the call.
struct CallState {
  const StreamFn* stream = nullptr;  // the callbacks
  const DraftFn* draft = nullptr;
  std::exception_ptr error;
};
inline int32_t stream_thunk(void* user, size_t seq, clade_token token, const char* text, size_t len) {
  auto* s = static_cast<CallState*>(user);
  if (s->error) return CLADE_GENERATE_STOP_ALL;
  CLADE_HPP_TRY return (int32_t)(*s->stream)(seq, token, std::string_view(text, len));
  CLADE_HPP_CATCH(s->error = std::current_exception(); return CLADE_GENERATE_STOP_ALL;)
}
inline int32_t draft_thunk(void* user, clade_draft_request* requests, size_t n) {
  auto* s = static_cast<CallState*>(user);
  CLADE_HPP_TRY for (size_t i = 0; i < n; i++) {
    clade_draft_request* r = CLADE_DRAFT_REQUEST_AT(requests, i);
    std::vector<Token> got = (*s->draft)(r->seq, TokenView(r->history, r->n_history), r->n_prompt, r->max_tokens);
    if (got.size() > (size_t)r->max_tokens) return -1;
    for (size_t j = 0; j < got.size(); j++) r->tokens[j] = got[j];
    r->n_tokens = (int32_t)got.size();
  }
  return 0;
  CLADE_HPP_CATCH(s->error = std::current_exception(); return -1;)
}
}  // namespace detail
class TokenStream;
// ---- tree --------------------------------------------------------------
// node: the caller's reference (Tree::release); tokens of the file; reused tokens.
struct PrefixResult { NodeId node = -1; size_t reused = 0; };
struct LoadResult { NodeId node = -1; size_t tokens = 0, reused = 0; };
class Tree : public detail::Handle<clade_tree, clade_tree_free> {
 public:
  Tree() noexcept = default;
  // Takes ownership of a handle of the C API (n_vocab, n_ctx: its model's).
  Tree(clade_tree* t, int32_t n_vocab, int32_t n_ctx) noexcept : Handle(t), n_vocab_(n_vocab), n_ctx_(n_ctx) {}
  static Result<Tree> create(const Model& model, const TreeParams& params = TreeParams()) {
    const bool long_ctx = (params.flags & CLADE_TREE_ALLOW_LONG_CONTEXT) != 0;
    return detail::make<Tree, clade_tree>([&](clade_tree** o) { return clade_tree_create(model.get(), &params, o); },
                                          model.n_vocab(), long_ctx ? INT32_MAX : model.n_ctx());
  }
  int32_t n_vocab() const noexcept { return n_vocab_; }
  // A node under parent; logits (empty, or n_vocab floats): its last token's.
  Result<NodeId> append(NodeId parent, TokenView tokens, View<float> logits = {}) {
    if (!logits.empty() && logits.size() < (size_t)n_vocab_)
      CLADE_HPP_INVALID("clade::Tree::append: logits has room for fewer than n_vocab floats");
    CLADE_HPP_OUT(NodeId, clade_tree_append(get(), parent, tokens.data(), tokens.size(), or_null(logits), o));
  }
  // Every item in one atomic call; each item's node and seq are filled.
  Result<void> append_batch(View<AppendItem> items) {
    std::vector<clade_append_item> c(items.begin(), items.end());
    CLADE_HPP_CHECK(clade_tree_append_batch(get(), c.data(), c.size()));
    for (size_t i = 0; i < c.size(); i++) items[i].node = c[i].node, items[i].seq = c[i].seq;
    return detail::ok();
  }
  Result<PrefixResult> append_prefix(TokenView tokens, View<float> logits = {}) {
    if (!logits.empty() && logits.size() < (size_t)n_vocab_)
      CLADE_HPP_INVALID("clade::Tree::append_prefix: logits has room for fewer than n_vocab floats");
    CLADE_HPP_OUT(PrefixResult, clade_tree_append_prefix(get(), tokens.data(), tokens.size(), or_null(logits),
                                                         &o->node, &o->reused));
  }
  Result<void> release(NodeId node) { return detail::check(clade_tree_release(get(), node)); }
  Result<NodeInfo> node_info(NodeId node) const { CLADE_HPP_OUT(NodeInfo, clade_tree_node_info(get(), node, o)); }
  Result<std::vector<Token>> node_tokens(NodeId node) const {
    CLADE_HPP_GROW(std::vector<Token>, 64, clade_tree_node_tokens(get(), node, b, c, n));
  }
  Result<std::vector<NodeId>> children(NodeId node) const {
    CLADE_HPP_GROW(std::vector<NodeId>, 8, clade_tree_children(get(), node, b, c, n));
  }
  size_t kv_bytes() const noexcept { return clade_tree_kv_bytes(get()); }
  uint64_t kv_used() const noexcept { return clade_tree_kv_used(get()); }
  Result<void> set_kv_budget(uint64_t bytes) { return detail::check(clade_tree_set_kv_budget(get(), bytes)); }
  // Evicts cached nodes down to bytes; gives the bytes freed.
  Result<uint64_t> trim(uint64_t bytes) { CLADE_HPP_OUT(uint64_t, clade_tree_trim(get(), bytes, o)); }
  // fn returns true to stop a long call (CLADE_STOPPED); empty: none.
  Result<void> set_abort(std::function<bool()> fn) {
    auto keep = fn ? std::make_unique<std::function<bool()>>(std::move(fn)) : nullptr;
    CLADE_HPP_CHECK(clade_tree_set_abort(get(), keep ? &abort_thunk : nullptr, keep.get()));
    abort_ = std::move(keep);
    return detail::ok();
  }
  // Sessions: the path root .. node to a file, and back (evaluating nothing).
  Result<void> save(NodeId node, const std::string& path) const {
    return detail::check(clade_tree_save(get(), node, path.c_str()));
  }
  Result<LoadResult> load(const std::string& path) {
    CLADE_HPP_OUT(LoadResult, clade_tree_load(get(), path.c_str(), &o->node, &o->tokens, &o->reused));
  }
  // clade_generate; fn (optional) gets the text as it comes.
  Result<Generation> generate(View<const Prompt> prompts, const GenerateParams& params = GenerateParams(),
                              const StreamFn& fn = nullptr) {
    return run(prompts, params, nullptr, fn, nullptr);
  }
  // clade_generate_speculative; drafter (optional) replaces spec's drafter.
  Result<Generation> generate_speculative(View<const Prompt> prompts, const GenerateParams& params,
                                          const SpeculativeParams& spec, const StreamFn& fn = nullptr,
                                          const DraftFn& drafter = nullptr) {
    return run(prompts, params, &spec, fn, drafter ? &drafter : nullptr);
  }
  // An input range over the generated tokens (TokenStream); model: the tree's.
  inline Result<TokenStream> stream(const Model& model, View<const Prompt> prompts,
                                    const GenerateParams& params = GenerateParams());
 private:
  static float* or_null(View<float> v) noexcept { return v.empty() ? nullptr : v.data(); }
  static int32_t abort_thunk(void* user) {
    CLADE_HPP_TRY return (*static_cast<std::function<bool()>*>(user))() ? 1 : 0;
    CLADE_HPP_CATCH(return 1;)
  }
  Result<Generation> run(View<const Prompt> prompts, const GenerateParams& params, const SpeculativeParams* spec,
                         const StreamFn& fn, const DraftFn* drafter) {
    std::vector<clade_prompt> c(prompts.begin(), prompts.end());
    detail::CallState state;
    clade_generate_params p = params;
    if (fn) state.stream = &fn, p.callback = &detail::stream_thunk, p.user = &state;
    clade_generation* g = nullptr;
    clade_status st;
    if (spec) {
      clade_speculative_params s = *spec;
      if (drafter) state.draft = drafter, s.draft = &detail::draft_thunk, s.user = &state, s.lookup_ngram = 0;
      if (drafter) s.draft_model = nullptr;
      st = clade_generate_speculative(get(), c.data(), c.size(), &p, &s, &g);
    } else {
      st = clade_generate(get(), c.data(), c.size(), &p, &g);
    }
    Generation gen(g, st == CLADE_STOPPED);
#if defined(__cpp_exceptions)
    if (state.error) std::rethrow_exception(state.error);
#endif
    if (st != CLADE_OK && st != CLADE_STOPPED) CLADE_HPP_FAIL(Error(st));
    return gen;
  }
  std::unique_ptr<std::function<bool()>> abort_;
  int32_t n_vocab_ = 0, n_ctx_ = 0;
  friend class TokenStream;
};
// ---- cache and decode steps ----------------------------------------------
// The sequences and tokens of one decode step.
class Step {
 public:
  Step& add(SeqId seq, TokenView tokens) {
    ids_.push_back(seq);
    counts_.push_back((int32_t)tokens.size());
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
    return *this;
  }
  size_t size() const noexcept { return ids_.size(); }
  size_t n_tokens() const noexcept { return tokens_.size(); }
  // A clade_batch over this step (clade_batch_init, then the arrays).
  clade_batch batch() const noexcept {
    clade_batch b;
    clade_batch_init(&b);
    b.n_seqs = ids_.size(), b.seq_ids = ids_.data(), b.n_tokens = counts_.data(), b.tokens = tokens_.data();
    return b;
  }
 private:
  std::vector<SeqId> ids_;
  std::vector<int32_t> counts_;
  std::vector<Token> tokens_;
};
class Cache : public detail::Handle<clade_cache, clade_cache_free> {
 public:
  Cache() noexcept = default;
  // Takes ownership of a handle of the C API (n_vocab: its model's).
  Cache(clade_cache* c, int32_t n_vocab) noexcept : Handle(c), n_vocab_(n_vocab) {}
  static Result<Cache> create(const Tree& tree, const CacheParams& params = CacheParams()) {
    return detail::make<Cache, clade_cache>([&](clade_cache** o) { return clade_cache_create(tree.get(), &params, o); },
                                            tree.n_vocab());
  }
  // A sequence under node; tokens are queued for the next step.
  Result<SeqId> add(NodeId node, TokenView tokens = {}, uint32_t flags = 0) {
    CLADE_HPP_OUT(SeqId, clade_cache_add(get(), node, tokens.data(), tokens.size(), flags, o));
  }
  Result<void> remove(SeqId seq) { return detail::check(clade_cache_remove(get(), seq)); }
  Result<void> truncate(SeqId seq, int32_t length) { return detail::check(clade_cache_truncate(get(), seq, length)); }
  Result<int32_t> length(SeqId seq) const { CLADE_HPP_OUT(int32_t, clade_cache_seq_length(get(), seq, o)); }
  size_t kv_bytes() const noexcept { return clade_cache_kv_bytes(get()); }
  Result<SeqId> fork(SeqId seq) { CLADE_HPP_OUT(SeqId, clade_cache_fork(get(), seq, o)); }
  Result<NodeId> promote(SeqId seq) { CLADE_HPP_OUT(NodeId, clade_cache_promote(get(), seq, o)); }
  Result<void> move(SeqId seq, NodeId node) { return detail::check(clade_cache_move(get(), seq, node)); }
  Result<NodeId> seq_node(SeqId seq) const { CLADE_HPP_OUT(NodeId, clade_cache_seq_node(get(), seq, o)); }
  Result<std::vector<Token>> seq_tokens(SeqId seq) const {
    CLADE_HPP_GROW(std::vector<Token>, 64, clade_cache_seq_tokens(get(), seq, b, c, n));
  }
  Result<void> keep(SeqId seq, int32_t from, View<const int32_t> keep) {
    return detail::check(clade_cache_keep(get(), seq, from, keep.data(), keep.size()));
  }
  Result<void> save(SeqId seq, const std::string& path) const {
    return detail::check(clade_cache_save(get(), seq, path.c_str()));
  }
  // One step; logits (may be empty): n_vocab floats a sequence (a token: all_logits).
  Result<void> decode(const Step& step, View<float> logits = {}, bool all_logits = false) {
    return decode_tree(step, {}, logits, all_logits);
  }
  // One step giving each row's greedy token instead of its logits.
  Result<std::vector<Token>> decode_greedy(const Step& step) {
    std::vector<Token> argmax(step.size());
    clade_batch b = step.batch();
    b.argmax = argmax.data(), b.logits_rows = argmax.size();
    CLADE_HPP_CHECK(clade_decode(get(), &b));
    return argmax;
  }
  // A token tree a sequence: parents (-1 or an earlier token of its own) or empty.
  Result<void> decode_tree(const Step& step, View<const int32_t> parents, View<float> logits = {},
                           bool all_logits = false) {
    if (!parents.empty() && parents.size() != step.n_tokens())
      CLADE_HPP_INVALID("clade::Cache::decode_tree: parents needs one entry per token of the step");
    clade_batch b = step.batch();
    b.all_logits = all_logits, b.logits = logits.empty() ? nullptr : logits.data();
    b.logits_rows = n_vocab_ > 0 ? logits.size() / (size_t)n_vocab_ : 0;
    return detail::check(clade_decode_tree(get(), &b, parents.empty() ? nullptr : parents.data()));
  }
  // The C step as it is.
  Result<void> decode(const clade_batch& batch) { return detail::check(clade_decode(get(), &batch)); }
 private:
  int32_t n_vocab_ = 0;
};
// ---- token stream --------------------------------------------------------
// Sequence seq's token and the text it completes, or (token -1) its end: the rest and why.
struct StreamEvent {
  size_t seq = 0;
  Token token = -1;
  std::string text;
  clade_finish_reason finish = CLADE_FINISH_NONE;
};
// An input range over generated tokens: a decode step of every live sequence
// when the last one's events are used up. Takes GenerateParams but for stop
// strings and a callback (Tree::generate has them). On an error the range
// ends and error() says why (with exceptions on, the increment throws it).
class TokenStream {
  struct Seq {
    SeqId id = -1;
    std::vector<Token> history;  // the prompt path, then the output
    size_t n_prompt = 0;
    Detokenizer detok;
    bool done = false;
  };
  struct State {
    int32_t n_vocab = 0, n_ctx = 0, max_new = 0;
    uint64_t first_stream = 0;
    std::vector<char> stops;  // per token: ends a sequence
    Sampler sampler;
    Cache cache;
    std::vector<Seq> seqs;
    std::deque<StreamEvent> queue;
    StreamEvent current;
    std::optional<Error> error;
    bool at_end = false;
  };
 public:
  struct sentinel {};
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using iterator_concept = std::input_iterator_tag;
    using value_type = StreamEvent;
    using difference_type = std::ptrdiff_t;
    using reference = const StreamEvent&;
    iterator() noexcept = default;
    explicit iterator(TokenStream* s) noexcept : s_(s) {}
    reference operator*() const noexcept { return s_->st_->current; }
    const StreamEvent* operator->() const noexcept { return &s_->st_->current; }
    iterator& operator++() { return s_->next(), *this; }
    void operator++(int) { s_->next(); }
    friend bool operator==(const iterator& i, sentinel) noexcept { return i.done(); }
    friend bool operator!=(const iterator& i, sentinel) noexcept { return !i.done(); }
    friend bool operator==(sentinel, const iterator& i) noexcept { return i.done(); }
    friend bool operator!=(sentinel, const iterator& i) noexcept { return !i.done(); }
   private:
    bool done() const noexcept { return !s_ || !s_->st_ || s_->st_->at_end; }
    TokenStream* s_ = nullptr;
  };
  TokenStream() = default;
  iterator begin() {  // the first call computes the first event
    if (!started_ && st_) started_ = true, next();
    return iterator(this);
  }
  sentinel end() const noexcept { return {}; }
  // The error that ended the stream, or nullptr.
  const Error* error() const noexcept { return st_ && st_->error ? &*st_->error : nullptr; }
 private:
  friend class Tree;
  static Result<TokenStream> open(const Model& model, Tree& tree, View<const Prompt> prompts,
                                  const GenerateParams& p) {
    if (p.stop_strings && p.n_stop_strings) CLADE_HPP_INVALID("clade::TokenStream: stop strings need Tree::generate");
    if (p.callback) CLADE_HPP_INVALID("clade::TokenStream: a callback needs Tree::generate");
    if (p.max_new_tokens < 1 || p.n_samples < 1)
      CLADE_HPP_INVALID("clade::TokenStream: max_new_tokens and n_samples must be at least 1");
    if (prompts.empty()) CLADE_HPP_INVALID("clade::TokenStream: no prompts");
    TokenStream ts;
    ts.st_ = std::make_unique<State>();
    State& st = *ts.st_;
    st.n_vocab = tree.n_vocab_, st.n_ctx = tree.n_ctx_, st.max_new = p.max_new_tokens, st.first_stream = p.first_stream;
    st.stops.resize((size_t)st.n_vocab);
    for (Token t = 0; t < st.n_vocab && !p.ignore_eog; t++) st.stops[(size_t)t] = model.is_eog(t);
    for (size_t i = 0; p.stop_tokens && i < p.n_stop_tokens; i++) {
      if (p.stop_tokens[i] < 0 || p.stop_tokens[i] >= st.n_vocab)
        CLADE_HPP_FAIL(Error(CLADE_E_TOKEN, "clade::TokenStream: stop token " + std::to_string(i) + " out of range"));
      st.stops[(size_t)p.stop_tokens[i]] = 1;
    }
    // The prompts in one atomic batch append; the leaves give logits.
    std::vector<char> inner(prompts.size(), 0);
    for (size_t i = 0; i < prompts.size(); i++) {
      const int32_t par = prompts[i].parent;
      if (par < -1 || (par >= 0 && (size_t)par >= i))
        CLADE_HPP_INVALID("clade::TokenStream: prompt " + std::to_string(i) + "'s parent is not an earlier prompt");
      if (par >= 0) inner[(size_t)par] = 1;
    }
    std::vector<size_t> leaves;  // (clade_tree_append_batch refuses one without tokens)
    for (size_t i = 0; i < prompts.size(); i++)
      if (!inner[i]) leaves.push_back(i);
    const size_t nv = (size_t)st.n_vocab, ns = (size_t)p.n_samples, total = leaves.size() * ns;
    std::vector<float> logits(leaves.size() * nv);
    std::vector<clade_append_item> items(prompts.size());
    for (size_t i = 0, l = 0; i < prompts.size(); i++) {
      clade_append_item_init(&items[i]);
      items[i].parent = prompts[i].parent < 0 ? p.root : CLADE_ITEM_NODE(prompts[i].parent);
      items[i].tokens = prompts[i].tokens, items[i].n_tokens = prompts[i].n_tokens;
      if (!inner[i]) items[i].logits = logits.data() + nv * l++;
    }
    SamplerParams sp;
    if (p.sampler) static_cast<clade_sampler_params&>(sp) = *p.sampler;
    clade_sampler* sm = nullptr;
    CLADE_HPP_CHECK(clade_sampler_create(&sp, &sm));
    st.sampler = Sampler(sm);
    CacheParams cp;
    cp.max_seqs = (int32_t)total, cp.max_tokens = p.max_new_tokens + 1, cp.attention = p.attention;
    clade_cache* cc = nullptr;
    CLADE_HPP_CHECK(clade_cache_create(tree.get(), &cp, &cc));
    st.cache = Cache(cc, st.n_vocab);
    CLADE_HPP_CHECK(clade_tree_append_batch(tree.get(), items.data(), items.size()));
    // Sequences leaf by leaf, n_samples each; then the prompts' references go.
    st.seqs.resize(total);
    clade_status bad = CLADE_OK;
    for (size_t i = 0; i < total && bad == CLADE_OK; i++) {
      Seq& s = st.seqs[i];
      const NodeId leaf = items[leaves[i / ns]].node;
      bad = clade_cache_add(cc, leaf, nullptr, 0, 0, &s.id);
      for (NodeId at = leaf; bad == CLADE_OK && at > 0;) {  // the path's tokens, from the leaf up
        NodeInfo ni;
        size_t n = 0;
        bad = clade_tree_node_info(tree.get(), at, &ni);
        if (s.history.empty() && bad == CLADE_OK) s.history.resize((size_t)(ni.path_length + ni.length));
        if (bad == CLADE_OK)
          bad = clade_tree_node_tokens(tree.get(), at, s.history.data() + ni.path_length, (size_t)ni.length, &n);
        at = ni.parent;
      }
      s.n_prompt = s.history.size();
      clade_detokenizer* d = nullptr;
      if (bad == CLADE_OK) bad = clade_detokenizer_create(model.get(), p.special, 0, &d);
      s.detok = Detokenizer(d);
    }
    const std::optional<Error> err = bad != CLADE_OK ? std::optional<Error>(Error(bad)) : std::nullopt;
    for (auto& it : items) clade_tree_release(tree.get(), it.node);
    if (err) CLADE_HPP_FAIL(*err);
    // The first tokens: from the leaves' logits.
    for (size_t i = 0; i < total; i++) CLADE_HPP_CHECK(sample(st, i, logits.data() + nv * (i / ns)));
    return ts;
  }
  // Sequence i draws a token from its row of logits: an event, maybe its end.
  static clade_status sample(State& st, size_t i, const float* row) {
    Seq& s = st.seqs[i];
    clade_sample_result r;
    clade_sample_result_init(&r);
    clade_status rc = clade_sample_ex(st.sampler.get(), st.first_stream + i, row, st.n_vocab, s.history.data(),
                                      s.history.size(), s.n_prompt, &r);
    if (rc != CLADE_OK) return rc;
    if (st.stops[(size_t)r.token]) return finish(st, i, CLADE_FINISH_STOP_TOKEN);
    const int64_t pos = (int64_t)s.history.size();  // where a step evaluates it
    s.history.push_back(r.token);
    StreamEvent e;
    e.seq = i, e.token = r.token;
    const char* text = nullptr;  // the detokenizer's
    size_t len = 0;
    if ((rc = clade_detokenizer_push(s.detok.get(), r.token, &text, &len)) != CLADE_OK) return rc;
    e.text.assign(text, len);
    st.queue.push_back(std::move(e));
    const bool full = s.history.size() - s.n_prompt >= (size_t)st.max_new || pos >= st.n_ctx;
    return full ? finish(st, i, CLADE_FINISH_LENGTH) : CLADE_OK;
  }
  static clade_status finish(State& st, size_t i, clade_finish_reason why) {
    Seq& s = st.seqs[i];
    StreamEvent e;
    e.seq = i, e.finish = why;
    const char* text = nullptr;
    size_t len = 0;
    clade_status rc = clade_detokenizer_flush(s.detok.get(), &text, &len);
    if (rc == CLADE_OK) e.text.assign(text, len);
    st.queue.push_back(std::move(e));
    s.done = true;
    s.detok = Detokenizer();
    clade_status rm = clade_cache_remove(st.cache.get(), s.id);
    return rc != CLADE_OK ? rc : rm;
  }
  // A decode step of every live sequence with its last token, and a draw.
  static clade_status step(State& st, const std::vector<size_t>& live) {
    Step stp;
    for (size_t i : live) stp.add(st.seqs[i].id, {st.seqs[i].history.back()});
    std::vector<float> logits(live.size() * (size_t)st.n_vocab);
    clade_batch b = stp.batch();
    b.logits = logits.data(), b.logits_rows = live.size();
    clade_status rc = clade_decode(st.cache.get(), &b);
    for (size_t r = 0; rc == CLADE_OK && r < live.size(); r++)
      rc = sample(st, live[r], logits.data() + r * (size_t)st.n_vocab);
    return rc;
  }
  void next() {
    State& st = *st_;
    std::vector<size_t> live;
    while (st.queue.empty() && !st.at_end) {
      live.clear();
      for (size_t i = 0; i < st.seqs.size(); i++)
        if (!st.seqs[i].done) live.push_back(i);
      if (live.empty()) break;
      const clade_status rc = step(st, live);
      if (rc != CLADE_OK) {
        st.error = Error(rc), st.at_end = true;
        st.queue.clear();
#if defined(CLADE_HPP_EXCEPTIONS)
        throw *st.error;
#endif
      }
    }
    st.at_end = st.queue.empty();
    if (!st.at_end) st.current = std::move(st.queue.front()), st.queue.pop_front();
  }
  std::unique_ptr<State> st_;
  bool started_ = false;
};
inline Result<TokenStream> Tree::stream(const Model& model, View<const Prompt> prompts, const GenerateParams& params) {
  return TokenStream::open(model, *this, prompts, params);
}
}  // namespace clade
#undef CLADE_HPP_TRY
#undef CLADE_HPP_CATCH
#undef CLADE_HPP_OUT
#undef CLADE_HPP_GROW
#endif  // CLADE_CLADE_HPP
