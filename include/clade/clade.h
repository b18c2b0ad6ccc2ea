/*
 * clade: high-throughput inference of Llama-family models for many
 * sequences that share prefixes.
 *
 * The whole public API. Plain C99; every symbol is prefixed clade_ / CLADE_.
 *
 * Conventions
 * - Every call that can fail returns a clade_status: 0 is success, negative
 *   values are errors (their numbers are fixed forever), positive values are
 *   recoverable states (a cache is full, a generation was stopped).
 * - clade_last_error() gives the calling thread a message for every status
 *   but CLADE_OK, the recoverable ones included: CLADE_CACHE_FULL names
 *   what was full (every sequence slot of max_seqs taken, or the tokens a
 *   sequence would hold against max_tokens), CLADE_BUFFER_SMALL the count
 *   to write and the room given. A call returning CLADE_OK leaves "".
 * - Handles come back through out-parameters; *_free functions accept NULL.
 * - Parameter structs start with their own size and are filled by their
 *   *_init function before the caller changes fields; structs the library
 *   fills (clade_model_info, clade_special_tokens, clade_node_info,
 *   clade_sample_result, clade_generation_stats) start with their size
 *   too, set by the caller: their *_init (inline, below the struct) zeroes
 *   one and sets its size to the size this header gives it. Such
 *   structs grow in later 1.x releases only by fields added at their end,
 *   whose defaults keep the old behaviour, and never shrink:
 *   - An older caller with a newer library: any size from the struct's
 *     size in clade 1.0 up is accepted. Fields past the caller's size take
 *     their defaults (as *_init sets them); a filled struct is written only
 *     as far as the caller's size reaches, and its size field is kept. The
 *     *_init symbol an older binary was linked to fills only its older size
 *     (a grown struct's *_init gets a new symbol version).
 *   - A newer caller with an older library: bytes past the struct the
 *     library knows are ignored when they are all zero (the new fields at
 *     their defaults); any nonzero byte there is CLADE_E_UNSUPPORTED, naming
 *     the struct, so a caller asking for something the library lacks is
 *     told. A filled struct gets the fields the library knows; the bytes
 *     past them are left as the caller had them (zero them first, or check
 *     clade_version_number()).
 *   - A size below the 1.0 size is CLADE_E_INVALID_ARG.
 * - Threads: a clade_model is immutable once loaded and may be used from any
 *   number of threads at once. A clade_tree and the caches made from it:
 *   clade_decode on two different caches of one tree may run at the same
 *   time (each cache has its own workspaces; the tree's nodes are read-only
 *   then); every other call on the tree or one of its caches must not
 *   overlap any call on the same tree or its caches (use one thread, or a
 *   lock). Two trees of the same model may be used from two threads at once.
 *   A clade_sampler may be used by one thread at a time. Functions without
 *   a handle (version, status strings, the param inits) are always safe.
 * - No C++ exception ever crosses this boundary.
 *
 * Limits (a value outside them is CLADE_E_INVALID_ARG naming the field)
 * - Threads: clade_model_params.n_threads 0..1024 (0: every core);
 *   clade_sampler_params.n_threads 0..256.
 * - Sequences: clade_cache_params.max_seqs 1..2^20 live sequences per
 *   cache; a decode step takes any number of them, each at most once.
 * - Tokens: clade_cache_params.max_tokens 1..2^28 unique tokens per
 *   sequence (a sequence that would pass it: CLADE_CACHE_FULL); every
 *   position below the model's context length n_ctx (clade_model_info;
 *   past it: CLADE_CONTEXT_FULL); a token tree (clade_decode_tree) at most
 *   64 tokens per sequence, tree_width 1..8; clade_tree_params
 *   .prefill_chunk 0..2^20 tokens a pass; clade_tree_append_batch at most
 *   2^24 items a call.
 * - Memory: clade_tree_params.kv_budget (0: none) bounds the KV of a tree
 *   and its caches together (past it: CLADE_KV_BUDGET).
 * - Models: head dimension at most 256 (refused at load above it).
 */
#ifndef CLADE_CLADE_H
#define CLADE_CLADE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- visibility ------------------------------------------------------- */

#if defined(_WIN32)
#  if defined(CLADE_BUILDING)
#    define CLADE_API __declspec(dllexport)
#  else
#    define CLADE_API
#  endif
#elif defined(__GNUC__)
#  define CLADE_API __attribute__((visibility("default")))
#else
#  define CLADE_API
#endif

/* ---- version ---------------------------------------------------------- */

#define CLADE_VERSION_MAJOR 1
#define CLADE_VERSION_MINOR 5
#define CLADE_VERSION_PATCH 0
#define CLADE_VERSION_NUMBER \
  (CLADE_VERSION_MAJOR * 10000 + CLADE_VERSION_MINOR * 100 + CLADE_VERSION_PATCH)
#define CLADE_VERSION_STRING "1.5.0"
/* The shared library's soname carries this number. */
#define CLADE_ABI_MAJOR 1

/* Run-time version of the library actually linked (CLADE_VERSION_NUMBER). */
CLADE_API int clade_version_number(void);
/* Static string, e.g. "1.0.0". */
CLADE_API const char *clade_version_string(void);

/* ---- opaque handles --------------------------------------------------- */

typedef struct clade_model clade_model;     /* weights, config, tokenizer */
typedef struct clade_tree clade_tree;       /* shared-cache tree of a model */
typedef struct clade_cache clade_cache;     /* unique caches of sequences */
typedef struct clade_sampler clade_sampler; /* sampling settings + state */
typedef struct clade_grammar clade_grammar; /* (1.5) a compiled grammar */
typedef struct clade_matcher clade_matcher; /* (1.5) a grammar's state */
/* clade_detokenizer (streaming text) is declared with the tokenizer. */

/* A node of a clade_tree. The root is 0. */
typedef int32_t clade_node_id;
/* A sequence of a clade_cache. */
typedef int32_t clade_seq_id;
typedef int32_t clade_token;

/* The *_init of a struct the library fills (Conventions): zeroes it and
   sets its size to this header's sizeof. Inline, so that the size is the
   caller's own header's. Not a symbol of the library. */
#define CLADE_DEFINE_OUT_INIT(type)                        \
  static inline void type##_init(type *out) {              \
    unsigned char *bytes_ = (unsigned char *)out;          \
    size_t i_;                                             \
    for (i_ = 0; i_ < sizeof *out; i_++) bytes_[i_] = 0;   \
    out->size = sizeof *out;                               \
  }

/* ---- status codes ----------------------------------------------------- */

typedef enum clade_status {
  CLADE_OK = 0,
  /* recoverable states */
  CLADE_CACHE_FULL = 1,   /* no room for the step's tokens; nothing changed */
  CLADE_STOPPED = 2,      /* a callback asked to stop */
  CLADE_BUFFER_SMALL = 3, /* output buffer too small; the count needed is
                             reported and nothing else changed */
  CLADE_KV_BUDGET = 4,    /* the tree's KV memory budget would be exceeded
                             (clade_tree_set_kv_budget); nothing changed */
  CLADE_CONTEXT_FULL = 5, /* a position would pass the model's context
                             length (n_ctx); nothing changed */
  /* errors */
  CLADE_E_INVALID_ARG = -1, /* a NULL handle, wrong size, bad value */
  CLADE_E_NOMEM = -2,       /* an allocation failed */
  CLADE_E_IO = -3,          /* a file could not be opened, read or written */
  CLADE_E_FORMAT = -4,      /* a file is not valid GGUF, or is corrupt */
  CLADE_E_UNSUPPORTED = -5, /* valid, but not supported (architecture,
                               tensor type, backend) */
  CLADE_E_TOKEN = -6,       /* a token id outside the vocabulary */
  CLADE_E_STATE = -7,       /* the call does not fit the handle's state (an
                               unknown sequence, a released node) */
  CLADE_E_BACKEND = -8,     /* the compute backend failed or is absent */
  CLADE_E_UTF8 = -9,        /* text is not valid UTF-8 */
  CLADE_E_MISMATCH = -10,   /* clade 1.3: a saved session belongs to
                               another model, KV type or backend */
  CLADE_E_INTERNAL = -100   /* a bug in clade */
} clade_status;

/* Static English name of a status; never NULL. */
CLADE_API const char *clade_status_string(clade_status status);
/* Message of the last failure on the calling thread ("" if none). The
   pointer stays valid until the next clade call on this thread. */
CLADE_API const char *clade_last_error(void);

/* ---- logging ---------------------------------------------------------- */

typedef enum clade_log_level {
  CLADE_LOG_DEBUG = 0,
  CLADE_LOG_INFO = 1,
  CLADE_LOG_WARN = 2,
  CLADE_LOG_ERROR = 3
} clade_log_level;

/* Receives clade's messages of at least the level given to clade_set_log,
   on the thread that made the call being logged (possibly several at
   once). message is NUL-terminated, without a newline, valid during the
   call only. */
typedef void (*clade_log_fn)(clade_log_level level, const char *message,
                             void *user);
/* Install a log callback for the whole process (fn NULL: no logging, the
   default). Set it before other threads call clade; safe to call again
   when no other clade call is running. */
CLADE_API void clade_set_log(clade_log_fn fn, void *user,
                             clade_log_level min_level);

/* ---- enums ------------------------------------------------------------ */

typedef enum clade_backend {
  CLADE_BACKEND_CPU = 0,
  CLADE_BACKEND_CUDA = 1
} clade_backend;

/* Element type of stored keys and values. */
typedef enum clade_kv_type {
  CLADE_KV_DEFAULT = -1, /* in clade_cache_params: the tree's type */
  CLADE_KV_F32 = 0,
  CLADE_KV_F16 = 1,
  CLADE_KV_BF16 = 2
} clade_kv_type;

