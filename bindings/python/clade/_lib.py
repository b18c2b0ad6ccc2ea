"""Low-level ctypes mirror of include/clade/clade.h, one to one.

Every type, constant and function of the header appears here under its C
name, with the C prototype as a comment above it. Nothing is wrapped: the
functions return the raw clade_status integers and take ctypes arguments.
The Pythonic layer lives in the package's other modules, re-exported by
clade/__init__.py.

The library is found, in order, at:
  1. the path in the environment variable CLADE_LIBRARY;
  2. ../../build/libclade.so relative to this package (a source checkout);
  3. the folder pkg-config gave for clade when the package was installed
     (`pip install bindings/python` records it in clade/_config.py);
  4. the folder pkg-config gives now (`pkg-config --variable=libdir clade`);
  5. the system's 'libclade.so.1' (the soname carries CLADE_ABI_MAJOR):
     the loader's path, after `meson install` and `ldconfig`.

Callbacks (clade_log_fn, clade_abort_fn) are CFUNCTYPE types: keep the
object made from a Python function alive for as long as C may call it.
ctypes takes the GIL for the duration of each call into Python, and every
function here is called through CDLL, which releases the GIL, so C may call
back from the calling thread or from any other.
"""

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_float, c_int,
                    c_int32, c_size_t, c_uint32, c_uint64, c_void_p)

__all__ = []  # everything is reached as clade._lib.NAME


