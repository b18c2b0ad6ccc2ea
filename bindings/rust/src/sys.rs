//! Raw declarations of include/clade/clade.h, one to one: `#[repr(C)]`
//! structs, the status and enum constants, and the `extern "C"` functions.
//! Everything here is unsafe to call; the safe layer is in lib.rs.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_void};

// ---- version ---------------------------------------------------------------

pub const CLADE_VERSION_MAJOR: c_int = 1;
pub const CLADE_VERSION_MINOR: c_int = 5;
pub const CLADE_VERSION_PATCH: c_int = 0;
pub const CLADE_VERSION_NUMBER: c_int =
    CLADE_VERSION_MAJOR * 10000 + CLADE_VERSION_MINOR * 100 + CLADE_VERSION_PATCH;
pub const CLADE_VERSION_STRING: &str = "1.5.0";
/// The shared library's soname is libclade.so.CLADE_ABI_MAJOR.
pub const CLADE_ABI_MAJOR: c_int = 1;

// ---- opaque handles --------------------------------------------------------

macro_rules! opaque {
    ($($name:ident),*) => {$(
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
            _not_send_sync: std::marker::PhantomData<(*mut u8, std::marker::PhantomPinned)>,
        }
    )*};
}
opaque!(clade_model, clade_tree, clade_cache, clade_sampler, clade_detokenizer);

pub type clade_node_id = i32;
pub type clade_seq_id = i32;
pub type clade_token = i32;

// ---- status codes ----------------------------------------------------------

pub type clade_status = c_int;
pub const CLADE_OK: clade_status = 0;
pub const CLADE_CACHE_FULL: clade_status = 1;
pub const CLADE_STOPPED: clade_status = 2;
pub const CLADE_BUFFER_SMALL: clade_status = 3;
pub const CLADE_KV_BUDGET: clade_status = 4;
pub const CLADE_CONTEXT_FULL: clade_status = 5;
pub const CLADE_E_INVALID_ARG: clade_status = -1;
pub const CLADE_E_NOMEM: clade_status = -2;
pub const CLADE_E_IO: clade_status = -3;
pub const CLADE_E_FORMAT: clade_status = -4;
pub const CLADE_E_UNSUPPORTED: clade_status = -5;
pub const CLADE_E_TOKEN: clade_status = -6;
pub const CLADE_E_STATE: clade_status = -7;
pub const CLADE_E_BACKEND: clade_status = -8;
pub const CLADE_E_UTF8: clade_status = -9;
pub const CLADE_E_MISMATCH: clade_status = -10;
pub const CLADE_E_INTERNAL: clade_status = -100;

// ---- logging -------------------------------------------------------------------

pub type clade_log_level = c_int;
pub const CLADE_LOG_DEBUG: clade_log_level = 0;
pub const CLADE_LOG_INFO: clade_log_level = 1;
pub const CLADE_LOG_WARN: clade_log_level = 2;
pub const CLADE_LOG_ERROR: clade_log_level = 3;

// typedef void (*clade_log_fn)(clade_log_level level, const char *message, void *user);
pub type clade_log_fn =
    Option<unsafe extern "C" fn(level: clade_log_level, message: *const c_char, user: *mut c_void)>;

// typedef int32_t (*clade_abort_fn)(void *user);
pub type clade_abort_fn = Option<unsafe extern "C" fn(user: *mut c_void) -> i32>;

// ---- enums -------------------------------------------------------------------

pub type clade_backend = c_int;
pub const CLADE_BACKEND_CPU: clade_backend = 0;
pub const CLADE_BACKEND_CUDA: clade_backend = 1;

pub type clade_kv_type = c_int;
pub const CLADE_KV_F32: clade_kv_type = 0;
pub const CLADE_KV_F16: clade_kv_type = 1;
pub const CLADE_KV_BF16: clade_kv_type = 2;

pub type clade_weight_type = c_int;
pub const CLADE_WEIGHT_F32: clade_weight_type = 0;
pub const CLADE_WEIGHT_F16: clade_weight_type = 1;
pub const CLADE_WEIGHT_Q4_0: clade_weight_type = 2;
pub const CLADE_WEIGHT_Q8_0: clade_weight_type = 8;
pub const CLADE_WEIGHT_BF16: clade_weight_type = 30;