/* Weight types (GGML numbering). */
typedef enum clade_weight_type {
  CLADE_WEIGHT_F32 = 0,
  CLADE_WEIGHT_F16 = 1,
  CLADE_WEIGHT_Q4_0 = 2,
  CLADE_WEIGHT_Q4_1 = 3,
  CLADE_WEIGHT_Q5_0 = 6,
  CLADE_WEIGHT_Q5_1 = 7,
  CLADE_WEIGHT_Q8_0 = 8,
  CLADE_WEIGHT_Q2_K = 10,
  CLADE_WEIGHT_Q3_K = 11,
  CLADE_WEIGHT_Q4_K = 12,
  CLADE_WEIGHT_Q5_K = 13,
  CLADE_WEIGHT_Q6_K = 14,
  CLADE_WEIGHT_BF16 = 30
} clade_weight_type;

typedef enum clade_rope_scaling {
  CLADE_ROPE_SCALING_NONE = 0,
  CLADE_ROPE_SCALING_LINEAR = 1,
  CLADE_ROPE_SCALING_LLAMA3 = 2
} clade_rope_scaling;

/* How a step attends to tree nodes shared by several sequences. */
typedef enum clade_attention {
  CLADE_ATTENTION_AUTO = 0,   /* per node, by the cost model */
  CLADE_ATTENTION_SHARED = 1, /* always batched over the node's rows */
  CLADE_ATTENTION_FLAT = 2,   /* each sequence reads each node itself */
  CLADE_ATTENTION_NONE = 3    /* skip attention (a speed ceiling; the
                                 results are meaningless) */
} clade_attention;

/* ---- model ------------------------------------------------------------ */

typedef struct clade_model_params {
  size_t size;           /* sizeof(clade_model_params) */
  clade_backend backend; /* default CPU */
  int32_t n_threads;     /* 0: all cores */
  int32_t vocab_only;    /* load the tokenizer only (no tensors needed) */
  int32_t use_mmap;      /* default 1: map the file (on a 2 MiB boundary,
                            huge pages advised: the kernel uses them where
                            its page cache allows); 0: read it into memory
                            the model owns (huge pages where allowed; the
                            whole file stays resident while the model lives;
                            vocab_only models always map) */
} clade_model_params;

CLADE_API void clade_model_params_init(clade_model_params *params);

/* Load a GGUF file (v2 or v3). On success *out owns the model; free it with
   clade_model_free. Architectures: "llama", "qwen2". params may be NULL
   for the defaults. */
CLADE_API clade_status clade_model_load(const char *path,
                                        const clade_model_params *params,
                                        clade_model **out);
/* Freeing is deferred (sqlite's close_v2): the handle is given up at once
   and must not be used again, but the model's memory is released only when
   the last tree and detokenizer made from it are freed too. Handles may
   therefore be freed in any order (a garbage collector's order included)
   and nothing leaks once all are freed. Accepts NULL. */
CLADE_API void clade_model_free(clade_model *model);

typedef struct clade_model_info {
  size_t size; /* sizeof(clade_model_info), set by the caller */
  char architecture[32];
  char name[96];
  int32_t n_layers;
  int32_t n_embd;
  int32_t n_heads;
  int32_t n_kv_heads;
  int32_t head_dim;
  int32_t n_ff;
  int32_t n_vocab;
  int32_t n_ctx;           /* positions the model runs: its context length,
                              or its attention.sliding_window when the file
                              has one (within the window full attention is
                              the window's; past it clade has no windowed
                              attention) */
  float rope_freq_base;
  float rope_freq_scale;   /* 1 / linear factor */
  clade_rope_scaling rope_scaling;
  float norm_eps;
  clade_weight_type weight_type; /* type of the largest matrices */
  int32_t has_qkv_bias;
  int32_t tied_output;
  int32_t vocab_only;
  uint64_t n_params;
  uint64_t weight_bytes; /* bytes of tensor data */
} clade_model_info;
/* clade_model_info_init(clade_model_info *) */
CLADE_DEFINE_OUT_INIT(clade_model_info)

/* Fill *info (info->size must be set). Thread-safe. */
CLADE_API clade_status clade_model_describe(const clade_model *model,
                                            clade_model_info *info);

/* ---- tokenizer (on the model; thread-safe) ---------------------------- */

/* Flags for clade_tokenize. */
#define CLADE_TOKENIZE_ADD_SPECIAL 1u   /* add BOS/EOS as the model asks */
#define CLADE_TOKENIZE_PARSE_SPECIAL 2u /* match control, user-defined
                                           and unknown token texts in the
                                           input (at character boundaries;
                                           a text that is not valid UTF-8
                                           never matches) */

/* Encode text[0..len) into tokens[0..capacity). *n_tokens receives the
   count. When capacity is too small, returns CLADE_BUFFER_SMALL with
   *n_tokens set to the count needed and tokens untouched (as snprintf).
   Text must be valid UTF-8: anything else is CLADE_E_UTF8, naming the byte
   offset. tokens may be NULL when capacity is 0. */
CLADE_API clade_status clade_tokenize(const clade_model *model,
                                      const char *text, size_t len,
                                      uint32_t flags, clade_token *tokens,
                                      size_t capacity, size_t *n_tokens);

/* Decode tokens into buf[0..capacity) (not NUL-terminated; *n_bytes gets
   the length). CLADE_BUFFER_SMALL as above. special: render control tokens
   as their text (otherwise they render as nothing). */
CLADE_API clade_status clade_detokenize(const clade_model *model,
                                        const clade_token *tokens,
                                        size_t n_tokens, int32_t special,
                                        char *buf, size_t capacity,
                                        size_t *n_bytes);

/* The bytes of one token, as clade_detokenize would emit them in the
   middle of a text. */
CLADE_API clade_status clade_token_to_piece(const clade_model *model,
                                            clade_token token,
                                            int32_t special, char *buf,
                                            size_t capacity, size_t *n_bytes);

typedef struct clade_special_tokens {
  size_t size; /* sizeof(clade_special_tokens), set by the caller */
  clade_token bos, eos, eot, pad, unk; /* -1 where the model has none */
  int32_t add_bos, add_eos;
} clade_special_tokens;
/* clade_special_tokens_init(clade_special_tokens *) */
CLADE_DEFINE_OUT_INIT(clade_special_tokens)

CLADE_API clade_status clade_model_special_tokens(const clade_model *model,
                                                  clade_special_tokens *out);
/* 1 if the token ends a generation (EOS, EOT, ...), else 0. */
CLADE_API int32_t clade_token_is_eog(const clade_model *model,
                                     clade_token token);

/* Streaming detokenizer: feed generated tokens one at a time and get the
   bytes that are complete: it never splits a UTF-8 character. With
   first_in_text set, the SentencePiece leading space of the first token is
   dropped (as clade_detokenize does); leave it 0 when continuing a prompt.
   Keeps the model alive (see clade_model_free). One thread at a time. */
typedef struct clade_detokenizer clade_detokenizer;

CLADE_API clade_status clade_detokenizer_create(const clade_model *model,
                                                int32_t special,
                                                int32_t first_in_text,
                                                clade_detokenizer **out);
/* *text / *len: the newly complete bytes (not NUL-terminated), owned by the
   detokenizer and valid until its next call. */
CLADE_API clade_status clade_detokenizer_push(clade_detokenizer *detok,
                                              clade_token token,
                                              const char **text, size_t *len);
/* Whatever is left (an incomplete character at the end of a generation). */
CLADE_API clade_status clade_detokenizer_flush(clade_detokenizer *detok,
                                               const char **text, size_t *len);
CLADE_API void clade_detokenizer_free(clade_detokenizer *detok);

/* ---- chat templates (on the model; thread-safe) ----------------------- */

/* A conversation is a list of messages; role and content are NUL-terminated
   UTF-8 (passed through byte for byte) and only read during the call. */
typedef struct clade_chat_message {
  const char *role;    /* "system", "user", "assistant", ... */
  const char *content;
} clade_chat_message;