def _pkg_config_libdir():
    import subprocess
    try:
        r = subprocess.run(["pkg-config", "--variable=libdir", "clade"], capture_output=True, text=True,
                           timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def _candidates():
    env = os.environ.get("CLADE_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    local = os.path.normpath(os.path.join(here, "..", "..", "..", "build", "libclade.so"))
    if os.path.exists(local):
        yield local
    try:
        from . import _config  # written by the package's build (bindings/python/build_backend.py)
        if _config.LIBDIR:
            yield os.path.join(_config.LIBDIR, "libclade.so.1")
    except ImportError:
        pass
    libdir = _pkg_config_libdir()
    if libdir:
        yield os.path.join(libdir, "libclade.so.1")
    yield "libclade.so.1"


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            return path, ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise OSError("libclade.so.1 not found; tried: %s. Install clade (README: Install) and run ldconfig, "
                  "or set CLADE_LIBRARY to the library's path" % "; ".join(tried))


LIBRARY_PATH, lib = _load()

# ---- version --------------------------------------------------------------

CLADE_VERSION_MAJOR = 1
CLADE_VERSION_MINOR = 5
CLADE_VERSION_PATCH = 0
CLADE_VERSION_NUMBER = (CLADE_VERSION_MAJOR * 10000 + CLADE_VERSION_MINOR * 100
                        + CLADE_VERSION_PATCH)
CLADE_VERSION_STRING = "1.5.0"
CLADE_ABI_MAJOR = 1


def _fn(name, restype, argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = argtypes
    return f


def _fn_opt(name, restype, argtypes):
    """As _fn, for a function newer than clade 1.0.0: None when the library
    loaded lacks it (the Pythonic layer then raises CLADE_E_UNSUPPORTED)."""
    try:
        return _fn(name, restype, argtypes)
    except AttributeError:
        return None


# int clade_version_number(void);
clade_version_number = _fn("clade_version_number", c_int, [])
# const char *clade_version_string(void);
clade_version_string = _fn("clade_version_string", c_char_p, [])

# ---- opaque handles ---------------------------------------------------------


class clade_model(Structure):
    pass


class clade_tree(Structure):
    pass


class clade_cache(Structure):
    pass


class clade_sampler(Structure):
    pass


class clade_detokenizer(Structure):
    pass


clade_model_p = POINTER(clade_model)
clade_tree_p = POINTER(clade_tree)
clade_cache_p = POINTER(clade_cache)
clade_sampler_p = POINTER(clade_sampler)
clade_detokenizer_p = POINTER(clade_detokenizer)

# typedef int32_t clade_node_id; clade_seq_id; clade_token;
clade_node_id = c_int32
clade_seq_id = c_int32
clade_token = c_int32

# ---- status codes -----------------------------------------------------------

# typedef enum clade_status { ... } clade_status;
clade_status = c_int
CLADE_OK = 0
CLADE_CACHE_FULL = 1
CLADE_STOPPED = 2
CLADE_BUFFER_SMALL = 3
CLADE_KV_BUDGET = 4
CLADE_CONTEXT_FULL = 5
CLADE_E_INVALID_ARG = -1
CLADE_E_NOMEM = -2
CLADE_E_IO = -3
CLADE_E_FORMAT = -4
CLADE_E_UNSUPPORTED = -5
CLADE_E_TOKEN = -6
CLADE_E_STATE = -7
CLADE_E_BACKEND = -8
CLADE_E_UTF8 = -9
CLADE_E_MISMATCH = -10
CLADE_E_INTERNAL = -100

# const char *clade_status_string(clade_status status);
clade_status_string = _fn("clade_status_string", c_char_p, [clade_status])
# const char *clade_last_error(void);
clade_last_error = _fn("clade_last_error", c_char_p, [])

# ---- logging ----------------------------------------------------------------

# typedef enum clade_log_level { ... } clade_log_level;
clade_log_level = c_int
CLADE_LOG_DEBUG = 0
CLADE_LOG_INFO = 1
CLADE_LOG_WARN = 2
CLADE_LOG_ERROR = 3

# typedef void (*clade_log_fn)(clade_log_level level, const char *message, void *user);
clade_log_fn = CFUNCTYPE(None, clade_log_level, c_char_p, c_void_p)
# void clade_set_log(clade_log_fn fn, void *user, clade_log_level min_level);
clade_set_log = _fn("clade_set_log", None, [clade_log_fn, c_void_p, clade_log_level])

# ---- enums ------------------------------------------------------------------

clade_backend = c_int
CLADE_BACKEND_CPU = 0
CLADE_BACKEND_CUDA = 1

clade_kv_type = c_int
CLADE_KV_F32 = 0
CLADE_KV_F16 = 1
CLADE_KV_BF16 = 2

clade_weight_type = c_int
CLADE_WEIGHT_F32 = 0
CLADE_WEIGHT_F16 = 1
CLADE_WEIGHT_Q4_0 = 2
CLADE_WEIGHT_Q8_0 = 8
CLADE_WEIGHT_BF16 = 30

clade_rope_scaling = c_int
CLADE_ROPE_SCALING_NONE = 0
CLADE_ROPE_SCALING_LINEAR = 1
CLADE_ROPE_SCALING_LLAMA3 = 2

clade_attention = c_int
CLADE_ATTENTION_AUTO = 0
CLADE_ATTENTION_SHARED = 1
CLADE_ATTENTION_FLAT = 2
CLADE_ATTENTION_NONE = 3

# ---- model ------------------------------------------------------------------


class clade_model_params(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("backend", clade_backend),
        ("n_threads", c_int32),
        ("vocab_only", c_int32),
        ("use_mmap", c_int32),
    ]


# void clade_model_params_init(clade_model_params *params);
clade_model_params_init = _fn("clade_model_params_init", None, [POINTER(clade_model_params)])
# clade_status clade_model_load(const char *path, const clade_model_params *params,
#                               clade_model **out);
clade_model_load = _fn("clade_model_load", clade_status,
                       [c_char_p, POINTER(clade_model_params), POINTER(clade_model_p)])
# void clade_model_free(clade_model *model);
clade_model_free = _fn("clade_model_free", None, [clade_model_p])


class clade_model_info(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("architecture", c_char * 32),
        ("name", c_char * 96),
        ("n_layers", c_int32),
        ("n_embd", c_int32),
        ("n_heads", c_int32),
        ("n_kv_heads", c_int32),
        ("head_dim", c_int32),
        ("n_ff", c_int32),
        ("n_vocab", c_int32),
        ("n_ctx", c_int32),
        ("rope_freq_base", c_float),
        ("rope_freq_scale", c_float),
        ("rope_scaling", clade_rope_scaling),
        ("norm_eps", c_float),
        ("weight_type", clade_weight_type),
        ("has_qkv_bias", c_int32),
        ("tied_output", c_int32),
        ("vocab_only", c_int32),
        ("n_params", c_uint64),
        ("weight_bytes", c_uint64),
    ]


# clade_status clade_model_describe(const clade_model *model, clade_model_info *info);
clade_model_describe = _fn("clade_model_describe", clade_status,
                           [clade_model_p, POINTER(clade_model_info)])

# ---- tokenizer --------------------------------------------------------------

CLADE_TOKENIZE_ADD_SPECIAL = 1
CLADE_TOKENIZE_PARSE_SPECIAL = 2

# clade_status clade_tokenize(const clade_model *model, const char *text, size_t len,
#                             uint32_t flags, clade_token *tokens, size_t capacity,
#                             size_t *n_tokens);
clade_tokenize = _fn("clade_tokenize", clade_status,
                     [clade_model_p, c_char_p, c_size_t, c_uint32, POINTER(clade_token),
                      c_size_t, POINTER(c_size_t)])
# clade_status clade_detokenize(const clade_model *model, const clade_token *tokens,
#                               size_t n_tokens, int32_t special, char *buf,
#                               size_t capacity, size_t *n_bytes);
clade_detokenize = _fn("clade_detokenize", clade_status,
                       [clade_model_p, POINTER(clade_token), c_size_t, c_int32, c_char_p,
                        c_size_t, POINTER(c_size_t)])
# clade_status clade_token_to_piece(const clade_model *model, clade_token token,
#                                   int32_t special, char *buf, size_t capacity,
#                                   size_t *n_bytes);
clade_token_to_piece = _fn("clade_token_to_piece", clade_status,
                           [clade_model_p, clade_token, c_int32, c_char_p, c_size_t,
                            POINTER(c_size_t)])


# ---- chat templates (newer than clade 1.0.0's first build: optional) ---------


class clade_chat_message(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


# clade_status clade_chat_apply(const clade_model *model, const char *template_name,
#                               const clade_chat_message *messages, size_t n,
#                               int32_t add_assistant_prompt, char *buf, size_t capacity,
#                               size_t *n_bytes);
clade_chat_apply = _fn_opt("clade_chat_apply", clade_status,
                           [clade_model_p, c_char_p, POINTER(clade_chat_message), c_size_t, c_int32,
                            c_char_p, c_size_t, POINTER(c_size_t)])
# clade_status clade_chat_template_name(const clade_model *model, const char **name);
clade_chat_template_name = _fn_opt("clade_chat_template_name", clade_status,
                                   [clade_model_p, POINTER(c_char_p)])
# size_t clade_chat_template_list(const char **names, size_t capacity);
clade_chat_template_list = _fn_opt("clade_chat_template_list", c_size_t, [POINTER(c_char_p), c_size_t])

class clade_special_tokens(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("bos", clade_token),
        ("eos", clade_token),
        ("eot", clade_token),
        ("pad", clade_token),
        ("unk", clade_token),
        ("add_bos", c_int32),
        ("add_eos", c_int32),
    ]


# clade_status clade_model_special_tokens(const clade_model *model,
#                                         clade_special_tokens *out);
clade_model_special_tokens = _fn("clade_model_special_tokens", clade_status,
                                 [clade_model_p, POINTER(clade_special_tokens)])
# int32_t clade_token_is_eog(const clade_model *model, clade_token token);
clade_token_is_eog = _fn("clade_token_is_eog", c_int32, [clade_model_p, clade_token])

# clade_status clade_detokenizer_create(const clade_model *model, int32_t special,
#                                       int32_t first_in_text, clade_detokenizer **out);
clade_detokenizer_create = _fn("clade_detokenizer_create", clade_status,
                               [clade_model_p, c_int32, c_int32,
                                POINTER(clade_detokenizer_p)])
# clade_status clade_detokenizer_push(clade_detokenizer *detok, clade_token token,
#                                     const char **text, size_t *len);
clade_detokenizer_push = _fn("clade_detokenizer_push", clade_status,
                             [clade_detokenizer_p, clade_token, POINTER(c_void_p),
                              POINTER(c_size_t)])
# clade_status clade_detokenizer_flush(clade_detokenizer *detok, const char **text,
#                                      size_t *len);
clade_detokenizer_flush = _fn("clade_detokenizer_flush", clade_status,
                              [clade_detokenizer_p, POINTER(c_void_p), POINTER(c_size_t)])
# void clade_detokenizer_free(clade_detokenizer *detok);
clade_detokenizer_free = _fn("clade_detokenizer_free", None, [clade_detokenizer_p])

# ---- shared-cache tree ------------------------------------------------------


CLADE_TREE_ALLOW_LONG_CONTEXT = 1
CLADE_TREE_PREFIX_CACHE = 2


class clade_tree_params(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("kv_type", clade_kv_type),
        ("prefill_chunk", c_int32),
        ("flags", c_uint32),
        ("kv_budget", c_uint64),
    ]


# void clade_tree_params_init(clade_tree_params *params);
clade_tree_params_init = _fn("clade_tree_params_init", None, [POINTER(clade_tree_params)])
# clade_status clade_tree_create(clade_model *model, const clade_tree_params *params,
#                                clade_tree **out);
clade_tree_create = _fn("clade_tree_create", clade_status,
                        [clade_model_p, POINTER(clade_tree_params), POINTER(clade_tree_p)])
# void clade_tree_free(clade_tree *tree);
clade_tree_free = _fn("clade_tree_free", None, [clade_tree_p])
# clade_status clade_tree_append(clade_tree *tree, clade_node_id parent,
#                                const clade_token *tokens, size_t n_tokens,
#                                float *logits, clade_node_id *out);
clade_tree_append = _fn("clade_tree_append", clade_status,
                        [clade_tree_p, clade_node_id, POINTER(clade_token), c_size_t,
                         POINTER(c_float), POINTER(clade_node_id)])
# clade_status clade_tree_release(clade_tree *tree, clade_node_id node);
clade_tree_release = _fn("clade_tree_release", clade_status, [clade_tree_p, clade_node_id])

# ---- automatic prefix reuse and saved sessions (clade 1.3) ----

# clade_status clade_tree_append_prefix(clade_tree *tree, const clade_token *tokens,
#                                       size_t n_tokens, float *logits,
#                                       clade_node_id *out, size_t *n_reused);
clade_tree_append_prefix = _fn("clade_tree_append_prefix", clade_status,
                               [clade_tree_p, POINTER(clade_token), c_size_t, POINTER(c_float),
                                POINTER(clade_node_id), POINTER(c_size_t)])
# clade_status clade_tree_trim(clade_tree *tree, uint64_t bytes, uint64_t *freed);
clade_tree_trim = _fn("clade_tree_trim", clade_status, [clade_tree_p, c_uint64, POINTER(c_uint64)])
# clade_status clade_tree_save(const clade_tree *tree, clade_node_id node, const char *path);
clade_tree_save = _fn("clade_tree_save", clade_status, [clade_tree_p, clade_node_id, c_char_p])
# clade_status clade_tree_load(clade_tree *tree, const char *path, clade_node_id *out,
#                              size_t *n_tokens, size_t *n_reused);
clade_tree_load = _fn("clade_tree_load", clade_status,
                      [clade_tree_p, c_char_p, POINTER(clade_node_id), POINTER(c_size_t),
                       POINTER(c_size_t)])

# ---- batch append (prepacked prefill) ----


# #define CLADE_ITEM_NODE(i) ((clade_node_id)(-2 - (int32_t)(i)))
def CLADE_ITEM_NODE(i):
    return -2 - int(i)


class clade_append_item(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("parent", clade_node_id),
        ("tokens", POINTER(clade_token)),
        ("n_tokens", c_size_t),
        ("cache", clade_cache_p),
        ("logits", POINTER(c_float)),
        ("node", clade_node_id),
        ("seq", clade_seq_id),
    ]


# void clade_append_item_init(clade_append_item *item);
clade_append_item_init = _fn_opt("clade_append_item_init", None, [POINTER(clade_append_item)])
# clade_status clade_tree_append_batch(clade_tree *tree, clade_append_item *items,
#                                      size_t n_items);
clade_tree_append_batch = _fn_opt("clade_tree_append_batch", clade_status,
                                  [clade_tree_p, POINTER(clade_append_item), c_size_t])


class clade_node_info(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("parent", clade_node_id),
        ("length", c_int32),
        ("path_length", c_int32),
        ("n_children", c_int32),
        ("n_refs", c_int32),
    ]


# clade_status clade_tree_node_info(const clade_tree *tree, clade_node_id node,
#                                   clade_node_info *info);
clade_tree_node_info = _fn("clade_tree_node_info", clade_status,
                           [clade_tree_p, clade_node_id, POINTER(clade_node_info)])
# clade_status clade_tree_node_tokens(const clade_tree *tree, clade_node_id node,
#                                     clade_token *tokens, size_t capacity,
#                                     size_t *n_tokens);
clade_tree_node_tokens = _fn("clade_tree_node_tokens", clade_status,
                             [clade_tree_p, clade_node_id, POINTER(clade_token), c_size_t,
                              POINTER(c_size_t)])
# size_t clade_tree_kv_bytes(const clade_tree *tree);
clade_tree_kv_bytes = _fn("clade_tree_kv_bytes", c_size_t, [clade_tree_p])
# clade_status clade_tree_children(const clade_tree *tree, clade_node_id node,
#                                  clade_node_id *ids, size_t capacity,
#                                  size_t *n_children);
clade_tree_children = _fn("clade_tree_children", clade_status,
                          [clade_tree_p, clade_node_id, POINTER(clade_node_id), c_size_t,
                           POINTER(c_size_t)])
# clade_status clade_tree_set_kv_budget(clade_tree *tree, uint64_t bytes);
clade_tree_set_kv_budget = _fn("clade_tree_set_kv_budget", clade_status,
                               [clade_tree_p, c_uint64])
# uint64_t clade_tree_kv_used(const clade_tree *tree);
clade_tree_kv_used = _fn("clade_tree_kv_used", c_uint64, [clade_tree_p])

# typedef int32_t (*clade_abort_fn)(void *user);
clade_abort_fn = CFUNCTYPE(c_int32, c_void_p)
# clade_status clade_tree_set_abort(clade_tree *tree, clade_abort_fn fn, void *user);
clade_tree_set_abort = _fn("clade_tree_set_abort", clade_status,
                           [clade_tree_p, clade_abort_fn, c_void_p])

# ---- unique caches and decode steps -----------------------------------------


class clade_cache_params(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("max_seqs", c_int32),
        ("max_tokens", c_int32),
        ("kv_type", clade_kv_type),
        ("attention", clade_attention),
    ]


# void clade_cache_params_init(clade_cache_params *params);
clade_cache_params_init = _fn("clade_cache_params_init", None, [POINTER(clade_cache_params)])
# clade_status clade_cache_create(clade_tree *tree, const clade_cache_params *params,
#                                 clade_cache **out);
clade_cache_create = _fn("clade_cache_create", clade_status,
                         [clade_tree_p, POINTER(clade_cache_params), POINTER(clade_cache_p)])
# void clade_cache_free(clade_cache *cache);
clade_cache_free = _fn("clade_cache_free", None, [clade_cache_p])

CLADE_SEQ_PRIVATE = 1

# clade_status clade_cache_add(clade_cache *cache, clade_node_id node,
#                              const clade_token *tokens, size_t n_tokens,
#                              uint32_t flags, clade_seq_id *out);
clade_cache_add = _fn("clade_cache_add", clade_status,
                      [clade_cache_p, clade_node_id, POINTER(clade_token), c_size_t, c_uint32,
                       POINTER(clade_seq_id)])
# clade_status clade_cache_remove(clade_cache *cache, clade_seq_id seq);
clade_cache_remove = _fn("clade_cache_remove", clade_status, [clade_cache_p, clade_seq_id])
# clade_status clade_cache_truncate(clade_cache *cache, clade_seq_id seq, int32_t length);
clade_cache_truncate = _fn("clade_cache_truncate", clade_status,
                           [clade_cache_p, clade_seq_id, c_int32])
# clade_status clade_cache_seq_length(const clade_cache *cache, clade_seq_id seq,
#                                     int32_t *length);
clade_cache_seq_length = _fn("clade_cache_seq_length", clade_status,
                             [clade_cache_p, clade_seq_id, POINTER(c_int32)])
# size_t clade_cache_kv_bytes(const clade_cache *cache);
clade_cache_kv_bytes = _fn("clade_cache_kv_bytes", c_size_t, [clade_cache_p])

# clade_status clade_cache_fork(clade_cache *cache, clade_seq_id seq, clade_seq_id *out);
clade_cache_fork = _fn("clade_cache_fork", clade_status,
                       [clade_cache_p, clade_seq_id, POINTER(clade_seq_id)])
# clade_status clade_cache_promote(clade_cache *cache, clade_seq_id seq,
#                                  clade_node_id *out);
clade_cache_promote = _fn("clade_cache_promote", clade_status,
                          [clade_cache_p, clade_seq_id, POINTER(clade_node_id)])
# clade_status clade_cache_save(const clade_cache *cache, clade_seq_id seq, const char *path);
clade_cache_save = _fn("clade_cache_save", clade_status, [clade_cache_p, clade_seq_id, c_char_p])
# clade_status clade_cache_move(clade_cache *cache, clade_seq_id seq, clade_node_id node);
clade_cache_move = _fn("clade_cache_move", clade_status,
                       [clade_cache_p, clade_seq_id, clade_node_id])
# clade_status clade_cache_seq_node(const clade_cache *cache, clade_seq_id seq,
#                                   clade_node_id *node);
clade_cache_seq_node = _fn("clade_cache_seq_node", clade_status,
                           [clade_cache_p, clade_seq_id, POINTER(clade_node_id)])
# clade_status clade_cache_seq_tokens(const clade_cache *cache, clade_seq_id seq,
#                                     clade_token *tokens, size_t capacity,
#                                     size_t *n_tokens);
clade_cache_seq_tokens = _fn("clade_cache_seq_tokens", clade_status,
                             [clade_cache_p, clade_seq_id, POINTER(clade_token), c_size_t,
                              POINTER(c_size_t)])


class clade_batch(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("n_seqs", c_size_t),
        ("seq_ids", POINTER(clade_seq_id)),
        ("n_tokens", POINTER(c_int32)),
        ("tokens", POINTER(clade_token)),
        ("all_logits", c_int32),
        ("logits", POINTER(c_float)),
        ("logits_rows", c_size_t),
        ("argmax", POINTER(clade_token)),  # clade 1.4
    ]


# void clade_batch_init(clade_batch *batch);
clade_batch_init = _fn("clade_batch_init", None, [POINTER(clade_batch)])
# clade_status clade_decode(clade_cache *cache, const clade_batch *batch);
clade_decode = _fn("clade_decode", clade_status, [clade_cache_p, POINTER(clade_batch)])

# ---- sampler ----------------------------------------------------------------


class clade_logit_bias(Structure):
    _fields_ = [("token", clade_token), ("bias", c_float)]


class clade_sampler_params(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("temperature", c_float),
        ("top_k", c_int32),
        ("top_p", c_float),
        ("min_p", c_float),
        ("repeat_penalty", c_float),
        ("seed", c_uint64),
        ("presence_penalty", c_float),
        ("frequency_penalty", c_float),
        ("logit_bias", POINTER(clade_logit_bias)),
        ("n_logit_bias", c_size_t),
        ("penalize_prompt", c_int32),
        ("n_threads", c_int32),
    ]


class clade_sample_result(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("top_tokens", POINTER(clade_token)),
        ("top_logprobs", POINTER(c_float)),
        ("top_capacity", c_size_t),
        ("n_top", c_size_t),
        ("token", clade_token),
        ("logprob", c_float),
    ]


# void clade_sampler_params_init(clade_sampler_params *params);
clade_sampler_params_init = _fn("clade_sampler_params_init", None,
                                [POINTER(clade_sampler_params)])
# clade_status clade_sampler_create(const clade_sampler_params *p, clade_sampler **out);
clade_sampler_create = _fn("clade_sampler_create", clade_status,
                           [POINTER(clade_sampler_params), POINTER(clade_sampler_p)])
# void clade_sampler_free(clade_sampler *sampler);
clade_sampler_free = _fn("clade_sampler_free", None, [clade_sampler_p])
# clade_status clade_sample(clade_sampler *sampler, uint64_t stream, const float *logits,
#                           int32_t n_vocab, const clade_token *history,
#                           size_t n_history, clade_token *out);
clade_sample = _fn("clade_sample", clade_status,
                   [clade_sampler_p, c_uint64, POINTER(c_float), c_int32, POINTER(clade_token),
                    c_size_t, POINTER(clade_token)])
# clade_status clade_sample_ex(clade_sampler *sampler, uint64_t stream, const float *logits,
#                              int32_t n_vocab, const clade_token *history, size_t n_history,
#                              size_t n_prompt, clade_sample_result *result);
clade_sample_ex = _fn("clade_sample_ex", clade_status,
                      [clade_sampler_p, c_uint64, POINTER(c_float), c_int32, POINTER(clade_token),
                       c_size_t, c_size_t, POINTER(clade_sample_result)])
# clade_status clade_sample_batch(clade_sampler *sampler, size_t n_rows, const float *logits,
#                                 int32_t n_vocab, const uint64_t *streams,
#                                 const clade_token *const *histories, const size_t *n_histories,
#                                 const size_t *n_prompts, clade_sample_result *results);
clade_sample_batch = _fn("clade_sample_batch", clade_status,
                         [clade_sampler_p, c_size_t, POINTER(c_float), c_int32, POINTER(c_uint64),
                          POINTER(POINTER(clade_token)), POINTER(c_size_t), POINTER(c_size_t),
                          POINTER(clade_sample_result)])
# clade_status clade_sampler_forget(clade_sampler *sampler, uint64_t stream);
clade_sampler_forget = _fn("clade_sampler_forget", clade_status, [clade_sampler_p, c_uint64])

# ---- generation (the whole loop in one call) --------------------------------


class clade_prompt(Structure):
    _fields_ = [
        ("tokens", POINTER(clade_token)),
        ("n_tokens", c_size_t),
        ("parent", c_int32),
    ]


CLADE_GENERATE_CONTINUE = 0
CLADE_GENERATE_STOP_SEQ = 1
CLADE_GENERATE_STOP_ALL = 2

# typedef int32_t (*clade_generate_fn)(void *user, size_t seq, clade_token token,
#                                      const char *text, size_t len);
# text is a c_void_p: it is not NUL-terminated (read len bytes with ctypes.string_at).
clade_generate_fn = CFUNCTYPE(c_int32, c_void_p, c_size_t, clade_token, c_void_p, c_size_t)


class clade_generate_params(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("max_new_tokens", c_int32),
        ("n_samples", c_int32),
        ("ignore_eog", c_int32),
        ("max_live", c_int32),
        ("stop_tokens", POINTER(clade_token)),
        ("n_stop_tokens", c_size_t),
        ("stop_strings", POINTER(c_char_p)),
        ("n_stop_strings", c_size_t),
        ("sampler", POINTER(clade_sampler_params)),
        ("callback", clade_generate_fn),
        ("user", c_void_p),
        ("attention", clade_attention),
        ("logprobs", c_int32),
        ("special", c_int32),
        ("root", clade_node_id),
        ("first_stream", c_uint64),
        ("top_logprobs", c_int32),  # clade 1.2
        ("grammars", POINTER(c_void_p)),  # clade 1.5: const clade_grammar *const *
        ("n_grammars", c_size_t),
    ]


CLADE_FINISH_NONE = 0
CLADE_FINISH_STOP_TOKEN = 1
CLADE_FINISH_STOP_STRING = 2
CLADE_FINISH_LENGTH = 3
CLADE_FINISH_CALLBACK = 4
CLADE_FINISH_ABORTED = 5


class clade_generation(Structure):
    pass


clade_generation_p = POINTER(clade_generation)

# void clade_generate_params_init(clade_generate_params *params);
clade_generate_params_init = _fn_opt("clade_generate_params_init", None,
                                     [POINTER(clade_generate_params)])
# clade_status clade_generate(clade_tree *tree, const clade_prompt *prompts, size_t n_prompts,
#                             const clade_generate_params *params, clade_generation **out);
clade_generate = _fn_opt("clade_generate", clade_status,
                         [clade_tree_p, POINTER(clade_prompt), c_size_t,
                          POINTER(clade_generate_params), POINTER(clade_generation_p)])
# void clade_generation_free(clade_generation *gen);
clade_generation_free = _fn_opt("clade_generation_free", None, [clade_generation_p])
# size_t clade_generation_count(const clade_generation *gen);
clade_generation_count = _fn_opt("clade_generation_count", c_size_t, [clade_generation_p])
# const char *clade_generation_text(const clade_generation *gen, size_t i, size_t *len);
clade_generation_text = _fn_opt("clade_generation_text", c_void_p,
                                [clade_generation_p, c_size_t, POINTER(c_size_t)])
# const clade_token *clade_generation_tokens(const clade_generation *gen, size_t i,
#                                            size_t *n_tokens);
clade_generation_tokens = _fn_opt("clade_generation_tokens", POINTER(clade_token),
                                  [clade_generation_p, c_size_t, POINTER(c_size_t)])
# const float *clade_generation_logprobs(const clade_generation *gen, size_t i);
clade_generation_logprobs = _fn_opt("clade_generation_logprobs", POINTER(c_float),
                                    [clade_generation_p, c_size_t])
# clade_finish_reason clade_generation_finish(const clade_generation *gen, size_t i);
clade_generation_finish = _fn_opt("clade_generation_finish", c_int, [clade_generation_p, c_size_t])
# int64_t clade_generation_prompt(const clade_generation *gen, size_t i);
clade_generation_prompt = _fn_opt("clade_generation_prompt", ctypes.c_int64,
                                  [clade_generation_p, c_size_t])

# ---- speculative decoding (clade 1.1) ---------------------------------------


class clade_draft_request(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("seq", c_uint64),
        ("history", POINTER(clade_token)),
        ("n_history", c_size_t),
        ("n_prompt", c_size_t),
        ("max_tokens", c_int32),
        ("tokens", POINTER(clade_token)),
        ("n_tokens", c_int32),
        # clade 1.2: token trees (a 1.1 library's requests end before them:
        # read them only where requests[0].size covers them).
        ("parents", POINTER(c_int32)),
        ("tree_width", c_int32),
    ]


# typedef int32_t (*clade_draft_fn)(void *user, clade_draft_request *requests,
#                                   size_t n_requests);
# requests is a c_void_p: the array's stride is the library's
# sizeof(clade_draft_request), requests[0].size, which may exceed this one's.
clade_draft_fn = CFUNCTYPE(c_int32, c_void_p, c_void_p, c_size_t)


class clade_speculative_params(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("draft", clade_draft_fn),
        ("user", c_void_p),
        ("draft_model", clade_model_p),
        ("lookup_ngram", c_int32),
        ("max_draft", c_int32),
        ("adaptive", c_int32),
        ("reserved", c_int32),    # clade 1.2: zero
        ("tree_width", c_int32),  # clade 1.2: 1..8, 1 (default): chains
    ]


# void clade_speculative_params_init(clade_speculative_params *p);
# (Symbol-versioned since clade 1.2: dlsym gives the default,
# clade_speculative_params_init@@CLADE_1.2, which fills the 1.2 size, so the
# struct above must have the 1.2 layout; a 1.1 library fills its 48 bytes.)
clade_speculative_params_init = _fn_opt("clade_speculative_params_init", None,
                                        [POINTER(clade_speculative_params)])
# clade_status clade_generate_speculative(
#     clade_tree *tree, const clade_prompt *prompts, size_t n_prompts,
#     const clade_generate_params *params, const clade_speculative_params *spec,
#     clade_generation **out);
clade_generate_speculative = _fn_opt("clade_generate_speculative", clade_status,
                                     [clade_tree_p, POINTER(clade_prompt), c_size_t,
                                      POINTER(clade_generate_params),
                                      POINTER(clade_speculative_params),
                                      POINTER(clade_generation_p)])


class clade_generation_stats(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("steps", c_uint64),
        ("spec_steps", c_uint64),
        ("tokens", c_uint64),
        ("drafted", c_uint64),
        ("accepted", c_uint64),
        ("draft_steps", c_uint64),
        ("target_seconds", ctypes.c_double),
        ("draft_seconds", ctypes.c_double),
    ]


# clade_status clade_generation_get_stats(const clade_generation *gen,
#                                         clade_generation_stats *stats);
clade_generation_get_stats = _fn_opt("clade_generation_get_stats", clade_status,
                                     [clade_generation_p, POINTER(clade_generation_stats)])


# ---- token trees (clade 1.2) ------------------------------------------------

# clade_status clade_decode_tree(clade_cache *cache, const clade_batch *batch,
#                                const int32_t *parents);
clade_decode_tree = _fn_opt("clade_decode_tree", clade_status,
                            [clade_cache_p, POINTER(clade_batch), POINTER(c_int32)])
# clade_status clade_cache_keep(clade_cache *cache, clade_seq_id seq, int32_t from,
#                               const int32_t *keep, size_t n_keep);
clade_cache_keep = _fn_opt("clade_cache_keep", clade_status,
                           [clade_cache_p, clade_seq_id, c_int32, POINTER(c_int32), c_size_t])