pub type clade_rope_scaling = c_int;
pub const CLADE_ROPE_SCALING_NONE: clade_rope_scaling = 0;
pub const CLADE_ROPE_SCALING_LINEAR: clade_rope_scaling = 1;
pub const CLADE_ROPE_SCALING_LLAMA3: clade_rope_scaling = 2;

pub type clade_attention = c_int;
pub const CLADE_ATTENTION_AUTO: clade_attention = 0;
pub const CLADE_ATTENTION_SHARED: clade_attention = 1;
pub const CLADE_ATTENTION_FLAT: clade_attention = 2;
pub const CLADE_ATTENTION_NONE: clade_attention = 3;

// ---- structs -----------------------------------------------------------------

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_model_params {
    pub size: usize,
    pub backend: clade_backend,
    pub n_threads: i32,
    pub vocab_only: i32,
    pub use_mmap: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_model_info {
    pub size: usize,
    pub architecture: [c_char; 32],
    pub name: [c_char; 96],
    pub n_layers: i32,
    pub n_embd: i32,
    pub n_heads: i32,
    pub n_kv_heads: i32,
    pub head_dim: i32,
    pub n_ff: i32,
    pub n_vocab: i32,
    pub n_ctx: i32,
    pub rope_freq_base: f32,
    pub rope_freq_scale: f32,
    pub rope_scaling: clade_rope_scaling,
    pub norm_eps: f32,
    pub weight_type: clade_weight_type,
    pub has_qkv_bias: i32,
    pub tied_output: i32,
    pub vocab_only: i32,
    pub n_params: u64,
    pub weight_bytes: u64,
}

pub const CLADE_TOKENIZE_ADD_SPECIAL: u32 = 1;
pub const CLADE_TOKENIZE_PARSE_SPECIAL: u32 = 2;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_chat_message {
    pub role: *const c_char,
    pub content: *const c_char,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_special_tokens {
    pub size: usize,
    pub bos: clade_token,
    pub eos: clade_token,
    pub eot: clade_token,
    pub pad: clade_token,
    pub unk: clade_token,
    pub add_bos: i32,
    pub add_eos: i32,
}

pub const CLADE_TREE_ALLOW_LONG_CONTEXT: u32 = 1;
pub const CLADE_TREE_PREFIX_CACHE: u32 = 2;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_tree_params {
    pub size: usize,
    pub kv_type: clade_kv_type,
    pub prefill_chunk: i32,
    pub flags: u32,
    pub kv_budget: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_node_info {
    pub size: usize,
    pub parent: clade_node_id,
    pub length: i32,
    pub path_length: i32,
    pub n_children: i32,
    pub n_refs: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_cache_params {
    pub size: usize,
    pub max_seqs: i32,
    pub max_tokens: i32,
    pub kv_type: clade_kv_type,
    pub attention: clade_attention,
}

// ---- batch append (prepacked prefill) ----

/// `#define CLADE_ITEM_NODE(i) ((clade_node_id)(-2 - (int32_t)(i)))`: in a
/// batch append, the parent that is the node of an earlier item i.
#[allow(non_snake_case)]
pub const fn CLADE_ITEM_NODE(i: i32) -> clade_node_id {
    -2 - i
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_append_item {
    pub size: usize,
    pub parent: clade_node_id,
    pub tokens: *const clade_token,
    pub n_tokens: usize,
    pub cache: *mut clade_cache,
    pub logits: *mut f32,
    pub node: clade_node_id,
    pub seq: clade_seq_id,
}

pub const CLADE_SEQ_PRIVATE: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_batch {
    pub size: usize,
    pub n_seqs: usize,
    pub seq_ids: *const clade_seq_id,
    pub n_tokens: *const i32,
    pub tokens: *const clade_token,
    pub all_logits: i32,
    pub logits: *mut f32,
    pub logits_rows: usize,
    pub argmax: *mut clade_token, // clade 1.4
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_sampler_params {
    pub size: usize,
    pub temperature: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub seed: u64,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub logit_bias: *const clade_logit_bias,
    pub n_logit_bias: usize,
    pub penalize_prompt: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_logit_bias {
    pub token: clade_token,
    pub bias: f32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_sample_result {
    pub size: usize,
    pub top_tokens: *mut clade_token,
    pub top_logprobs: *mut f32,
    pub top_capacity: usize,
    pub n_top: usize,
    pub token: clade_token,
    pub logprob: f32,
}

// ---- generation ----------------------------------------------------------------

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_prompt {
    pub tokens: *const clade_token,
    pub n_tokens: usize,
    pub parent: i32,
}

pub const CLADE_GENERATE_CONTINUE: i32 = 0;
pub const CLADE_GENERATE_STOP_SEQ: i32 = 1;
pub const CLADE_GENERATE_STOP_ALL: i32 = 2;

// typedef int32_t (*clade_generate_fn)(void *user, size_t seq, clade_token token,
//                                      const char *text, size_t len);
pub type clade_generate_fn = Option<
    unsafe extern "C" fn(user: *mut c_void, seq: usize, token: clade_token, text: *const c_char, len: usize) -> i32,
>;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_generate_params {
    pub size: usize,
    pub max_new_tokens: i32,
    pub n_samples: i32,
    pub ignore_eog: i32,
    pub max_live: i32,
    pub stop_tokens: *const clade_token,
    pub n_stop_tokens: usize,
    pub stop_strings: *const *const c_char,
    pub n_stop_strings: usize,
    pub sampler: *const clade_sampler_params,
    pub callback: clade_generate_fn,
    pub user: *mut c_void,
    pub attention: c_int,
    pub logprobs: i32,
    pub special: i32,
    pub root: clade_node_id,
    pub first_stream: u64,
    pub top_logprobs: i32, // clade 1.2
    pub grammars: *const *const c_void, // clade 1.5: const clade_grammar *const *
    pub n_grammars: usize,
}

pub type clade_finish_reason = c_int;
pub const CLADE_FINISH_NONE: clade_finish_reason = 0;
pub const CLADE_FINISH_STOP_TOKEN: clade_finish_reason = 1;
pub const CLADE_FINISH_STOP_STRING: clade_finish_reason = 2;
pub const CLADE_FINISH_LENGTH: clade_finish_reason = 3;
pub const CLADE_FINISH_CALLBACK: clade_finish_reason = 4;
pub const CLADE_FINISH_ABORTED: clade_finish_reason = 5;

#[repr(C)]
pub struct clade_generation {
    _private: [u8; 0],
}

// ---- speculative decoding (clade 1.1) ------------------------------------------

/// The library fills `size` with its own sizeof, which is also the stride of
/// the array a clade_draft_fn receives (it may exceed this struct's, and a
/// 1.1 library's ends before `parents`: read the 1.2 fields only where
/// `size` covers them, through a raw pointer).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_draft_request {
    pub size: usize,
    pub seq: u64,
    pub history: *const clade_token,
    pub n_history: usize,
    pub n_prompt: usize,
    pub max_tokens: i32,
    pub tokens: *mut clade_token,
    pub n_tokens: i32,
    /// clade 1.2: out, the parent of each draft token (-1: the history, or
    /// an earlier draft token's index), preset to j - 1 (a chain).
    pub parents: *mut i32,
    /// clade 1.2: the call's tree_width (1: chains only).
    pub tree_width: i32,
}

// typedef int32_t (*clade_draft_fn)(void *user, clade_draft_request *requests, size_t n_requests);
pub type clade_draft_fn =
    Option<unsafe extern "C" fn(user: *mut c_void, requests: *mut clade_draft_request, n_requests: usize) -> i32>;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct clade_speculative_params {
    pub size: usize,
    pub draft: clade_draft_fn,
    pub user: *mut c_void,
    pub draft_model: *mut clade_model,
    pub lookup_ngram: i32,
    pub max_draft: i32,
    pub adaptive: i32,
    /// clade 1.2: zero.
    pub reserved: i32,
    /// clade 1.2: children per draft token at most, 1..=8; 1: chains.
    pub tree_width: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct clade_generation_stats {
    pub size: usize,
    pub steps: u64,
    pub spec_steps: u64,
    pub tokens: u64,
    pub drafted: u64,
    pub accepted: u64,
    pub draft_steps: u64,
    pub target_seconds: f64,
    pub draft_seconds: f64,
}

// ---- functions -----------------------------------------------------------------

extern "C" {
    // int clade_version_number(void);
    pub fn clade_version_number() -> c_int;
    // const char *clade_version_string(void);
    pub fn clade_version_string() -> *const c_char;

    // const char *clade_status_string(clade_status status);
    pub fn clade_status_string(status: clade_status) -> *const c_char;
    // const char *clade_last_error(void);
    pub fn clade_last_error() -> *const c_char;

    // void clade_set_log(clade_log_fn fn, void *user, clade_log_level min_level);
    pub fn clade_set_log(f: clade_log_fn, user: *mut c_void, min_level: clade_log_level);

    // void clade_model_params_init(clade_model_params *params);
    pub fn clade_model_params_init(params: *mut clade_model_params);
    // clade_status clade_model_load(const char *path, const clade_model_params *params,
    //                               clade_model **out);
    pub fn clade_model_load(
        path: *const c_char,
        params: *const clade_model_params,
        out: *mut *mut clade_model,
    ) -> clade_status;
    // void clade_model_free(clade_model *model);
    pub fn clade_model_free(model: *mut clade_model);
    // clade_status clade_model_describe(const clade_model *model, clade_model_info *info);
    pub fn clade_model_describe(model: *const clade_model, info: *mut clade_model_info)
        -> clade_status;

    // clade_status clade_tokenize(const clade_model *model, const char *text, size_t len,
    //                             uint32_t flags, clade_token *tokens, size_t capacity,
    //                             size_t *n_tokens);
    pub fn clade_tokenize(
        model: *const clade_model,
        text: *const c_char,
        len: usize,
        flags: u32,
        tokens: *mut clade_token,
        capacity: usize,
        n_tokens: *mut usize,
    ) -> clade_status;
    // clade_status clade_detokenize(const clade_model *model, const clade_token *tokens,
    //                               size_t n_tokens, int32_t special, char *buf,
    //                               size_t capacity, size_t *n_bytes);
    pub fn clade_detokenize(
        model: *const clade_model,
        tokens: *const clade_token,
        n_tokens: usize,
        special: i32,
        buf: *mut c_char,
        capacity: usize,
        n_bytes: *mut usize,
    ) -> clade_status;
    // clade_status clade_token_to_piece(const clade_model *model, clade_token token,
    //                                   int32_t special, char *buf, size_t capacity,
    //                                   size_t *n_bytes);
    pub fn clade_token_to_piece(
        model: *const clade_model,
        token: clade_token,
        special: i32,
        buf: *mut c_char,
        capacity: usize,
        n_bytes: *mut usize,
    ) -> clade_status;
    // clade_status clade_model_special_tokens(const clade_model *model,
    //                                         clade_special_tokens *out);
    pub fn clade_model_special_tokens(
        model: *const clade_model,
        out: *mut clade_special_tokens,
    ) -> clade_status;
    // int32_t clade_token_is_eog(const clade_model *model, clade_token token);
    pub fn clade_token_is_eog(model: *const clade_model, token: clade_token) -> i32;

    // clade_status clade_chat_apply(const clade_model *model, const char *template_name,
    //                               const clade_chat_message *messages, size_t n,
    //                               int32_t add_assistant_prompt, char *buf,
    //                               size_t capacity, size_t *n_bytes);
    pub fn clade_chat_apply(
        model: *const clade_model,
        template_name: *const c_char,
        messages: *const clade_chat_message,
        n: usize,
        add_assistant_prompt: i32,
        buf: *mut c_char,
        capacity: usize,
        n_bytes: *mut usize,
    ) -> clade_status;
    // clade_status clade_chat_template_name(const clade_model *model, const char **name);
    pub fn clade_chat_template_name(model: *const clade_model, name: *mut *const c_char) -> clade_status;
    // size_t clade_chat_template_list(const char **names, size_t capacity);
    pub fn clade_chat_template_list(names: *mut *const c_char, capacity: usize) -> usize;

    // clade_status clade_detokenizer_create(const clade_model *model, int32_t special,
    //                                       int32_t first_in_text, clade_detokenizer **out);
    pub fn clade_detokenizer_create(
        model: *const clade_model,
        special: i32,
        first_in_text: i32,
        out: *mut *mut clade_detokenizer,
    ) -> clade_status;
    // clade_status clade_detokenizer_push(clade_detokenizer *detok, clade_token token,
    //                                     const char **text, size_t *len);
    pub fn clade_detokenizer_push(
        detok: *mut clade_detokenizer,
        token: clade_token,
        text: *mut *const c_char,
        len: *mut usize,
    ) -> clade_status;
    // clade_status clade_detokenizer_flush(clade_detokenizer *detok, const char **text,
    //                                      size_t *len);
    pub fn clade_detokenizer_flush(
        detok: *mut clade_detokenizer,
        text: *mut *const c_char,
        len: *mut usize,
    ) -> clade_status;
    // void clade_detokenizer_free(clade_detokenizer *detok);
    pub fn clade_detokenizer_free(detok: *mut clade_detokenizer);

    // void clade_tree_params_init(clade_tree_params *params);
    pub fn clade_tree_params_init(params: *mut clade_tree_params);
    // clade_status clade_tree_create(clade_model *model, const clade_tree_params *params,
    //                                clade_tree **out);
    pub fn clade_tree_create(
        model: *mut clade_model,
        params: *const clade_tree_params,
        out: *mut *mut clade_tree,
    ) -> clade_status;
    // void clade_tree_free(clade_tree *tree);
    pub fn clade_tree_free(tree: *mut clade_tree);
    // clade_status clade_tree_append(clade_tree *tree, clade_node_id parent,
    //                                const clade_token *tokens, size_t n_tokens,
    //                                float *logits, clade_node_id *out);
    pub fn clade_tree_append(
        tree: *mut clade_tree,
        parent: clade_node_id,
        tokens: *const clade_token,
        n_tokens: usize,
        logits: *mut f32,
        out: *mut clade_node_id,
    ) -> clade_status;
    // void clade_append_item_init(clade_append_item *item);
    pub fn clade_append_item_init(item: *mut clade_append_item);
    // clade_status clade_tree_append_batch(clade_tree *tree, clade_append_item *items,
    //                                      size_t n_items);
    pub fn clade_tree_append_batch(
        tree: *mut clade_tree,
        items: *mut clade_append_item,
        n_items: usize,
    ) -> clade_status;
    // clade_status clade_tree_release(clade_tree *tree, clade_node_id node);
    pub fn clade_tree_release(tree: *mut clade_tree, node: clade_node_id) -> clade_status;
    // clade_status clade_tree_append_prefix(clade_tree *tree, const clade_token *tokens,
    //                                       size_t n_tokens, float *logits,
    //                                       clade_node_id *out, size_t *n_reused);
    pub fn clade_tree_append_prefix(
        tree: *mut clade_tree,
        tokens: *const clade_token,
        n_tokens: usize,
        logits: *mut f32,
        out: *mut clade_node_id,
        n_reused: *mut usize,
    ) -> clade_status;
    // clade_status clade_tree_trim(clade_tree *tree, uint64_t bytes, uint64_t *freed);
    pub fn clade_tree_trim(tree: *mut clade_tree, bytes: u64, freed: *mut u64) -> clade_status;
    // clade_status clade_tree_save(const clade_tree *tree, clade_node_id node, const char *path);
    pub fn clade_tree_save(tree: *const clade_tree, node: clade_node_id, path: *const c_char) -> clade_status;
    // clade_status clade_cache_save(const clade_cache *cache, clade_seq_id seq, const char *path);
    pub fn clade_cache_save(cache: *const clade_cache, seq: clade_seq_id, path: *const c_char) -> clade_status;
    // clade_status clade_tree_load(clade_tree *tree, const char *path, clade_node_id *out,
    //                              size_t *n_tokens, size_t *n_reused);
    pub fn clade_tree_load(
        tree: *mut clade_tree,
        path: *const c_char,
        out: *mut clade_node_id,
        n_tokens: *mut usize,
        n_reused: *mut usize,
    ) -> clade_status;
    // clade_status clade_tree_node_info(const clade_tree *tree, clade_node_id node,
    //                                   clade_node_info *info);
    pub fn clade_tree_node_info(
        tree: *const clade_tree,
        node: clade_node_id,
        info: *mut clade_node_info,
    ) -> clade_status;
    // clade_status clade_tree_node_tokens(const clade_tree *tree, clade_node_id node,
    //                                     clade_token *tokens, size_t capacity,
    //                                     size_t *n_tokens);
    pub fn clade_tree_node_tokens(
        tree: *const clade_tree,
        node: clade_node_id,
        tokens: *mut clade_token,
        capacity: usize,
        n_tokens: *mut usize,
    ) -> clade_status;
    // size_t clade_tree_kv_bytes(const clade_tree *tree);
    pub fn clade_tree_kv_bytes(tree: *const clade_tree) -> usize;
    // clade_status clade_tree_children(const clade_tree *tree, clade_node_id node,
    //                                  clade_node_id *ids, size_t capacity,
    //                                  size_t *n_children);
    pub fn clade_tree_children(
        tree: *const clade_tree,
        node: clade_node_id,
        ids: *mut clade_node_id,
        capacity: usize,
        n_children: *mut usize,
    ) -> clade_status;
    // clade_status clade_tree_set_kv_budget(clade_tree *tree, uint64_t bytes);
    pub fn clade_tree_set_kv_budget(tree: *mut clade_tree, bytes: u64) -> clade_status;
    // uint64_t clade_tree_kv_used(const clade_tree *tree);
    pub fn clade_tree_kv_used(tree: *const clade_tree) -> u64;
    // clade_status clade_tree_set_abort(clade_tree *tree, clade_abort_fn fn, void *user);
    pub fn clade_tree_set_abort(tree: *mut clade_tree, f: clade_abort_fn, user: *mut c_void)
        -> clade_status;

    // void clade_cache_params_init(clade_cache_params *params);
    pub fn clade_cache_params_init(params: *mut clade_cache_params);
    // clade_status clade_cache_create(clade_tree *tree, const clade_cache_params *params,
    //                                 clade_cache **out);
    pub fn clade_cache_create(
        tree: *mut clade_tree,
        params: *const clade_cache_params,
        out: *mut *mut clade_cache,
    ) -> clade_status;
    // void clade_cache_free(clade_cache *cache);
    pub fn clade_cache_free(cache: *mut clade_cache);
    // clade_status clade_cache_add(clade_cache *cache, clade_node_id node,
    //                              const clade_token *tokens, size_t n_tokens,
    //                              uint32_t flags, clade_seq_id *out);
    pub fn clade_cache_add(
        cache: *mut clade_cache,
        node: clade_node_id,
        tokens: *const clade_token,
        n_tokens: usize,
        flags: u32,
        out: *mut clade_seq_id,
    ) -> clade_status;
    // clade_status clade_cache_remove(clade_cache *cache, clade_seq_id seq);
    pub fn clade_cache_remove(cache: *mut clade_cache, seq: clade_seq_id) -> clade_status;
    // clade_status clade_cache_truncate(clade_cache *cache, clade_seq_id seq, int32_t length);
    pub fn clade_cache_truncate(cache: *mut clade_cache, seq: clade_seq_id, length: i32)
        -> clade_status;
    // clade_status clade_cache_seq_length(const clade_cache *cache, clade_seq_id seq,
    //                                     int32_t *length);
    pub fn clade_cache_seq_length(
        cache: *const clade_cache,
        seq: clade_seq_id,
        length: *mut i32,
    ) -> clade_status;
    // size_t clade_cache_kv_bytes(const clade_cache *cache);
    pub fn clade_cache_kv_bytes(cache: *const clade_cache) -> usize;

    // clade_status clade_cache_fork(clade_cache *cache, clade_seq_id seq, clade_seq_id *out);
    pub fn clade_cache_fork(cache: *mut clade_cache, seq: clade_seq_id, out: *mut clade_seq_id)
        -> clade_status;
    // clade_status clade_cache_promote(clade_cache *cache, clade_seq_id seq,
    //                                  clade_node_id *out);
    pub fn clade_cache_promote(cache: *mut clade_cache, seq: clade_seq_id, out: *mut clade_node_id)
        -> clade_status;
    // clade_status clade_cache_move(clade_cache *cache, clade_seq_id seq, clade_node_id node);
    pub fn clade_cache_move(cache: *mut clade_cache, seq: clade_seq_id, node: clade_node_id)
        -> clade_status;
    // clade_status clade_cache_seq_node(const clade_cache *cache, clade_seq_id seq,
    //                                   clade_node_id *node);
    pub fn clade_cache_seq_node(cache: *const clade_cache, seq: clade_seq_id, node: *mut clade_node_id)
        -> clade_status;
    // clade_status clade_cache_seq_tokens(const clade_cache *cache, clade_seq_id seq,
    //                                     clade_token *tokens, size_t capacity,
    //                                     size_t *n_tokens);
    pub fn clade_cache_seq_tokens(
        cache: *const clade_cache,
        seq: clade_seq_id,
        tokens: *mut clade_token,
        capacity: usize,
        n_tokens: *mut usize,
    ) -> clade_status;

    // void clade_batch_init(clade_batch *batch);
    pub fn clade_batch_init(batch: *mut clade_batch);
    // clade_status clade_decode(clade_cache *cache, const clade_batch *batch);
    pub fn clade_decode(cache: *mut clade_cache, batch: *const clade_batch) -> clade_status;

    // void clade_sampler_params_init(clade_sampler_params *params);
    pub fn clade_sampler_params_init(params: *mut clade_sampler_params);
    // clade_status clade_sampler_create(const clade_sampler_params *p, clade_sampler **out);
    pub fn clade_sampler_create(
        p: *const clade_sampler_params,
        out: *mut *mut clade_sampler,
    ) -> clade_status;
    // void clade_sampler_free(clade_sampler *sampler);
    pub fn clade_sampler_free(sampler: *mut clade_sampler);
    // clade_status clade_sample(clade_sampler *sampler, uint64_t stream, const float *logits,
    //                           int32_t n_vocab, const clade_token *history,
    //                           size_t n_history, clade_token *out);
    pub fn clade_sample(
        sampler: *mut clade_sampler,
        stream: u64,
        logits: *const f32,
        n_vocab: i32,
        history: *const clade_token,
        n_history: usize,
        out: *mut clade_token,
    ) -> clade_status;
    // clade_status clade_sample_ex(clade_sampler *sampler, uint64_t stream, const float *logits,
    //                              int32_t n_vocab, const clade_token *history, size_t n_history,
    //                              size_t n_prompt, clade_sample_result *result);
    pub fn clade_sample_ex(
        sampler: *mut clade_sampler,
        stream: u64,
        logits: *const f32,
        n_vocab: i32,
        history: *const clade_token,
        n_history: usize,
        n_prompt: usize,
        result: *mut clade_sample_result,
    ) -> clade_status;
    // clade_status clade_sample_batch(clade_sampler *sampler, size_t n_rows, const float *logits,
    //                                 int32_t n_vocab, const uint64_t *streams,
    //                                 const clade_token *const *histories,
    //                                 const size_t *n_histories, const size_t *n_prompts,
    //                                 clade_sample_result *results);
    pub fn clade_sample_batch(
        sampler: *mut clade_sampler,
        n_rows: usize,
        logits: *const f32,
        n_vocab: i32,
        streams: *const u64,
        histories: *const *const clade_token,
        n_histories: *const usize,
        n_prompts: *const usize,
        results: *mut clade_sample_result,
    ) -> clade_status;
    // clade_status clade_sampler_forget(clade_sampler *sampler, uint64_t stream);
    pub fn clade_sampler_forget(sampler: *mut clade_sampler, stream: u64) -> clade_status;

    // void clade_generate_params_init(clade_generate_params *params);
    pub fn clade_generate_params_init(params: *mut clade_generate_params);
    // clade_status clade_generate(clade_tree *tree, const clade_prompt *prompts, size_t n_prompts,
    //                             const clade_generate_params *params, clade_generation **out);
    pub fn clade_generate(
        tree: *mut clade_tree,
        prompts: *const clade_prompt,
        n_prompts: usize,
        params: *const clade_generate_params,
        out: *mut *mut clade_generation,
    ) -> clade_status;
    // void clade_generation_free(clade_generation *gen);
    pub fn clade_generation_free(gen: *mut clade_generation);
    // size_t clade_generation_count(const clade_generation *gen);
    pub fn clade_generation_count(gen: *const clade_generation) -> usize;
    // const char *clade_generation_text(const clade_generation *gen, size_t i, size_t *len);
    pub fn clade_generation_text(gen: *const clade_generation, i: usize, len: *mut usize) -> *const c_char;
    // const clade_token *clade_generation_tokens(const clade_generation *gen, size_t i,
    //                                            size_t *n_tokens);
    pub fn clade_generation_tokens(gen: *const clade_generation, i: usize, n_tokens: *mut usize)
        -> *const clade_token;
    // const float *clade_generation_logprobs(const clade_generation *gen, size_t i);
    pub fn clade_generation_logprobs(gen: *const clade_generation, i: usize) -> *const f32;
    // clade_finish_reason clade_generation_finish(const clade_generation *gen, size_t i);
    pub fn clade_generation_finish(gen: *const clade_generation, i: usize) -> clade_finish_reason;
    // int64_t clade_generation_prompt(const clade_generation *gen, size_t i);
    pub fn clade_generation_prompt(gen: *const clade_generation, i: usize) -> i64;

    // void clade_speculative_params_init(clade_speculative_params *p);
    // Symbol-versioned since clade 1.2: this links to the default,
    // clade_speculative_params_init@@CLADE_1.2, which fills the 1.2 size.
    pub fn clade_speculative_params_init(p: *mut clade_speculative_params);
    // clade_status clade_generate_speculative(
    //     clade_tree *tree, const clade_prompt *prompts, size_t n_prompts,
    //     const clade_generate_params *params, const clade_speculative_params *spec,
    //     clade_generation **out);
    pub fn clade_generate_speculative(
        tree: *mut clade_tree,
        prompts: *const clade_prompt,
        n_prompts: usize,
        params: *const clade_generate_params,
        spec: *const clade_speculative_params,
        out: *mut *mut clade_generation,
    ) -> clade_status;
    // clade_status clade_generation_get_stats(const clade_generation *gen,
    //                                         clade_generation_stats *stats);
    pub fn clade_generation_get_stats(gen: *const clade_generation, stats: *mut clade_generation_stats)
        -> clade_status;

    // ---- token trees (clade 1.2) ----
    // clade_status clade_decode_tree(clade_cache *cache, const clade_batch *batch,
    //                                const int32_t *parents);
    pub fn clade_decode_tree(cache: *mut clade_cache, batch: *const clade_batch, parents: *const i32)
        -> clade_status;
    // clade_status clade_cache_keep(clade_cache *cache, clade_seq_id seq, int32_t from,
    //                               const int32_t *keep, size_t n_keep);
    pub fn clade_cache_keep(cache: *mut clade_cache, seq: clade_seq_id, from: i32, keep: *const i32,
                            n_keep: usize) -> clade_status;
}

#[cfg(test)]
mod layout {
    use super::*;
    use std::mem::{align_of, size_of};

    // Sizes on LP64 targets (x86_64, aarch64 Linux), checked against the C
    // header with sizeof().
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn struct_sizes_match_the_header() {
        assert_eq!(size_of::<clade_model_params>(), 24);
        assert_eq!(size_of::<clade_model_info>(), 216);
        assert_eq!(size_of::<clade_special_tokens>(), 40);
        assert_eq!(size_of::<clade_tree_params>(), 32);
        assert_eq!(size_of::<clade_node_info>(), 32);
        assert_eq!(size_of::<clade_cache_params>(), 24);
        assert_eq!(size_of::<clade_batch>(), 72);
        assert_eq!(size_of::<clade_sampler_params>(), 72);
        assert_eq!(size_of::<clade_sample_result>(), 48);
        assert_eq!(size_of::<clade_logit_bias>(), 8);
        assert_eq!(size_of::<clade_prompt>(), 24);
        assert_eq!(size_of::<clade_generate_params>(), 128); // 112 before clade 1.5 (grammars)
        assert_eq!(size_of::<clade_draft_request>(), 80);
        assert_eq!(size_of::<clade_speculative_params>(), 56);
        assert_eq!(size_of::<clade_generation_stats>(), 72);
        assert_eq!(align_of::<clade_model_info>(), 8);
    }

    #[test]
    fn init_functions_set_the_size() {
        unsafe {
            let mut p = std::mem::MaybeUninit::<clade_model_params>::zeroed().assume_init();
            clade_model_params_init(&mut p);
            assert_eq!(p.size, size_of::<clade_model_params>());
            let mut t = std::mem::MaybeUninit::<clade_tree_params>::zeroed().assume_init();
            t.flags = 7;
            t.kv_budget = 7;
            clade_tree_params_init(&mut t);
            assert_eq!((t.size, t.flags, t.kv_budget), (size_of::<clade_tree_params>(), 0, 0));
            let mut b = std::mem::MaybeUninit::<clade_batch>::zeroed().assume_init();
            clade_batch_init(&mut b);
            assert_eq!(b.size, size_of::<clade_batch>());
            // clade 1.2 grew this one: the default version fills all of it
            let mut s = std::mem::MaybeUninit::<clade_speculative_params>::zeroed().assume_init();
            s.tree_width = 7;
            clade_speculative_params_init(&mut s);
            assert_eq!((s.size, s.reserved, s.tree_width), (size_of::<clade_speculative_params>(), 0, 1));
            assert_eq!(clade_version_number(), CLADE_VERSION_NUMBER);
        }
    }
}