/* The prompt formats of the families below, chosen by name or recognized
   from the model's template (GGUF tokenizer.chat_template) by distinctive
   substrings of its Jinja text, checked in this order (no Jinja is run; a
   template text that is just one of the names selects it too):
     "<|im_start|>" (without Phi-4's "<|im_sep|>")        chatml
     "[INST]" with "<<SYS>>"                                llama2
     "[INST]" (without Mistral v7's "[SYSTEM_PROMPT]")      mistral
     "<|start_header_id|>" and "<|end_header_id|>"          llama3
     "<start_of_turn>"                                      gemma
     "<|assistant|>" and "<|end|>"                          phi3
     "<|user|>" and "<|assistant|>"                         zephyr
   Anything else is CLADE_E_UNSUPPORTED (pass a name explicitly).

   BOS: the formatted text never starts with the BOS token's text, where the
   reference templates write bos_token first: tokenize it with
   CLADE_TOKENIZE_ADD_SPECIAL (the tokenizer adds BOS as the model asks) and
   CLADE_TOKENIZE_PARSE_SPECIAL (the markers in the text, such as
   <|im_start|> or </s>, become their control tokens; without it they would
   be tokenized as plain text). Llama 2 writes BOS inside the history too
   (before each later [INST]), and Llama 2, Mistral and Zephyr end messages
   with EOS: those are the model's BOS and EOS token texts ("<s>", "</s>"
   in these families' vocabularies).

   The formats, for (system S, user U1, assistant A1, user U2) with the
   assistant prompt; "trimmed": leading and trailing whitespace removed, as
   the reference template's strip()/trim does:
   - chatml (Qwen and other ChatML models; any role, passed through; no
     default system message is added):
       <|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n
       <|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n
       <|im_start|>assistant\n
   - llama3 (Llama 3 Instruct; any role, passed through; content trimmed):
       <|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>
       <|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|> ... and
       <|start_header_id|>assistant<|end_header_id|>\n\n to end
   - llama2 (Llama 2 Chat): an optional system message first, then user and
     assistant alternating from user; the system message goes into the
     first user message as a <<SYS>> block; content trimmed:
       [INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 </s><s>[INST] U2 [/INST]
   - mistral (Mistral Instruct v0.3, Mixtral 8x22B: Mistral's tokenizer V3
     format): roles as llama2; the system message is put before the last
     user message's text (mistral-common's rule); assistant content trimmed:
       [INST] U1[/INST] A1</s>[INST] S\n\nU2[/INST]
   - gemma (Gemma 1-3): roles as llama2, "assistant" written as "model";
     the system message is put before the first user message's text (Gemma
     3's template; Gemma 1 and 2 have no system role); content trimmed:
       <start_of_turn>user\nS\n\nU1<end_of_turn>\n<start_of_turn>model\n
       A1<end_of_turn>\n<start_of_turn>user\nU2<end_of_turn>\n
       <start_of_turn>model\n
   - phi3 (Phi-3 Instruct; system, user, assistant in any order):
       <|system|>\nS<|end|>\n<|user|>\nU1<|end|>\n<|assistant|>\nA1<|end|>\n
       <|user|>\nU2<|end|>\n<|assistant|>\n
   - zephyr (Zephyr; system, user, assistant in any order):
       <|system|>\nS</s>\n<|user|>\nU1</s>\n<|assistant|>\nA1</s>\n
       <|user|>\nU2</s>\n<|assistant|>\n
   (The line breaks above are for reading; \n is the text's newline.) A
   lone system message makes an empty user message of its own in llama2,
   mistral and gemma. llama2 and mistral have no assistant opening: the
   reply follows [/INST], so add_assistant_prompt changes nothing there. A
   role a family does not take, or an order its template refuses, is
   CLADE_E_INVALID_ARG naming the message. */

/* Format messages[0..n) into buf[0..capacity) (not NUL-terminated; *n_bytes
   gets the length; CLADE_BUFFER_SMALL as clade_detokenize). template_name:
   one of the names above, or NULL for the model's own template (recognized
   as above: CLADE_E_UNSUPPORTED when the model has none or it is not
   recognized; an unknown name is CLADE_E_UNSUPPORTED too). model may be
   NULL when template_name is given (BOS and EOS texts are then "<s>" and
   "</s>"). add_assistant_prompt: end with the opening of the assistant's
   reply, where the family has one. messages may be NULL when n is 0; a
   NULL role or content is CLADE_E_INVALID_ARG. buf may be NULL when
   capacity is 0. */
CLADE_API clade_status clade_chat_apply(const clade_model *model,
                                        const char *template_name,
                                        const clade_chat_message *messages,
                                        size_t n, int32_t add_assistant_prompt,
                                        char *buf, size_t capacity,
                                        size_t *n_bytes);

/* The family recognized from the model's template: *name gets its static
   name (one of the above). CLADE_E_UNSUPPORTED (its message says which)
   when the model has no template or it is not recognized; *name is then
   NULL. */
CLADE_API clade_status clade_chat_template_name(const clade_model *model,
                                                const char **name);

/* The supported names: writes min(capacity, count) static strings to
   names (may be NULL when capacity is 0) and returns the count. */
CLADE_API size_t clade_chat_template_list(const char **names,
                                          size_t capacity);

/* ---- shared-cache tree ------------------------------------------------ */

/* Flags for clade_tree_params.flags. */
#define CLADE_TREE_ALLOW_LONG_CONTEXT 1u /* accept positions at or past the
                                            model's n_ctx (for models whose
                                            RoPE scaling extends it); without
                                            it such a call is
                                            CLADE_CONTEXT_FULL */
#define CLADE_TREE_PREFIX_CACHE 2u       /* clade 1.3: a node whose last
                                            reference goes (caller, child,
                                            sequence) is kept as a cached
                                            node (n_refs 0) for
                                            clade_tree_append_prefix to
                                            match, until evicted: least
                                            recently used first, whenever
                                            an allocation would pass the
                                            KV budget (appends, decode
                                            steps, forks...), or by
                                            clade_tree_trim. Without a
                                            budget only clade_tree_trim
                                            evicts. */

typedef struct clade_tree_params {
  size_t size;            /* sizeof(clade_tree_params) */
  clade_kv_type kv_type;  /* default F16 */
  int32_t prefill_chunk;  /* tokens per forward pass in prefill; 0: 1024 */
  uint32_t flags;         /* CLADE_TREE_* flags; default 0 */
  uint64_t kv_budget;     /* bytes of KV the tree's nodes and all its caches
                             may hold together; 0 (default): no limit */
} clade_tree_params;

CLADE_API void clade_tree_params_init(clade_tree_params *params);

/* Create an empty tree (just the root, node 0, of length 0). The tree
   keeps the model alive (see clade_model_free). */
CLADE_API clade_status clade_tree_create(clade_model *model,
                                         const clade_tree_params *params,
                                         clade_tree **out);
/* Deferred, as clade_model_free: the handle must not be used again; the
   tree's nodes are released when the last cache made from it is freed
   too (at once when none is alive). Accepts NULL. */
CLADE_API void clade_tree_free(clade_tree *tree);

/* Append a node of n_tokens tokens under parent. Its tokens are evaluated
   now (prefill in passes of prefill_chunk tokens, attending to the whole
   path above it) and its KV is kept, read-only. The caller holds one reference to the new node (release it
   with clade_tree_release); sequences and child nodes hold their own.
   If logits is not NULL it receives the n_vocab logits of the node's last
   token (the distribution of the token after it). n_tokens may be 0.
   The first generated token of a sequence under the node is drawn from
   these logits (the node's last token has been evaluated; a decode step
   evaluates new tokens only): sample it, then give it to clade_cache_add
   as the sequence's first own token, or to the first clade_decode step
   (examples/simple.c does this). */
CLADE_API clade_status clade_tree_append(clade_tree *tree,
                                         clade_node_id parent,
                                         const clade_token *tokens,
                                         size_t n_tokens, float *logits,
                                         clade_node_id *out);

/* ---- batch append (prepacked prefill) ---- */

/* In a batch append, an item's parent may be the node made by an earlier
   item i of the same call: CLADE_ITEM_NODE(i). */
#define CLADE_ITEM_NODE(i) ((clade_node_id)(-2 - (int32_t)(i)))

/* One item of clade_tree_append_batch: a new tree node, or a new sequence
   of a cache with its first own tokens. */
typedef struct clade_append_item {
  size_t size;              /* sizeof(clade_append_item), by
                               clade_append_item_init; every item of a call
                               has the same size (the array's stride) */
  clade_node_id parent;     /* an existing node, or CLADE_ITEM_NODE(i) for
                               a node item i before this one; default 0 */
  const clade_token *tokens;
  size_t n_tokens;
  clade_cache *cache;       /* NULL (default): the item is a new tree node.
                               Else a cache of this tree: the item is a new
                               sequence of it under parent, its tokens the
                               sequence's first own tokens, evaluated now */
  float *logits;            /* NULL, or n_vocab floats: the logits of the
                               item's last token (to sample the first new
                               token); needs n_tokens > 0 */
  clade_node_id node;       /* out: a node item's node (the caller holds a
                               reference, as after clade_tree_append); -1
                               for a sequence item */
  clade_seq_id seq;         /* out: a sequence item's sequence; -1 for a
                               node item */
} clade_append_item;

CLADE_API void clade_append_item_init(clade_append_item *item);

/* Evaluate many prompts at once: every item's tokens, attending to the
   path above it, in forward passes of at most prefill_chunk tokens (C)
   filled by first-fit decreasing, never padded: the weight products run
   once per pass over all its tokens, items under the same parent read the
   parent's KV once for all their rows (the shared-node path of
   clade_decode), and an item longer than C is split over later passes,
   in order. An item whose parent is an earlier item goes into a pass after
   that item's last one. The caller never sees passes; the KV and logits
   are those of appending the items one at a time, to rounding.
   Atomic: on any status other than CLADE_OK (a bad parent, a token outside
   the vocabulary, a path past the context, CLADE_CACHE_FULL, the KV
   budget, an abort, no memory) no node and no sequence was added and
   every handle is as before (the items' logits buffers may have been
   written).
   Memory: besides the items' KV, the call's activations and scratch are
   bounded by C tokens, whatever the number and lengths of the items:
   about C x (4 (2 n_embd + 2 n_heads head_dim + 2 kv_heads head_dim +
   2 n_ff) + 8 + n_heads (depth + 1) (4 head_dim + 28)) bytes, where depth
   is the deepest path's number of nodes, plus 4 (n_embd + n_vocab) bytes
   per item whose logits a pass gives (at most C), up to half again as the
   buffers grow (tests/test_prefill.cpp checks it). n_items may be 0. */
CLADE_API clade_status clade_tree_append_batch(clade_tree *tree,
                                               clade_append_item *items,
                                               size_t n_items);

/* Drop the caller's reference. The node's memory is freed once no child,
   sequence or caller holds it. Releasing the root or a node already
   released by the caller is CLADE_E_STATE. */
CLADE_API clade_status clade_tree_release(clade_tree *tree,
                                          clade_node_id node);

typedef struct clade_node_info {
  size_t size;            /* sizeof(clade_node_info), set by the caller */
  clade_node_id parent;   /* -1 for the root */
  int32_t length;         /* tokens in the node */
  int32_t path_length;    /* tokens above it: its first token's position */
  int32_t n_children;
  int32_t n_refs;         /* children + sequences + caller (the root
                             also counts the tree's own reference) */
} clade_node_info;
/* clade_node_info_init(clade_node_info *) */
CLADE_DEFINE_OUT_INIT(clade_node_info)

CLADE_API clade_status clade_tree_node_info(const clade_tree *tree,
                                            clade_node_id node,
                                            clade_node_info *info);
/* Copy the node's tokens; CLADE_BUFFER_SMALL with *n_tokens = length when
   capacity is too small. */
CLADE_API clade_status clade_tree_node_tokens(const clade_tree *tree,
                                              clade_node_id node,
                                              clade_token *tokens,
                                              size_t capacity,
                                              size_t *n_tokens);
/* Bytes of KV held by all live nodes of the tree. */
CLADE_API size_t clade_tree_kv_bytes(const clade_tree *tree);

/* The live children of node, oldest first, into ids[0..capacity);
   *n_children receives their count. CLADE_BUFFER_SMALL (ids untouched)
   when capacity is too small. ids may be NULL when capacity is 0. */
CLADE_API clade_status clade_tree_children(const clade_tree *tree,
                                           clade_node_id node,
                                           clade_node_id *ids,
                                           size_t capacity,
                                           size_t *n_children);

/* KV memory budget: the bytes the tree's nodes and every cache made from
   it may hold together (clade_tree_kv_used). A call that would allocate
   past it (an append, an add, a decode step that grows a sequence, a
   fork, a promote or a move) returns CLADE_KV_BUDGET and changes nothing.
   0: no limit. Lowering it below what is held frees nothing; it only
   refuses further growth. */
CLADE_API clade_status clade_tree_set_kv_budget(clade_tree *tree,
                                                uint64_t bytes);
/* Bytes of KV held by the tree's nodes and all its caches (what the
   budget counts: allocated capacity, not only stored tokens). */
CLADE_API uint64_t clade_tree_kv_used(const clade_tree *tree);

/* Abort callback: long calls on the tree and its caches (clade_tree_append,
   clade_decode) call it between layers of each forward pass, on the thread
   running the call. A nonzero return stops the call: it returns
   CLADE_STOPPED and changes nothing (no node is added, no sequence grows).
   fn NULL removes it. user is passed back unchanged. The callback must not
   call clade functions on the same tree or its caches. */
typedef int32_t (*clade_abort_fn)(void *user);
CLADE_API clade_status clade_tree_set_abort(clade_tree *tree,
                                            clade_abort_fn fn, void *user);

/* ---- automatic prefix reuse (clade 1.3) ------------------------------- */

/* Evaluate a prompt (tokens from position 0), reusing what the tree holds:
   the deepest path from the root whose tokens equal the prompt's, token by
   token, is taken as is (its KV is not evaluated again), and only the rest
   is evaluated, as a new node under that path. The caller holds a
   reference to the new node (clade_tree_release), as after
   clade_tree_append. The prompt's last token is never matched: it is
   always evaluated, so the new node has at least one token and logits (if
   not NULL, the n_vocab logits of the last token) are always given.
   Where the prompt diverges inside a node, the node is split in two at
   that token: a new node with its first tokens (and their KV, copied, not
   evaluated) takes its place, and the old node keeps its id, children,
   sequences and references with the rest of its tokens below it
   (clade_tree_node_info shows its new parent and path_length). The new
   path is shared from then on. Among children that continue the prompt,
   the longest match wins. Works on any tree; with CLADE_TREE_PREFIX_CACHE
   released prompts stay cached for later calls.
   *n_reused (not NULL) receives the prompt tokens taken from existing
   nodes. n_tokens must be at least 1. On failure (a token outside the
   vocabulary, the context, CLADE_KV_BUDGET, CLADE_STOPPED, no memory) no
   node is added; a split already made stays (it changes no path's
   tokens, KV or logits). */
CLADE_API clade_status clade_tree_append_prefix(clade_tree *tree,
                                                const clade_token *tokens,
                                                size_t n_tokens, float *logits,
                                                clade_node_id *out,
                                                size_t *n_reused);

/* Evict cached nodes (n_refs 0, see CLADE_TREE_PREFIX_CACHE), least
   recently used first, until clade_tree_kv_used(tree) <= bytes or none is
   left. *freed (may be NULL) receives the bytes freed. A node a caller,
   child or sequence holds is never evicted. */
CLADE_API clade_status clade_tree_trim(clade_tree *tree, uint64_t bytes,
                                       uint64_t *freed);

/* ---- saved sessions (clade 1.3) ---------------------------------------- */

/* Save the path root .. node (its tokens and their KV) to the file path,
   written to a temporary file beside it and renamed over it, so a crash
   never leaves half a file. The file records the model's fingerprint (its
   configuration, tensor names, types and shapes, and a sample of each
   tensor's bytes), the backend and the KV type. CLADE_E_IO when it cannot
   be written. */
CLADE_API clade_status clade_tree_save(const clade_tree *tree,
                                       clade_node_id node, const char *path);
/* Save a sequence's whole evaluated history (its path's tokens, then its
   unique tokens; queued tokens are not saved), as clade_tree_save. The
   cache's KV type must be the tree's (CLADE_E_STATE otherwise). */
CLADE_API clade_status clade_cache_save(const clade_cache *cache,
                                        clade_seq_id seq, const char *path);
/* Load a saved file into the tree, evaluating nothing: its tokens are
   matched against the tree as clade_tree_append_prefix matches them (a
   node split where they diverge; the part the tree holds is not loaded
   again), and the rest goes, with the file's KV, into a new node under
   the match (empty when the tree held everything). *out: that node, the
   caller's reference (clade_tree_release); its path is the file's
   tokens, so the next token's logits come from a decode step of a
   sequence added under it. *n_tokens and *n_reused (each may be NULL):
   the file's tokens, and those the tree held already.
   Statuses: CLADE_E_IO (cannot read), CLADE_E_FORMAT (not a session file,
   truncated, corrupt: a checksum covers every byte), CLADE_E_UNSUPPORTED
   (a newer format), CLADE_E_MISMATCH (another model, another backend, or
   another KV type than the tree's), CLADE_E_TOKEN, CLADE_CONTEXT_FULL,
   CLADE_KV_BUDGET; on any of them the tree is as before. */
CLADE_API clade_status clade_tree_load(clade_tree *tree, const char *path,
                                       clade_node_id *out, size_t *n_tokens,
                                       size_t *n_reused);

/* ---- unique caches and decode steps ----------------------------------- */

typedef struct clade_cache_params {
  size_t size;              /* sizeof(clade_cache_params) */
  int32_t max_seqs;         /* live sequences at most; default 64 */
  int32_t max_tokens;       /* unique tokens per sequence; default 1024 */
  clade_kv_type kv_type;    /* default CLADE_KV_DEFAULT: the tree's */
  clade_attention attention;/* default AUTO */
} clade_cache_params;

CLADE_API void clade_cache_params_init(clade_cache_params *params);

/* Create unique caches for up to max_seqs sequences of the tree. Memory is
   allocated as sequences grow (in steps of an eighth, at least 16 tokens),
   up to max_tokens each. The cache keeps the tree alive (see
   clade_tree_free);
   a tree and its caches are used by one thread at a time. */
CLADE_API clade_status clade_cache_create(clade_tree *tree,
                                          const clade_cache_params *params,
                                          clade_cache **out);
/* Releases every sequence's node reference. Accepts NULL. */
CLADE_API void clade_cache_free(clade_cache *cache);

/* Flags for clade_cache_add. */
#define CLADE_SEQ_PRIVATE 1u /* copy the node path's KV into the sequence's
                                own cache (the flat baseline: nothing is
                                shared); the path comes on top of its
                                max_tokens unique tokens; the cache's
                                kv_type must be the tree's */

/* Add a sequence attached to node (the sequence holds a reference to it).
   tokens[0..n_tokens) are its own first tokens: they are queued and
   evaluated by the next step, before that step's tokens. Returns
   CLADE_CACHE_FULL (nothing added) when every slot is taken or n_tokens
   exceeds max_tokens. */
CLADE_API clade_status clade_cache_add(clade_cache *cache, clade_node_id node,
                                       const clade_token *tokens,
                                       size_t n_tokens, uint32_t flags,
                                       clade_seq_id *out);
/* Remove a sequence and release its node. */
CLADE_API clade_status clade_cache_remove(clade_cache *cache,
                                          clade_seq_id seq);
/* Cut a sequence's unique tokens back to length (<= its length); this is
   how rejected drafts are rolled back. */
CLADE_API clade_status clade_cache_truncate(clade_cache *cache,
                                            clade_seq_id seq, int32_t length);
/* Unique tokens evaluated so far (not counting queued ones). */
CLADE_API clade_status clade_cache_seq_length(const clade_cache *cache,
                                              clade_seq_id seq,
                                              int32_t *length);
/* Bytes of KV allocated by the cache. */
CLADE_API size_t clade_cache_kv_bytes(const clade_cache *cache);

/* Operations for tree search (beam search, MCTS, best-of-n with shared
   steps). Each is atomic: on any status other than CLADE_OK nothing
   changed. */

/* Fork: a new sequence under the same node as seq, with a copy of seq's
   unique KV, tokens and queued tokens (costs one copy of the unique KV,
   nothing is evaluated). CLADE_CACHE_FULL when no slot is free. */
CLADE_API clade_status clade_cache_fork(clade_cache *cache, clade_seq_id seq,
                                        clade_seq_id *out);
/* Promote: turn seq's unique tokens into a new tree node under its node
   (their KV moves into the node, nothing is evaluated), and attach seq to
   the new node with no unique tokens left. Other sequences (of any cache
   of the tree) can then attach to it or move under it and share it. The
   caller holds one reference to the new node, as after clade_tree_append.
   The sequence must have no queued tokens, must not be private, and its
   cache's KV type must be the tree's (CLADE_E_STATE otherwise). A
   sequence with no unique tokens gives an empty node. */
CLADE_API clade_status clade_cache_promote(clade_cache *cache,
                                           clade_seq_id seq,
                                           clade_node_id *out);
/* Move seq under node: node's path tokens (root to node) must be a prefix
   of seq's whole history (its path tokens, then its unique tokens), else
   CLADE_E_STATE. Unique tokens that node now covers are dropped from seq's
   cache; path tokens above seq's old node that node does not cover are
   copied into it (moving up). The positions of every token stay the same,
   so the next step's logits are as before, to rounding. The sequence must
   have no queued tokens and must not be private. CLADE_CACHE_FULL when the
   unique tokens would pass max_tokens. A move that takes node tokens into
   the sequence's own KV (up or across) needs the cache's KV type to be the
   tree's (CLADE_E_STATE otherwise). */
CLADE_API clade_status clade_cache_move(clade_cache *cache, clade_seq_id seq,
                                        clade_node_id node);
/* The node seq is attached to. */
CLADE_API clade_status clade_cache_seq_node(const clade_cache *cache,
                                            clade_seq_id seq,
                                            clade_node_id *node);
/* Copy seq's evaluated unique tokens (not the queued ones);
   CLADE_BUFFER_SMALL with *n_tokens = the count when capacity is too
   small. */
CLADE_API clade_status clade_cache_seq_tokens(const clade_cache *cache,
                                              clade_seq_id seq,
                                              clade_token *tokens,
                                              size_t capacity,
                                              size_t *n_tokens);

/* One decode step. For each i < n_seqs, sequence seq_ids[i] brings
   n_tokens[i] >= 0 new tokens (taken in order from tokens); its queued
   tokens, if any, come first. Their positions continue the sequence:
   path length + unique length. logits receives n_vocab floats per row,
   one row per sequence (the distribution after its last token; a sequence
   with no tokens at all gives no row) unless all_logits is set, in which
   case one row per evaluated token, in order. logits_rows is the capacity
   in rows (too few: CLADE_BUFFER_SMALL, nothing changed). If there is no
   room for a sequence's tokens, returns CLADE_CACHE_FULL and changes
   nothing; on an error nothing is changed either. logits may be NULL.
   Each sequence's step attends to every tree node on its path and to its
   own tokens; nodes shared by several sequences of the step are attended
   once for all of them when the cost model says that pays (the cache's
   attention setting). The batch's arrays are only read during the call.
   (clade 1.4) argmax, when not NULL, receives each logits row's greedy
   token: its highest logit, the lowest token id among equal ones (NaN
   logits are passed over; a row with no logit above -inf gives -1). It is
   found where the logits are: on the CUDA backend only these tokens come
   back from the device, not the n_vocab floats per row. logits may be
   NULL then; logits_rows is argmax's capacity too. This is
   clade_sample's choice at temperature 0 with no logit bias or penalty
   (which refuses a row holding a NaN or +INFINITY). */
typedef struct clade_batch {
  size_t size;              /* sizeof(clade_batch) */
  size_t n_seqs;
  const clade_seq_id *seq_ids;
  const int32_t *n_tokens;
  const clade_token *tokens;
  int32_t all_logits;
  float *logits;
  size_t logits_rows;
  clade_token *argmax;      /* (clade 1.4) NULL (default) or [logits_rows] */
} clade_batch;

CLADE_API void clade_batch_init(clade_batch *batch);
CLADE_API clade_status clade_decode(clade_cache *cache,
                                    const clade_batch *batch);

/* ---- sampler ---------------------------------------------------------- */

/* The sampling pipeline. Each call runs these stages, in this order, on the
   row's logits (the caller's row is never written):
   0. (clade 1.5, the generation calls) grammar mask: for a sequence under
      a grammar (clade_generate_params.grammars), every token the grammar
      refuses at this point gets logit -INFINITY, before any other stage
      (an end-of-generation token is allowed only where the grammar may
      end). A caller with its own loop applies clade_matcher_fill_mask the
      same way to the row it passes to clade_sample;
   1. logit bias: bias added to its token's logit (a token listed twice gets
      the sum; -INFINITY bans a token);
   2. repetition penalty: each distinct token of the counted history has its
      logit divided by repeat_penalty when positive, else multiplied by it;
   3. presence and frequency penalties: each token of the counted history
      loses presence_penalty once and frequency_penalty times its count in
      the counted history (negative values favour repeats). The counted
      history is the whole history when penalize_prompt is
      nonzero (the default), else history[n_prompt..n_history) only: the
      tokens generated after the prompt. clade_sample passes n_prompt 0.
   4. temperature: logits divided by it; 0 is greedy: the highest logit
      (the lowest token id among equal ones) is taken and the stages below
      are skipped (no random number is used); so is a temperature whose
      inverse is past FLT_MAX (below about 2.9e-39), greedy's limit;
   5. top-k: the k highest logits are kept (ties: lower token id first; a
      k above the vocabulary keeps every token); p = softmax over them;
   6. top-p: the shortest prefix (by p, ties lower id first) whose mass
      reaches top_p is kept; top_p 1 keeps every candidate and its smallest
      value (just above 0) keeps one token;
   7. min-p: tokens with p < min_p * the top p are dropped (top-p and min-p
      both read the p of stage 5, so the two keep the shorter prefix);
   8. draw: one uniform number of the stream picks a kept token with
      probability p / (the kept tokens' mass).
   A logit of -INFINITY is a token that cannot be drawn; a NaN or +INFINITY
   logit, or a row whose every logit is -INFINITY after stage 3, is
   CLADE_E_INVALID_ARG.
   Log-probabilities (clade_sample_result) are natural logs of the
   distribution the draw is made from: stage 8's, after every stage above
   (temperature and truncation included, renormalized over the kept tokens;
   a token not kept has none). Greedy's distribution is the chosen token
   with probability 1 (log-probability 0). */
typedef struct clade_logit_bias {
  clade_token token; /* in [0, n_vocab) of the rows sampled */
  float bias;        /* added to the token's logit (NaN, +inf: refused) */
} clade_logit_bias;

/* Defaults, the library's (clade_sampler_params_init) beside the CLI's
   and the server's (a request's fields, OpenAI's defaults):
     field               init    clade generate  clade chat  clade serve
     temperature         0.8     0 (greedy)      0.8         1.0
     top_k               40      40              40          0 (off)
     top_p               0.95    0.95            0.95        1.0 (off)
     min_p               0.05    0.05            0.05        0 (off)
     repeat_penalty      1 (off) 1               1           1
     presence/frequency  0       0               0           0
     seed                0       0               0           random */
typedef struct clade_sampler_params {
  size_t size;        /* sizeof(clade_sampler_params) */
  float temperature;  /* 0: greedy (default 0.8); >= 0, finite */
  int32_t top_k;      /* 0: off (default 40); >= 0 */
  float top_p;        /* 1: off (default 0.95); in (0, 1] */
  float min_p;        /* 0: off (default 0.05); in [0, 1] */
  float repeat_penalty; /* 1: off (default); > 0, finite */
  uint64_t seed;      /* default 0 */
  float presence_penalty;  /* 0: off (default) */
  float frequency_penalty; /* 0: off (default) */
  /* n_logit_bias (token, bias) pairs, copied by clade_sampler_create (the
     array may go after it); NULL and 0 by default. A negative token is
     CLADE_E_TOKEN at create, one at or past a row's n_vocab at sampling. */
  const clade_logit_bias *logit_bias;
  size_t n_logit_bias;
  int32_t penalize_prompt; /* nonzero (default 1): the prompt's tokens count
                              for the penalties; 0: only the history past
                              n_prompt (clade_sample_ex, clade_sample_batch) */
  int32_t n_threads; /* threads sampling the rows of a clade_sample_batch
                        call, the sampler's own (made at create); 0
                        (default) or 1: the caller's only. Results are the
                        same for any number. */
} clade_sampler_params;

CLADE_API void clade_sampler_params_init(clade_sampler_params *params);
CLADE_API clade_status clade_sampler_create(const clade_sampler_params *p,
                                            clade_sampler **out);
CLADE_API void clade_sampler_free(clade_sampler *sampler);

/* Sample a token from n_vocab logits for stream `stream` (each stream has
   its own random state, derived from the seed and the stream number, so
   results do not depend on the order sequences are sampled in; the sampler
   keeps a few dozen bytes of state per stream it has seen, until
   clade_sampler_forget or clade_sampler_free).
   history (may be NULL) feeds the penalties; a history token
   outside [0, n_vocab) is CLADE_E_TOKEN. */
CLADE_API clade_status clade_sample(clade_sampler *sampler, uint64_t stream,
                                    const float *logits, int32_t n_vocab,
                                    const clade_token *history,
                                    size_t n_history, clade_token *out);

/* What a sample gives back. Caller-sized (Conventions): the caller sets
   size = sizeof(clade_sample_result) and the in fields; the library fills
   the out fields. */
typedef struct clade_sample_result {
  size_t size;
  clade_token *top_tokens;  /* in: room for top_capacity tokens, or NULL */
  float *top_logprobs;      /* in: room for top_capacity floats, or NULL */
  size_t top_capacity;      /* in: alternatives wanted (0: none) */
  size_t n_top;             /* out: alternatives written: the most likely
                               kept tokens, most likely first (ties: lower
                               id first), chosen token included, at most
                               top_capacity and the number kept */
  clade_token token;        /* out: the token drawn */
  float logprob;            /* out: its log-probability (see above) */
} clade_sample_result;
/* clade_sample_result_init(clade_sample_result *) */
CLADE_DEFINE_OUT_INIT(clade_sample_result)

/* clade_sample, plus n_prompt (how many leading tokens of history are the
   prompt, for penalize_prompt 0; at most n_history) and the result. */
CLADE_API clade_status clade_sample_ex(clade_sampler *sampler, uint64_t stream,
                                       const float *logits, int32_t n_vocab,
                                       const clade_token *history,
                                       size_t n_history, size_t n_prompt,
                                       clade_sample_result *result);

/* n_rows rows in one call: row r's logits are logits[r * n_vocab ..] (as
   clade_decode writes them), drawn on stream streams[r] with history
   histories[r] (n_histories[r] tokens, the first n_prompts[r] the prompt).
   histories may be NULL (no history for any row; then n_histories may be
   NULL), a histories[r] may be NULL when n_histories[r] is 0, n_prompts
   may be NULL (0 for every row). results: n_rows structs whose size fields
   are all the caller's sizeof(clade_sample_result), the array's stride.
   Rows are sampled in order, each exactly as clade_sample_ex would: a
   row's draw depends only on the seed, its stream and how many draws that
   stream has had, never on the other rows (two rows of one stream draw in
   row order). On an error no row is drawn and no stream advances. */
CLADE_API clade_status clade_sample_batch(clade_sampler *sampler, size_t n_rows,
                                          const float *logits, int32_t n_vocab,
                                          const uint64_t *streams,
                                          const clade_token *const *histories,
                                          const size_t *n_histories,
                                          const size_t *n_prompts,
                                          clade_sample_result *results);
/* Forget stream's random state (a stream that has ended) and release its
   memory; a later clade_sample on that stream number starts as with a new
   sampler. A stream never sampled is fine. */
CLADE_API clade_status clade_sampler_forget(clade_sampler *sampler,
                                            uint64_t stream);

/* ---- grammars: structured output (clade 1.5) -------------------------- */
/* A grammar constrains what a sequence may say: GBNF (llama.cpp's syntax,
   root rule `root`), a JSON Schema (draft 2020-12: the keywords it
   enforces are listed in docs/api.md; any other keyword is an error naming
   it and its JSON pointer, unless lenient), a regular expression (matched
   as a whole) or any JSON value. It is compiled once for a model's
   vocabulary (compiled grammars are cached by text and vocabulary, so a
   second create of the same grammar is cheap).
   Threads: a clade_grammar is immutable once made; any number of threads
   and calls may use one at once (generation calls, matchers). A
   clade_matcher is used by one thread at a time.
   In clade_generate and clade_generate_speculative, a constrained
   sequence's rows are masked (sampling stage 0), each token taken
   advances its matcher, an end-of-generation token is allowed only where
   the grammar may end, and the sequence finishes (CLADE_FINISH_STOP_TOKEN)
   as soon as the grammar admits no continuation. On the CPU backend a
   step without drafts takes the masks into the step's top-k (greedy: top
   1), which gives the tokens whole masked rows give; elsewhere constrained
   steps read whole rows. Stop tokens and stop strings still apply.
   Speculative decoding: a draft (chain or token tree) keeps the first
   token the grammar refuses on each path, as a candidate verification
   rejects (the rule's residual keeps sampling exact), and loses what lies
   below it; each verified row is masked for the state after the accepted
   tokens before it, and the accepted path advances the matcher.
   Jump-forward (jump_forward, default on; the environment variable
   CLADE_GRAMMAR_NO_JUMP=1 turns it off everywhere): where the grammar
   admits exactly one continuation (an object's next key, punctuation, a
   const), right after a token is taken those bytes are tokenized
   canonically (the model's tokenizer on the forced text alone: no BOS,
   SPM's leading-space marker taken off) and, when those tokens' bytes are
   exactly the forced bytes (else there is no jump for that stretch),
   appended to the output at once: streamed, with log-probability 0, and
   evaluated together in the sequence's next decode step (one packed step,
   only the last one's logits used). Such output is the same kind of text,
   not always the same tokens, as without the jump. */
typedef enum clade_grammar_kind {
  CLADE_GRAMMAR_GBNF = 0,        /* GBNF text */
  CLADE_GRAMMAR_JSON_SCHEMA = 1, /* JSON Schema text */
  CLADE_GRAMMAR_REGEX = 2,       /* a regular expression */
  CLADE_GRAMMAR_JSON = 3         /* any JSON value (the text is ignored) */
} clade_grammar_kind;

typedef struct clade_grammar_params {
  size_t size;             /* sizeof(clade_grammar_params) */
  clade_grammar_kind kind; /* default CLADE_GRAMMAR_GBNF */
  int32_t lenient;         /* JSON Schema: nonzero ignores keywords that
                              cannot be enforced (default 0: an error) */
  int32_t free_whitespace; /* JSON: nonzero allows whitespace between
                              tokens (default 0: compact JSON only) */
  int32_t jump_forward;    /* nonzero (default 1): jump-forward (above) */
} clade_grammar_params;

CLADE_API void clade_grammar_params_init(clade_grammar_params *params);
/* Compile text[0..len) (UTF-8; params NULL: the defaults, GBNF) for the
   model's vocabulary (a model without a tokenizer: CLADE_E_UNSUPPORTED).
   A grammar that does not compile is CLADE_E_INVALID_ARG with
   clade_last_error naming the keyword and its JSON pointer, the regex
   column or the GBNF line:column. The grammar does not keep the model. */
CLADE_API clade_status clade_grammar_create(const clade_model *model,
                                            const char *text, size_t len,
                                            const clade_grammar_params *params,
                                            clade_grammar **out);
/* Matchers made from the grammar keep it alive; a generation uses it only
   during the call. Accepts NULL. */
CLADE_API void clade_grammar_free(clade_grammar *grammar);

/* A grammar's state for a caller's own loop: tokens in, the mask of the
   next token out. It keeps its grammar alive (free either first). */
CLADE_API clade_status clade_matcher_create(const clade_grammar *grammar,
                                            clade_matcher **out);
/* Accepts NULL. */
CLADE_API void clade_matcher_free(clade_matcher *matcher);
/* Take n tokens, all or nothing: CLADE_E_INVALID_ARG (and no change) when
   the grammar refuses one of them, naming which. An end-of-generation
   token is taken only where the grammar may end, and ends the matcher. */
CLADE_API clade_status clade_matcher_accept(clade_matcher *matcher,
                                            const clade_token *tokens,
                                            size_t n);
/* The mask of the next token: bit t of bits[t / 32] set when token t is
   allowed. n_words at least (n_vocab + 31) / 32 of the grammar's
   vocabulary (else CLADE_BUFFER_SMALL); that many words are written. */
CLADE_API clade_status clade_matcher_fill_mask(clade_matcher *matcher,
                                               uint32_t *bits, size_t n_words);
/* Undo the last n accepted tokens (the last 1024 are kept; more:
   CLADE_E_INVALID_ARG and no change). */
CLADE_API clade_status clade_matcher_rollback(clade_matcher *matcher,
                                              size_t n_tokens);
/* 1 when the grammar admits no continuation (the text is complete, or an
   end-of-generation token was taken), else 0 (also for NULL). */
CLADE_API int32_t clade_matcher_is_complete(const clade_matcher *matcher);
/* 1 when the text so far is a whole sentence of the grammar (it may end
   here), else 0. */
CLADE_API int32_t clade_matcher_can_end(const clade_matcher *matcher);
/* The bytes the grammar forces next (jump-forward's text; empty when
   there is a choice): *len gets their count; CLADE_BUFFER_SMALL when more
   than cap. Not NUL-terminated. */
CLADE_API clade_status clade_matcher_forced_text(const clade_matcher *matcher,
                                                 char *buf, size_t cap,
                                                 size_t *len);

/* ---- generation (the whole loop in one call) ------------------------- */

/* One prompt of clade_generate: tokens under a parent. Prompts form a tree
   (levels of siblings: a few-shot prefix, questions under it, ...): parent
   is -1 for a prompt directly under the call's root node
   (clade_generate_params.root), else the index of an earlier prompt of the
   same array. A list of independent prompts is every parent -1. A leaf (a
   prompt that no prompt names as its parent) must have at least one token;
   inner prompts may be empty. This struct never grows. */
typedef struct clade_prompt {
  const clade_token *tokens;
  size_t n_tokens;
  int32_t parent;
} clade_prompt;

/* Return values of a clade_generate_fn. */
#define CLADE_GENERATE_CONTINUE 0
#define CLADE_GENERATE_STOP_SEQ 1 /* finish this sequence (reason callback) */
#define CLADE_GENERATE_STOP_ALL 2 /* finish every sequence: clade_generate
                                     returns CLADE_STOPPED, with results */

/* Streaming callback, on the thread running clade_generate. Called once for
   each token added to sequence `seq`'s output (token >= 0), with the text
   that token releases (text[0..len), not NUL-terminated, valid during the
   call; often empty: a UTF-8 character still incomplete, or text held back
   because it may begin a stop string). After a sequence's last token, one
   final call with token -1 and the rest of its text (possibly empty); its
   return value is ignored. Every sequence gets exactly one final call, a
   sequence stopped before its first token included. The pieces of a
   sequence, in order, make exactly its result's text. Returns
   CLADE_GENERATE_CONTINUE, _STOP_SEQ or _STOP_ALL (other values: continue).
   It must not call clade functions on the tree or the model's handles that
   the call uses. */
typedef int32_t (*clade_generate_fn)(void *user, size_t seq, clade_token token,
                                     const char *text, size_t len);

typedef struct clade_generate_params {
  size_t size;               /* sizeof(clade_generate_params) */
  int32_t max_new_tokens;    /* per sequence, >= 1; default 128 */
  int32_t n_samples;         /* sequences under each leaf prompt; default 1 */
  int32_t ignore_eog;        /* 0 (default): the model's end-of-generation
                                tokens (clade_token_is_eog) stop a sequence;
                                nonzero: they do not */
  int32_t max_live;  /* sequences decoded at once (the cache's slots); the
                        others wait and are admitted, in order, as
                        sequences finish; 0 (default): all at once */
  const clade_token *stop_tokens; /* more token ids that stop a sequence; */
  size_t n_stop_tokens;           /* NULL and 0 by default */
  /* Stop strings: NUL-terminated UTF-8, not empty. Matched on the
     detokenized text, across token boundaries; the text is cut before the
     earliest match and the stop string is never streamed. Needs a model
     with a tokenizer (else CLADE_E_UNSUPPORTED). Copied during the call. */
  const char *const *stop_strings;
  size_t n_stop_strings;
  const clade_sampler_params *sampler; /* NULL (default): the defaults of
                                          clade_sampler_params_init. Greedy
                                          with no logit bias or penalty
                                          (clade 1.4): each step's tokens
                                          come from clade_batch.argmax, not
                                          from the logits (the same tokens;
                                          a NaN logit is passed over, not
                                          refused). Top-k below the
                                          vocabulary, at most 4096 (1024
                                          on the GPU), with no logit bias or
                                          penalty: steps without drafts
                                          sample from their rows' top-k
                                          logits, found where the logits
                                          are (the same results) */
  clade_generate_fn callback; /* NULL (default): no streaming */
  void *user;                 /* passed to callback unchanged */
  clade_attention attention;  /* the call's cache's (clade_cache_params);
                                 default AUTO */
  int32_t logprobs;  /* nonzero: keep each output token's log-probability
                        (clade_sample_result.logprob); default 0 */
  int32_t special;   /* nonzero: control tokens render as their text */
  clade_node_id root; /* prompts with parent -1 go under this node of the
                         tree (its KV is reused); default 0, the root */
  uint64_t first_stream; /* sequence i draws on stream first_stream + i;
                            default 0 */
  int32_t top_logprobs;  /* (clade 1.2) 0..20: also keep, for each output
                            token, this many of its row's most likely kept
                            tokens and their log-probabilities
                            (clade_sample_result's top: after every stage,
                            most likely first; greedy keeps one);
                            clade_generation_top. Default 0 */
  /* (clade 1.5) Grammars (structured output): grammars[i] constrains the
     sequences under prompt i (a leaf: its n_samples sequences); a NULL
     entry, or i at or past n_grammars, leaves them unconstrained. NULL and
     0 by default. Each grammar must have been made for a model of this
     tree's vocabulary. See "grammars" above for what a constrained
     sequence does; the grammars are not copied and must live through the
     call. */
  const clade_grammar *const *grammars;
  size_t n_grammars;
} clade_generate_params;

CLADE_API void clade_generate_params_init(clade_generate_params *params);

/* Why a sequence ended. */
typedef enum clade_finish_reason {
  CLADE_FINISH_NONE = 0,        /* (an index out of range) */
  CLADE_FINISH_STOP_TOKEN = 1,  /* an end-of-generation or stop token
                                   (not part of the output) */
  CLADE_FINISH_STOP_STRING = 2, /* a stop string (cut from the text; its
                                   tokens are in the output) */
  CLADE_FINISH_LENGTH = 3,      /* max_new_tokens, or the context's end */
  CLADE_FINISH_CALLBACK = 4,    /* the callback stopped it (or all) */
  CLADE_FINISH_ABORTED = 5      /* the tree's abort callback stopped all */
} clade_finish_reason;

/* Results of clade_generate, owned by the handle: every pointer its
   accessors return stays valid until clade_generation_free. */
typedef struct clade_generation clade_generation;

/* Generate from a tree of prompts, n_samples sequences under each leaf.
   The prompts are evaluated by one clade_tree_append_batch (under
   params->root), each sequence's first token is drawn from its leaf's
   logits, and the rest by decode steps of a cache made for the call, in
   which a finished sequence is removed at once (later steps compute only
   live sequences; waiting ones take its slot). Sequences are numbered
   leaf by leaf, in prompt order, n_samples each: sequence
   leaf_rank * n_samples + s. Sequence i draws on stream first_stream + i
   of a sampler made from params->sampler, its penalties seeing the
   prompt path as the prompt: so its tokens depend only on the seed, its
   stream and its prompt path, never on the other sequences, max_live or
   the thread count (the CPU backend gives a row the same logits in any
   batch and with any thread count: tests/test_generate.cpp checks it; a
   backend that does not could flip a near tie).
   Returns CLADE_OK, or CLADE_STOPPED when the callback returned
   CLADE_GENERATE_STOP_ALL or the tree's abort callback stopped a step;
   either way *out receives the results. Any other status (a bad argument,
   a prompt token outside the vocabulary, CLADE_CONTEXT_FULL for a prompt,
   CLADE_KV_BUDGET, no memory) leaves *out NULL; the callback may have been
   called before a failure in a later step. The tree is left as before the
   call: the prompts' nodes are released at its end (nodes above root
   stay). params NULL: the defaults. */
CLADE_API clade_status clade_generate(clade_tree *tree,
                                      const clade_prompt *prompts,
                                      size_t n_prompts,
                                      const clade_generate_params *params,
                                      clade_generation **out);
/* Accepts NULL. */
CLADE_API void clade_generation_free(clade_generation *gen);
/* Number of sequences (0 for NULL). */
CLADE_API size_t clade_generation_count(const clade_generation *gen);
/* Sequence i's text, NUL-terminated (*len, if not NULL, gets its length in
   bytes); NULL for a bad gen or i. */
CLADE_API const char *clade_generation_text(const clade_generation *gen,
                                            size_t i, size_t *len);
/* Sequence i's output tokens (*n_tokens gets the count); NULL when there
   are none or gen or i is bad. */
CLADE_API const clade_token *clade_generation_tokens(
    const clade_generation *gen, size_t i, size_t *n_tokens);
/* The log-probability of each output token (as many as the tokens), or
   NULL when params.logprobs was 0 (or there are none). */
CLADE_API const float *clade_generation_logprobs(const clade_generation *gen,
                                                 size_t i);
CLADE_API clade_finish_reason clade_generation_finish(
    const clade_generation *gen, size_t i);
/* (clade 1.2) Sequence i's top alternatives (params.top_logprobs): the
   tokens, [n_tokens][*per_token] row by row, and in *logprobs (if not
   NULL) their log-probabilities in the same layout; a row with fewer kept
   tokens than per_token ends with token -1 and -INFINITY. NULL (and
   *per_token 0) when params.top_logprobs was 0, or for a bad gen or i. */
CLADE_API const clade_token *clade_generation_top(const clade_generation *gen,
                                                  size_t i,
                                                  const float **logprobs,
                                                  size_t *per_token);
/* The index (into the prompts array) of sequence i's leaf prompt; -1 for a
   bad gen or i. */
CLADE_API int64_t clade_generation_prompt(const clade_generation *gen,
                                          size_t i);

/* ---- speculative decoding (clade 1.1) -------------------------------- */
/* clade_generate_speculative runs clade_generate's loop with drafts: each
   step, a drafter proposes up to k tokens after each live sequence's
   history; one decode step evaluates every sequence's next token and its
   drafts together; the sampler's rows are then walked in order. Greedy
   (temperature 0): a draft token is accepted while it equals the token
   plain decoding would pick. Sampling: draft token x, proposed with
   probability q(x) (1 for a drafter without probabilities: prompt lookup
   and caller drafters), is accepted with probability min(1, p(x) / q(x)),
   p being the sampler's distribution of that row (after every stage); on a
   rejection the token comes from max(0, p - q) normalized, so the output
   follows the target's distribution exactly. After the last accepted
   draft the row's own token is drawn as usual. The KV of rejected drafts
   is truncated away. Greedy output is token for token that of
   clade_generate; sampled output has the same distribution, not the same
   draws (the random numbers are used differently).
   Adaptive: per sequence the draft length follows the measured
   acceptance, and a cost model built from the call's own measured step
   times (target steps against batch and tokens, draft steps) picks the
   length that maximises predicted tokens per second, 0 (plain steps) when
   drafting cannot pay, as at large batches on a compute-bound CPU. */

/* One sequence's request to a drafter. clade fills the inputs; the drafter
   writes tokens and n_tokens. The struct may grow (size says how much
   of it clade filled). */
typedef struct clade_draft_request {
  size_t size;                /* sizeof(clade_draft_request) of the library */
  uint64_t seq;               /* the sequence's number in clade_generate */
  const clade_token *history; /* its prompt path, then its output so far;
                                 the last token is the one the step
                                 evaluates: drafts continue after it */
  size_t n_history;
  size_t n_prompt;            /* leading history tokens of the prompt */
  int32_t max_tokens;         /* at most this many (>= 1) */
  clade_token *tokens;        /* out: the draft chain, tokens[0..n_tokens) */
  int32_t n_tokens;           /* out: 0..max_tokens; 0: no draft */
  /* clade 1.2: token trees. */
  int32_t *parents;           /* out: parents[j] of draft token j: -1 (it
                                 follows the history) or an earlier draft
                                 token's index; preset to j - 1 (a chain),
                                 so a chain drafter leaves it alone */
  int32_t tree_width;         /* the call's tree_width: children per token
                                 at most (1: chains only) */
} clade_draft_request;

/* Request i of a drafter's array: the array's stride is the library's
   sizeof(clade_draft_request), which requests->size gives (a later
   release may grow the struct), so index it with this macro, not with
   requests[i]. */
#define CLADE_DRAFT_REQUEST_AT(requests, i)                \
  ((clade_draft_request *)(void *)((char *)(requests) +    \
                                   (size_t)(i) * (requests)->size))

/* A drafter of the caller's: fill each request (all live sequences of a
   step come in one call, so a batched drafter drafts them together; index
   them with CLADE_DRAFT_REQUEST_AT).
   Return 0, or a negative value to fail clade_generate_speculative with
   CLADE_E_INVALID_ARG ("the drafter returned ..."). Tokens outside the
   vocabulary give CLADE_E_TOKEN, n_tokens outside 0..max_tokens
   CLADE_E_INVALID_ARG; either way the call fails cleanly (the tree is as
   before it, every handle usable). Runs on the calling thread; it must not
   use the call's tree or caches. */
typedef int32_t (*clade_draft_fn)(void *user, clade_draft_request *requests,
                                  size_t n_requests);

typedef struct clade_speculative_params {
  size_t size;               /* sizeof(clade_speculative_params) */
  /* The drafter: exactly one of these three. */
  clade_draft_fn draft;      /* a drafter of the caller's, with user */
  void *user;
  clade_model *draft_model;  /* a draft model with the same vocabulary: it
                                keeps its own tree (the prompts' nodes
                                mirrored, so it shares prefixes too) and
                                drafts every live sequence in one step;
                                samples with the call's sampler settings */
  int32_t lookup_ngram;      /* prompt lookup: the longest n-gram (<= this,
                                1..64) ending the history found earlier in
                                it, its continuation drafted; 0: off */
  int32_t max_draft;         /* draft tokens per sequence per step, at most;
                                1..64, default 8 */
  int32_t adaptive;          /* 1 (default): draft lengths and on/off follow
                                acceptance and the measured cost model; 0:
                                always max_draft */
  int32_t reserved;          /* (clade 1.2) zero */
  int32_t tree_width;        /* (clade 1.2) token trees: children per draft
                                token at most, 1..8; 1 (default): chains. A
                                tree of max_draft tokens (at most 63) puts
                                alternatives beside the likeliest chain:
                                the draft model's next likeliest tokens
                                (greedy: the nodes of highest path
                                probability; sampling: width - 1 more
                                independent draws at the first steps),
                                prompt lookup's continuations of several
                                earlier occurrences, or the caller's
                                drafter's parents. One step verifies the
                                whole tree (clade_decode_tree). */
} clade_speculative_params;

CLADE_API void clade_speculative_params_init(clade_speculative_params *p);

/* clade_generate with drafts: the same prompts, parameters, results and
   statuses (see there), plus spec (not NULL) for the drafter. The draft
   model, like the tree, must not be freed during the call. */
CLADE_API clade_status clade_generate_speculative(
    clade_tree *tree, const clade_prompt *prompts, size_t n_prompts,
    const clade_generate_params *params, const clade_speculative_params *spec,
    clade_generation **out);

/* Counters of a generation (both calls fill them). */
typedef struct clade_generation_stats {
  size_t size;             /* sizeof(clade_generation_stats), set by caller */
  uint64_t steps;          /* target decode steps */
  uint64_t spec_steps;     /* of them, steps that verified drafts */
  uint64_t tokens;         /* output tokens */
  uint64_t drafted;        /* draft tokens proposed */
  uint64_t accepted;       /* draft tokens accepted */
  uint64_t draft_steps;    /* draft model decode steps */
  double target_seconds;   /* time in target decode steps */
  double draft_seconds;    /* time drafting (draft model steps, lookup,
                              the caller's drafter) */
} clade_generation_stats;
/* clade_generation_stats_init(clade_generation_stats *) */
CLADE_DEFINE_OUT_INIT(clade_generation_stats)

CLADE_API clade_status clade_generation_get_stats(
    const clade_generation *gen, clade_generation_stats *stats);

/* ---- token trees (clade 1.2) ------------------------------------------ */
/* One decode step in which a sequence evaluates a tree of tokens instead
   of a chain: several continuations of its history at once, as a
   speculative decoder verifies a tree of drafts. parents has one entry per
   batch token (in batch order): for token j of sequence i's n_tokens[i],
   -1 (it follows the sequence's history and queued tokens) or the index
   (< j) of its parent among that sequence's tokens of this batch. Each
   token attends to the history and to its ancestors in the tree only, at
   position (history length) + its depth; a sequence whose parents are
   0, 1, .. j-1 (a chain) is evaluated exactly as clade_decode would. A
   tree holds at most 64 tokens (CLADE_E_INVALID_ARG). The tokens take the
   sequence's next slots in batch order; after the step, clade_cache_keep
   keeps one root-to-node path (clade_cache_truncate keeps a prefix of the
   slots). parents NULL: clade_decode. Everything else as clade_decode. */
CLADE_API clade_status clade_decode_tree(clade_cache *cache,
                                         const clade_batch *batch,
                                         const int32_t *parents);
/* Keep sequence seq's unique tokens [0, from) and the tokens at from +
   keep[0..n_keep) (strictly increasing, each inside the sequence), moved
   down in that order; drop the rest. After a tree step of a sequence of
   length L, from = L and keep = the accepted path's batch indices leaves
   the sequence as if only that path had been decoded. */
CLADE_API clade_status clade_cache_keep(clade_cache *cache, clade_seq_id seq,
                                        int32_t from, const int32_t *keep,
                                        size_t n_keep);

/* ---- experimental ----------------------------------------------------- */
/* Calls still moving, outside the ABI promise (zstd's way): they may change
   or go in any release. Declared only when CLADE_EXPERIMENTAL is defined
   before including this header; their symbols are exported under the
   version node CLADE_EXPERIMENTAL, never CLADE_1. */
#ifdef CLADE_EXPERIMENTAL

/* Counters of a cache since its creation. */
typedef struct clade_cache_stats {
  size_t size;              /* sizeof(clade_cache_stats), set by the caller */
  uint64_t steps;           /* clade_decode calls that evaluated tokens */
  uint64_t passes;          /* forward passes they ran */
  uint64_t plans;           /* attention plans built (one per pass) */
  uint64_t workspace_grows; /* times a step's workspaces had to grow */
  int32_t last_shared;      /* spans of the last pass attended once for all
                               their rows, and */
  int32_t last_flat;        /* spans each sequence read itself */
} clade_cache_stats;
/* clade_cache_stats_init(clade_cache_stats *) */
CLADE_DEFINE_OUT_INIT(clade_cache_stats)

CLADE_API clade_status clade_cache_get_stats(const clade_cache *cache,
                                             clade_cache_stats *stats);

/* Counters of a tree's own passes (appends) since its creation. */
typedef struct clade_tree_stats {
  size_t size;              /* sizeof(clade_tree_stats), set by the caller */
  uint64_t passes;          /* forward passes of appends */
  uint64_t tokens;          /* tokens they evaluated */
  uint64_t workspace_bytes; /* bytes of the tree's pass workspaces now
                               (activations, plan arrays, logits; grown to
                               the largest pass so far, never shrunk) */
  uint64_t shared_spans;    /* over all passes: node spans attended once for
                               all their rows (the shared-node path), and */
  uint64_t flat_spans;      /* spans each item read itself */
  /* automatic prefix reuse (clade_tree_append_prefix): */
  uint64_t reused_tokens;   /* prompt tokens taken from existing nodes */
  uint64_t evictions;       /* cached nodes evicted */
  uint64_t cached_nodes;    /* cached nodes now (n_refs 0), and */
  uint64_t cached_bytes;    /* the KV bytes they hold */
} clade_tree_stats;
/* clade_tree_stats_init(clade_tree_stats *) */
CLADE_DEFINE_OUT_INIT(clade_tree_stats)

CLADE_API clade_status clade_tree_get_stats(const clade_tree *tree,
                                            clade_tree_stats *stats);

/* A backend's device ceilings, measured now (a second or two on a GPU), for
   rooflines set against steps measured in the same run: a device-to-device
   copy of 1 GiB (bytes read plus bytes written per second: the memory's
   bandwidth) and an 8192^3 product of random F16 matrices with fp32
   accumulation (FLOP per second: the tensor cores' peak), each the median
   of 10 timed runs after 3 warm-ups. CLADE_BACKEND_CPU has no device:
   CLADE_E_UNSUPPORTED (`clade bench machine` measures the CPU). A backend
   that cannot be made (no CUDA plugin, runtime or device) gives the status
   and message clade_model_load would. The call makes a backend of its own
   and frees it before returning (about 2.5 GiB of device memory while it
   runs); any thread may call it, but other work on the device meanwhile
   lowers the figures. */
typedef struct clade_device_peaks {
  size_t size;             /* sizeof(clade_device_peaks), set by the caller */
  char device[128];        /* the device's name */
  double copy_bytes_per_s; /* read + written */
  double f16_flop_per_s;
} clade_device_peaks;
/* clade_device_peaks_init(clade_device_peaks *) */
CLADE_DEFINE_OUT_INIT(clade_device_peaks)

CLADE_API clade_status clade_backend_measure_peaks(clade_backend backend,
                                                   clade_device_peaks *peaks);

#endif /* CLADE_EXPERIMENTAL */

#ifdef __cplusplus
}
#endif

#endif /* CLADE_CLADE_H */
