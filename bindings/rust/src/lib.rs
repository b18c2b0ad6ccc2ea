//! Safe Rust bindings to clade: Llama-family inference for many sequences
//! that share prefixes, through clade's stable C ABI.
//!
//! ```no_run
//! use clade::{Flow, GenerateParams, Prompt};
//! let model = clade::Model::load("model.gguf")?;
//! let tree = clade::Tree::new(&model, clade::TreeParams::default())?;
//! let prompt = model.tokenize("Once upon a time", true, false)?;
//! let mut params = GenerateParams { max_new_tokens: 16, n_samples: 4, ..GenerateParams::default() };
//! params.stop_strings = vec!["\n".into()];
//! let results = tree.generate_stream(&[Prompt::new(&prompt)], &params, |seq, _token, piece| {
//!     print!("[{seq}]{piece}");
//!     Flow::Continue
//! })?;
//! for g in &results {
//!     println!("{:?}: {}", g.finish, g.text);
//! }
//! # Ok::<(), clade::Error>(())
//! ```
//!
//! Speculative decoding (clade 1.1): [`Tree::generate_speculative`] with a
//! [`Speculative`] drafter (prompt lookup, a draft model or a closure);
//! greedy output is that of [`Tree::generate`], token for token:
//!
//! ```no_run
//! # let model = clade::Model::load("model.gguf")?;
//! # let tree = clade::Tree::new(&model, clade::TreeParams::default())?;
//! # let prompt = model.tokenize("Once upon a time", true, false)?;
//! let mut params = clade::GenerateParams::default();
//! params.sampler.temperature = 0.0;
//! let mut spec = clade::Speculative::lookup(3);
//! let (results, stats) = tree.generate_speculative(&[clade::Prompt::new(&prompt)], &params, &mut spec)?;
//! println!("{} ({} of {} drafts accepted)", results[0].text, stats.accepted, stats.drafted);
//! # Ok::<(), clade::Error>(())
//! ```
//!
//! Token trees (clade 1.2): [`Speculative::tree_width`] above 1 drafts a
//! tree of alternatives instead of a chain, verified in one step (a
//! [`Drafter::TreeFn`] gives parents); [`Cache::decode_tree`] and
//! [`Cache::keep`] are the step itself.
//!
//! Ownership: every handle owns its C object and nothing else. The C
//! library defers freeing (sqlite's close_v2): a tree keeps its model's
//! memory alive, a cache its tree's, a detokenizer its model's, until they
//! are freed in turn. So a [`Tree`] does not borrow its [`Model`] nor a
//! [`Cache`] its [`Tree`] (no lifetimes, no reference-counted parent
//! either: C already counts), and handles may be dropped in any order:
//!
//! ```no_run
//! let model = clade::Model::load("m.gguf")?;
//! let tree = clade::Tree::new(&model, clade::TreeParams::default())?;
//! let mut cache = clade::Cache::new(&tree, clade::CacheParams::default())?;
//! drop(model); // the tree keeps the weights alive
//! drop(tree); // the cache keeps the tree's nodes alive
//! let s = cache.add(clade::ROOT, &[1, 2, 3], false)?;
//! let rows = cache.decode(&[(s, &[4][..])], false)?;
//! # Ok::<(), clade::Error>(())
//! ```
//!
//! Threads: a `Model` is `Send + Sync`. A tree and its caches are one unit
//! whose C calls must not overlap; since a cache no longer borrows its
//! tree, they share a lock instead, taken by every call on either, so
//! `Tree` and `Cache` are `Send + Sync` and may be spread over threads
//! (their calls run one at a time).

pub mod sys;

use std::any::Any;
use std::cell::UnsafeCell;
use std::ffi::{CStr, CString};
use std::fmt;
use std::mem::MaybeUninit;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

pub type Token = sys::clade_token;
pub type NodeId = sys::clade_node_id;
pub type SeqId = sys::clade_seq_id;

/// The root of every tree.
pub const ROOT: NodeId = 0;

/// The run-time library version, e.g. "1.0.0".
pub fn version() -> &'static str {
    unsafe { CStr::from_ptr(sys::clade_version_string()) }
        .to_str()
        .unwrap_or("")
}

// ---- errors ----------------------------------------------------------------------

/// What kind of failure a clade status is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    CacheFull,
    Stopped,
    BufferSmall,
    /// The tree's KV budget would be exceeded ([`Tree::set_kv_budget`]).
    KvBudget,
    /// A position would pass the model's n_ctx.
    ContextFull,
    InvalidArg,
    NoMem,
    Io,
    Format,
    Unsupported,
    Token,
    State,
    Backend,
    Utf8,
    /// A saved session belongs to another model, backend or KV type.
    Mismatch,
    Internal,
    Other(i32),
}

impl ErrorKind {
    pub fn from_status(status: sys::clade_status) -> ErrorKind {
        use ErrorKind::*;
        match status {
            sys::CLADE_CACHE_FULL => CacheFull,
            sys::CLADE_STOPPED => Stopped,
            sys::CLADE_BUFFER_SMALL => BufferSmall,
            sys::CLADE_KV_BUDGET => KvBudget,
            sys::CLADE_CONTEXT_FULL => ContextFull,
            sys::CLADE_E_INVALID_ARG => InvalidArg,
            sys::CLADE_E_NOMEM => NoMem,
            sys::CLADE_E_IO => Io,
            sys::CLADE_E_FORMAT => Format,
            sys::CLADE_E_UNSUPPORTED => Unsupported,
            sys::CLADE_E_TOKEN => Token,
            sys::CLADE_E_STATE => State,
            sys::CLADE_E_BACKEND => Backend,
            sys::CLADE_E_UTF8 => Utf8,
            sys::CLADE_E_MISMATCH => Mismatch,
            sys::CLADE_E_INTERNAL => Internal,
            s => Other(s),
        }
    }
}

/// A failed clade call: its status (the raw clade_status), its kind, and
/// the message of clade_last_error() at the time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub status: i32,
    pub message: String,
}

impl Error {
    fn new(status: sys::clade_status, message: String) -> Error {
        Error { kind: ErrorKind::from_status(status), status, message }
    }
    fn last(status: sys::clade_status) -> Error {
        let msg = unsafe { CStr::from_ptr(sys::clade_last_error()) }.to_string_lossy().into_owned();
        let msg = if msg.is_empty() { status_string(status).to_owned() } else { msg };
        Error::new(status, msg)
    }
}

/// The static English name of a status.
pub fn status_string(status: i32) -> &'static str {
    unsafe { CStr::from_ptr(sys::clade_status_string(status)) }
        .to_str()
        .unwrap_or("")
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", status_string(self.status), self.status, self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

fn check(status: sys::clade_status) -> Result<()> {
    if status == sys::CLADE_OK {
        Ok(())
    } else {
        Err(Error::last(status))
    }
}

/// Ok(true) for CLADE_OK, Ok(false) for CLADE_BUFFER_SMALL, Err otherwise.
fn check_fits(status: sys::clade_status) -> Result<bool> {
    match status {
        sys::CLADE_OK => Ok(true),
        sys::CLADE_BUFFER_SMALL => Ok(false),
        s => Err(Error::last(s)),
    }
}

fn c_text(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

// ---- logging ---------------------------------------------------------------------------

/// Severity of a log message (clade_log_level).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Debug = 0,
    Info = 1,
    Warn = 2,
    Error = 3,
}

type LogFn = dyn Fn(LogLevel, &str) + Send + Sync;

/// A log callback for [`set_log`].
pub type LogCallback = Box<dyn Fn(LogLevel, &str) + Send + Sync>;

// The installed callback. C is given a fixed trampoline and a NULL user
// pointer, never a pointer to the closure, so replacing the closure while
// another thread is inside a log call cannot free what that call uses: the
// trampoline clones the Arc under the read lock.
static LOG: RwLock<Option<Arc<LogFn>>> = RwLock::new(None);

unsafe extern "C" fn log_trampoline(level: sys::clade_log_level, message: *const c_char, _user: *mut c_void) {
    let f = match LOG.read() {
        Ok(g) => g.clone(),
        Err(e) => e.into_inner().clone(),
    };
    let Some(f) = f else { return };
    let level = match level {
        sys::CLADE_LOG_DEBUG => LogLevel::Debug,
        sys::CLADE_LOG_INFO => LogLevel::Info,
        sys::CLADE_LOG_WARN => LogLevel::Warn,
        _ => LogLevel::Error,
    };
    let msg = if message.is_null() { "".into() } else { CStr::from_ptr(message).to_string_lossy() };
    // A panic must not unwind into C; a log message is not worth more.
    let _ = panic::catch_unwind(AssertUnwindSafe(|| f(level, &msg)));
}

/// Install `f` as the process-wide log callback for messages of at least
/// `min_level` (None: no logging, the default). It is called on the thread
/// making the clade call being logged, possibly on several at once; a
/// panic in it is caught and dropped. As the C API asks, set it before
/// other threads use clade (the closure itself may be swapped at any time
/// safely; the level and on/off switch are C's).
pub fn set_log(f: Option<LogCallback>, min_level: LogLevel) {
    let on = f.is_some();
    let new: Option<Arc<LogFn>> = f.map(Arc::from);
    let old = {
        let mut g = LOG.write().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *g, new)
    };
    let tramp: sys::clade_log_fn = if on { Some(log_trampoline) } else { None };
    unsafe { sys::clade_set_log(tramp, ptr::null_mut(), min_level as c_int) };
    drop(old); // outside the lock: its drop may do anything
}

// ---- enums ---------------------------------------------------------------------------

/// Element type of stored keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvType {
    F32 = 0,
    F16 = 1,
    Bf16 = 2,
}

/// How a step attends to shared nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attention {
    Auto = 0,
    Shared = 1,
    Flat = 2,
    None = 3,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Cpu = 0,
    Cuda = 1,
}

// ---- model -----------------------------------------------------------------------------

/// Loading options (clade_model_params).
#[derive(Debug, Clone)]
pub struct ModelParams {
    pub backend: Backend,
    pub n_threads: i32,
    pub vocab_only: bool,
    pub use_mmap: bool,
}

impl Default for ModelParams {
    fn default() -> Self {
        let mut p = MaybeUninit::<sys::clade_model_params>::zeroed();
        let p = unsafe {
            sys::clade_model_params_init(p.as_mut_ptr());
            p.assume_init()
        };
        ModelParams {
            backend: if p.backend == sys::CLADE_BACKEND_CUDA { Backend::Cuda } else { Backend::Cpu },
            n_threads: p.n_threads,
            vocab_only: p.vocab_only != 0,
            use_mmap: p.use_mmap != 0,
        }
    }
}

/// clade_model_info with owned strings.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    pub architecture: String,
    pub name: String,
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
    pub rope_scaling: i32,
    pub norm_eps: f32,
    pub weight_type: i32,
    pub has_qkv_bias: bool,
    pub tied_output: bool,
    pub vocab_only: bool,
    pub n_params: u64,
    pub weight_bytes: u64,
}

/// Special tokens of the vocabulary (None where the model has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<Token>,
    pub eos: Option<Token>,
    pub eot: Option<Token>,
    pub pad: Option<Token>,
    pub unk: Option<Token>,
    pub add_bos: bool,
    pub add_eos: bool,
}

/// A loaded model: weights, configuration and tokenizer. Immutable and
/// safe to share between threads.
pub struct Model {
    ptr: NonNull<sys::clade_model>,
    n_vocab: usize,
}

// The header: "a clade_model is immutable once loaded and may be used from
// any number of threads at once".
unsafe impl Send for Model {}
unsafe impl Sync for Model {}

impl Model {
    /// Load a GGUF file with the default parameters.
    pub fn load<P: AsRef<Path>>(path: P) -> Result<Model> {
        Model::load_with(path, &ModelParams::default())
    }

    pub fn load_with<P: AsRef<Path>>(path: P, params: &ModelParams) -> Result<Model> {
        use std::os::unix::ffi::OsStrExt;
        let cpath = CString::new(path.as_ref().as_os_str().as_bytes()).map_err(|_| {
            Error::new(sys::CLADE_E_INVALID_ARG, "path contains a NUL byte".into())
        })?;
        let mut p = MaybeUninit::<sys::clade_model_params>::zeroed();
        let mut p = unsafe {
            sys::clade_model_params_init(p.as_mut_ptr());
            p.assume_init()
        };
        p.backend = params.backend as i32;
        p.n_threads = params.n_threads;
        p.vocab_only = params.vocab_only as i32;
        p.use_mmap = params.use_mmap as i32;
        let mut out = ptr::null_mut();
        check(unsafe { sys::clade_model_load(cpath.as_ptr(), &p, &mut out) })?;
        let ptr = NonNull::new(out)
            .ok_or_else(|| Error::new(sys::CLADE_E_INTERNAL, "clade_model_load gave NULL".into()))?;
        let mut m = Model { ptr, n_vocab: 0 };
        m.n_vocab = m.info()?.n_vocab as usize;
        Ok(m)
    }

    pub fn as_ptr(&self) -> *mut sys::clade_model {
        self.ptr.as_ptr()
    }

    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    pub fn info(&self) -> Result<ModelInfo> {
        let mut i = unsafe { MaybeUninit::<sys::clade_model_info>::zeroed().assume_init() };
        i.size = std::mem::size_of::<sys::clade_model_info>();
        check(unsafe { sys::clade_model_describe(self.as_ptr(), &mut i) })?;
        Ok(ModelInfo {
            architecture: c_text(&i.architecture),
            name: c_text(&i.name),
            n_layers: i.n_layers,
            n_embd: i.n_embd,
            n_heads: i.n_heads,
            n_kv_heads: i.n_kv_heads,
            head_dim: i.head_dim,
            n_ff: i.n_ff,
            n_vocab: i.n_vocab,
            n_ctx: i.n_ctx,
            rope_freq_base: i.rope_freq_base,
            rope_freq_scale: i.rope_freq_scale,
            rope_scaling: i.rope_scaling,
            norm_eps: i.norm_eps,
            weight_type: i.weight_type,
            has_qkv_bias: i.has_qkv_bias != 0,
            tied_output: i.tied_output != 0,
            vocab_only: i.vocab_only != 0,
            n_params: i.n_params,
            weight_bytes: i.weight_bytes,
        })
    }

    pub fn special_tokens(&self) -> Result<SpecialTokens> {
        let mut s = unsafe { MaybeUninit::<sys::clade_special_tokens>::zeroed().assume_init() };
        s.size = std::mem::size_of::<sys::clade_special_tokens>();
        check(unsafe { sys::clade_model_special_tokens(self.as_ptr(), &mut s) })?;
        let opt = |t: Token| if t < 0 { None } else { Some(t) };
        Ok(SpecialTokens {
            bos: opt(s.bos),
            eos: opt(s.eos),
            eot: opt(s.eot),
            pad: opt(s.pad),
            unk: opt(s.unk),
            add_bos: s.add_bos != 0,
            add_eos: s.add_eos != 0,
        })
    }

    /// True if the token ends a generation (EOS, EOT, ...).
    pub fn is_eog(&self, token: Token) -> bool {
        unsafe { sys::clade_token_is_eog(self.as_ptr(), token) != 0 }
    }

    /// Encode text into tokens.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<Token>> {
        self.tokenize_bytes(text.as_bytes(), add_special, parse_special)
    }

    /// Encode UTF-8 bytes (anything else is ErrorKind::Utf8).
    pub fn tokenize_bytes(&self, text: &[u8], add_special: bool, parse_special: bool) -> Result<Vec<Token>> {
        let flags = if add_special { sys::CLADE_TOKENIZE_ADD_SPECIAL } else { 0 }
            | if parse_special { sys::CLADE_TOKENIZE_PARSE_SPECIAL } else { 0 };
        let mut buf: Vec<Token> = vec![0; text.len() + 8];
        loop {
            let mut n = 0usize;
            let fits = check_fits(unsafe {
                sys::clade_tokenize(self.as_ptr(), text.as_ptr() as *const c_char, text.len(), flags,
                                    buf.as_mut_ptr(), buf.len(), &mut n)
            })?;
            if fits {
                buf.truncate(n);
                return Ok(buf);
            }
            buf.resize(n, 0);
        }
    }

    /// Decode tokens into bytes.
    pub fn detokenize_bytes(&self, tokens: &[Token], special: bool) -> Result<Vec<u8>> {
        let mut buf: Vec<u8> = vec![0; tokens.len() * 16 + 16];
        loop {
            let mut n = 0usize;
            let fits = check_fits(unsafe {
                sys::clade_detokenize(self.as_ptr(), tokens.as_ptr(), tokens.len(), special as i32,
                                      buf.as_mut_ptr() as *mut c_char, buf.len(), &mut n)
            })?;
            if fits {
                buf.truncate(n);
                return Ok(buf);
            }
            buf.resize(n, 0);
        }
    }

    /// Decode tokens into text (invalid UTF-8 is replaced by U+FFFD).
    pub fn detokenize(&self, tokens: &[Token], special: bool) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.detokenize_bytes(tokens, special)?).into_owned())
    }

    /// The bytes of one token.
    pub fn token_to_piece(&self, token: Token, special: bool) -> Result<Vec<u8>> {
        let mut buf: Vec<u8> = vec![0; 64];
        loop {
            let mut n = 0usize;
            let fits = check_fits(unsafe {
                sys::clade_token_to_piece(self.as_ptr(), token, special as i32,
                                          buf.as_mut_ptr() as *mut c_char, buf.len(), &mut n)
            })?;
            if fits {
                buf.truncate(n);
                return Ok(buf);
            }
            buf.resize(n, 0);
        }
    }
}

// ---- chat templates ----------------------------------------------------------------------

/// One message of a conversation for [`Model::chat_apply`]: role ("system",
/// "user", "assistant", ...) and content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatMessage<'a> {
    pub role: &'a str,
    pub content: &'a str,
}

impl<'a> ChatMessage<'a> {
    pub fn new(role: &'a str, content: &'a str) -> Self {
        ChatMessage { role, content }
    }
}

/// The names of the chat templates clade formats (clade_chat_template_list).
pub fn chat_templates() -> Vec<&'static str> {
    let n = unsafe { sys::clade_chat_template_list(ptr::null_mut(), 0) };
    let mut names: Vec<*const c_char> = vec![ptr::null(); n];
    unsafe { sys::clade_chat_template_list(names.as_mut_ptr(), n) };
    names.iter().map(|&p| unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("")).collect()
}

fn path_cstring(path: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::new(sys::CLADE_E_INVALID_ARG, format!("path {} contains a NUL byte", path.display())))
}

fn c_string(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(sys::CLADE_E_INVALID_ARG, format!("{} contains a NUL byte", what)))
}

impl Model {
    /// Format a conversation with a chat template (clade_chat_apply):
    /// `template` is a name of [`chat_templates`], or None for the model's
    /// own (ErrorKind::Unsupported when it has none or it is not
    /// recognized). The text has no leading BOS: tokenize it with
    /// add_special and parse_special set.
    pub fn chat_apply(&self, messages: &[ChatMessage], template: Option<&str>, add_assistant_prompt: bool)
        -> Result<String> {
        let mut owned = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            owned.push((c_string(m.role, &format!("messages[{}].role", i))?,
                        c_string(m.content, &format!("messages[{}].content", i))?));
        }
        let raw: Vec<sys::clade_chat_message> = owned
            .iter()
            .map(|(r, c)| sys::clade_chat_message { role: r.as_ptr(), content: c.as_ptr() })
            .collect();
        let name = template.map(|t| c_string(t, "template")).transpose()?;
        let name_ptr = name.as_ref().map_or(ptr::null(), |n| n.as_ptr());
        let mut buf: Vec<u8> = vec![0; messages.iter().map(|m| m.role.len() + m.content.len()).sum::<usize>() + 256];
        loop {
            let mut n = 0usize;
            let fits = check_fits(unsafe {
                sys::clade_chat_apply(self.as_ptr(), name_ptr, raw.as_ptr(), raw.len(), add_assistant_prompt as i32,
                                      buf.as_mut_ptr() as *mut c_char, buf.len(), &mut n)
            })?;
            if fits {
                buf.truncate(n);
                return Ok(String::from_utf8_lossy(&buf).into_owned());
            }
            buf.resize(n, 0);
        }
    }

    /// The family recognized from the model's chat template (a name of
    /// [`chat_templates`]); ErrorKind::Unsupported when none is.
    pub fn chat_template_name(&self) -> Result<&'static str> {
        let mut p: *const c_char = ptr::null();
        check(unsafe { sys::clade_chat_template_name(self.as_ptr(), &mut p) })?;
        Ok(unsafe { CStr::from_ptr(p) }.to_str().unwrap_or(""))
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        unsafe { sys::clade_model_free(self.ptr.as_ptr()) }
    }
}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Model").field("n_vocab", &self.n_vocab).finish()
    }
}

// ---- streaming detokenizer ---------------------------------------------------------------

/// Streaming detokenizer: push generated tokens one at a time and get the
/// bytes that are complete (never a split UTF-8 character).
/// It keeps the model's memory alive (the Model may be dropped first).
pub struct Detokenizer {
    ptr: NonNull<sys::clade_detokenizer>,
}

// One thread at a time (methods take &mut self): Send, not Sync.
unsafe impl Send for Detokenizer {}

impl Detokenizer {
    pub fn new(model: &Model, special: bool, first_in_text: bool) -> Result<Self> {
        let mut out = ptr::null_mut();
        check(unsafe {
            sys::clade_detokenizer_create(model.as_ptr(), special as i32, first_in_text as i32, &mut out)
        })?;
        Ok(Detokenizer { ptr: NonNull::new(out).expect("clade_detokenizer_create gave NULL") })
    }

    fn take(text: *const c_char, len: usize) -> Vec<u8> {
        if len == 0 || text.is_null() {
            Vec::new()
        } else {
            unsafe { std::slice::from_raw_parts(text as *const u8, len) }.to_vec()
        }
    }

    pub fn push(&mut self, token: Token) -> Result<Vec<u8>> {
        let (mut t, mut n) = (ptr::null(), 0usize);
        check(unsafe { sys::clade_detokenizer_push(self.ptr.as_ptr(), token, &mut t, &mut n) })?;
        Ok(Self::take(t, n))
    }

    pub fn flush(&mut self) -> Result<Vec<u8>> {
        let (mut t, mut n) = (ptr::null(), 0usize);
        check(unsafe { sys::clade_detokenizer_flush(self.ptr.as_ptr(), &mut t, &mut n) })?;
        Ok(Self::take(t, n))
    }
}

impl Drop for Detokenizer {
    fn drop(&mut self) {
        unsafe { sys::clade_detokenizer_free(self.ptr.as_ptr()) }
    }
}

// ---- tree ----------------------------------------------------------------------------------

/// Flag of [`TreeParams::flags`]: accept positions at or past the model's
/// n_ctx (for models whose RoPE scaling extends it); without it such a call
/// fails with [`ErrorKind::ContextFull`].
pub const TREE_ALLOW_LONG_CONTEXT: u32 = sys::CLADE_TREE_ALLOW_LONG_CONTEXT;
/// Keep released nodes cached for [`Tree::append_prefix`], evicted least
/// recently used when the KV budget needs room (clade 1.3).
pub const TREE_PREFIX_CACHE: u32 = sys::CLADE_TREE_PREFIX_CACHE;

#[derive(Debug, Clone)]
pub struct TreeParams {
    pub kv_type: KvType,
    /// Tokens per forward pass in prefill; 0: the library's default.
    pub prefill_chunk: i32,
    /// TREE_* flags.
    pub flags: u32,
    /// Bytes of KV the tree's nodes and all its caches may hold together;
    /// 0: no limit. See [`Tree::set_kv_budget`].
    pub kv_budget: u64,
}

impl Default for TreeParams {
    fn default() -> Self {
        TreeParams { kv_type: KvType::F16, prefill_chunk: 0, flags: 0, kv_budget: 0 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeInfo {
    /// None for the root.
    pub parent: Option<NodeId>,
    pub length: i32,
    pub path_length: i32,
    pub n_children: i32,
    pub n_refs: i32,
}

/// An abort callback for [`Tree::set_abort`]: true stops the call.
pub type AbortCallback = Box<dyn FnMut() -> bool + Send>;

/// The abort callback as C sees it: `user` points at this, on the heap.
struct AbortSlot {
    f: AbortCallback,
    /// A panic of `f`, caught in the trampoline, to resume after the C call.
    panic: Option<Box<dyn Any + Send>>,
}

unsafe extern "C" fn abort_trampoline(user: *mut c_void) -> i32 {
    // SAFETY: `user` is the AbortSlot installed by Tree::set_abort; it is
    // only touched with the tree's lock held, which the thread running this
    // call holds (see Shared), so this is the only reference.
    let slot = &mut *(user as *mut AbortSlot);
    if slot.panic.is_some() {
        return 1;
    }
    // No unwinding across C: catch, stop the call, resume after it.
    match panic::catch_unwind(AssertUnwindSafe(|| (slot.f)())) {
        Ok(stop) => stop as i32,
        Err(p) => {
            slot.panic = Some(p);
            1
        }
    }
}

/// The parent of an [`AppendItem`]: an existing node, or the node made by
/// the earlier item of the same [`Tree::append_batch`] call at this index
/// (CLADE_ITEM_NODE). A [`NodeId`] converts into `Parent::Node`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Parent {
    Node(NodeId),
    Item(usize),
}

impl From<NodeId> for Parent {
    fn from(n: NodeId) -> Parent {
        Parent::Node(n)
    }
}

/// One item of [`Tree::append_batch`], built as
/// `AppendItem::node(parent, &tokens)` (a new tree node) or
/// `AppendItem::seq(&cache, parent, &tokens)` (a new sequence of the cache
/// under parent, its tokens evaluated by the call), then
/// `.with_logits()` for the logits of its last token. `parent` is a
/// [`NodeId`] or a [`Parent`]: `Parent::Item(i)` is the node of the earlier
/// node item i.
#[derive(Clone, Copy)]
pub struct AppendItem<'a> {
    parent: Parent,
    tokens: &'a [Token],
    cache: Option<&'a Cache>,
    want_logits: bool,
}

impl<'a> AppendItem<'a> {
    /// A new tree node of `tokens` under `parent`.
    pub fn node(parent: impl Into<Parent>, tokens: &'a [Token]) -> Self {
        AppendItem { parent: parent.into(), tokens, cache: None, want_logits: false }
    }

    /// A new sequence of `cache` (a cache of the tree the batch goes to)
    /// under `parent`, with `tokens` as its first own tokens.
    pub fn seq(cache: &'a Cache, parent: impl Into<Parent>, tokens: &'a [Token]) -> Self {
        AppendItem { parent: parent.into(), tokens, cache: Some(cache), want_logits: false }
    }

    /// Also return the logits of the item's last token (needs tokens).
    pub fn with_logits(mut self) -> Self {
        self.want_logits = true;
        self
    }

    /// Set whether the logits of the item's last token come back.
    pub fn logits(mut self, want: bool) -> Self {
        self.want_logits = want;
        self
    }

    pub fn parent(&self) -> Parent {
        self.parent
    }

    pub fn tokens(&self) -> &'a [Token] {
        self.tokens
    }

    pub fn is_seq(&self) -> bool {
        self.cache.is_some()
    }
}

impl fmt::Debug for AppendItem<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppendItem")
            .field("parent", &self.parent)
            .field("tokens", &self.tokens)
            .field("seq", &self.cache.is_some())
            .field("want_logits", &self.want_logits)
            .finish()
    }
}

/// What [`Tree::append_batch`] gives for one item: the new node of a node
/// item or the new sequence of a sequence item (the other is None), and
/// the logits of its last token when asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct AppendResult {
    pub node: Option<NodeId>,
    pub seq: Option<SeqId>,
    pub logits: Option<Vec<f32>>,
}

/// What a tree and its caches share: the lock that keeps their C calls
/// from overlapping (the header's threading rule), and the abort callback.
/// Held by the Tree and every Cache made from it; it goes when the last of
/// them is dropped, that is when C has freed the tree and no call can reach
/// the callback any more (the C tree outlives the Tree handle while caches
/// live, and caches call the callback in decode).
struct Shared {
    lock: Mutex<()>,
    /// The installed AbortSlot (Box::into_raw), or null. Read and written
    /// only with `lock` held.
    abort: UnsafeCell<*mut AbortSlot>,
}

// SAFETY: `abort` is only accessed under `lock`; AbortSlot's contents are Send.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    fn new() -> Arc<Shared> {
        Arc::new(Shared { lock: Mutex::new(()), abort: UnsafeCell::new(ptr::null_mut()) })
    }

    /// The lock. A panic while it was held (only ever in Rust code around C
    /// calls that change nothing when they fail) leaves nothing broken, so
    /// poisoning is ignored.
    fn guard(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run a C call that may invoke the abort callback, with the lock held;
    /// a panic the callback raised is resumed here, after the call, with
    /// the lock released.
    fn run(&self, f: impl FnOnce() -> sys::clade_status) -> Result<()> {
        let g = self.guard();
        let st = f();
        let result = if st == sys::CLADE_OK { Ok(()) } else { Err(Error::last(st)) };
        // SAFETY: lock held.
        let caught = unsafe {
            let slot = *self.abort.get();
            if slot.is_null() { None } else { (*slot).panic.take() }
        };
        drop(g);
        if let Some(p) = caught {
            panic::resume_unwind(p);
        }
        result
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let slot = *self.abort.get_mut();
        if !slot.is_null() {
            // SAFETY: made by Box::into_raw; no C object can call it now.
            drop(unsafe { Box::from_raw(slot) });
        }
    }
}

/// The shared-cache tree of a model. Node 0 ([`ROOT`]) is the root. The
/// tree keeps the model's memory alive: the Model may be dropped first.
pub struct Tree {
    ptr: NonNull<sys::clade_tree>,
    n_vocab: usize,
    shared: Arc<Shared>,
}

// Every call on the tree takes the lock shared with its caches.
unsafe impl Send for Tree {}
unsafe impl Sync for Tree {}

impl Tree {
    pub fn new(model: &Model, params: TreeParams) -> Result<Self> {
        let mut p = unsafe { MaybeUninit::<sys::clade_tree_params>::zeroed().assume_init() };
        unsafe { sys::clade_tree_params_init(&mut p) };
        p.kv_type = params.kv_type as i32;
        p.prefill_chunk = params.prefill_chunk;
        p.flags = params.flags;
        p.kv_budget = params.kv_budget;
        let mut out = ptr::null_mut();
        check(unsafe { sys::clade_tree_create(model.as_ptr(), &p, &mut out) })?;
        Ok(Tree {
            ptr: NonNull::new(out).expect("clade_tree_create gave NULL"),
            n_vocab: model.n_vocab(),
            shared: Shared::new(),
        })
    }

    /// The C handle. Calls on it must not overlap calls on this tree or its
    /// caches.
    pub fn as_ptr(&self) -> *mut sys::clade_tree {
        self.ptr.as_ptr()
    }

    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    fn call(&self, f: impl FnOnce(*mut sys::clade_tree) -> sys::clade_status) -> Result<()> {
        let _g = self.shared.guard();
        check(f(self.as_ptr()))
    }

    fn call_fits(&self, f: impl FnOnce(*mut sys::clade_tree) -> sys::clade_status) -> Result<bool> {
        let _g = self.shared.guard();
        check_fits(f(self.as_ptr()))
    }

    /// Append a node of tokens under parent; they are evaluated now. The
    /// caller holds a reference to the new node: [`Tree::release`] it.
    /// Err with ErrorKind::Stopped when the abort callback stopped it, with
    /// ErrorKind::KvBudget past the budget (nothing changed either way).
    pub fn append(&self, parent: NodeId, tokens: &[Token]) -> Result<NodeId> {
        self.append_impl(parent, tokens, ptr::null_mut())
    }

    /// As [`Tree::append`], also giving the logits of the node's last token.
    pub fn append_logits(&self, parent: NodeId, tokens: &[Token]) -> Result<(NodeId, Vec<f32>)> {
        let mut logits = vec![0f32; self.n_vocab];
        let id = self.append_impl(parent, tokens, logits.as_mut_ptr())?;
        Ok((id, logits))
    }

    fn append_impl(&self, parent: NodeId, tokens: &[Token], logits: *mut f32) -> Result<NodeId> {
        let mut out: NodeId = 0;
        self.shared.run(|| unsafe {
            sys::clade_tree_append(self.as_ptr(), parent, tokens.as_ptr(), tokens.len(), logits, &mut out)
        })?;
        Ok(out)
    }

    /// Evaluate many items at once (clade_tree_append_batch): new nodes, and
    /// new sequences of this tree's caches with their first own tokens, in
    /// forward passes packed over all the items. Returns one
    /// [`AppendResult`] per item, in order. The caller holds a reference to
    /// each new node ([`Tree::release`] it); a new sequence's tokens are
    /// evaluated by this call, not queued. The logits and KV are those of
    /// appending the items one at a time, to rounding.
    ///
    /// Atomic: on any error (a bad parent, a token outside the vocabulary,
    /// ErrorKind::CacheFull, KvBudget, ContextFull, Stopped) no node and no
    /// sequence was added. An item whose cache belongs to another tree is
    /// ErrorKind::InvalidArg (checked here, since only this tree's lock is
    /// held, and again by C). A panic in the abort callback is resumed here.
    pub fn append_batch(&self, items: &[AppendItem<'_>]) -> Result<Vec<AppendResult>> {
        let mut rows: Vec<Option<Vec<f32>>> =
            items.iter().map(|it| if it.want_logits { Some(vec![0f32; self.n_vocab]) } else { None }).collect();
        let mut raw: Vec<sys::clade_append_item> = Vec::with_capacity(items.len());
        for (i, (it, row)) in items.iter().zip(rows.iter_mut()).enumerate() {
            let mut c = MaybeUninit::<sys::clade_append_item>::zeroed();
            let mut c = unsafe {
                sys::clade_append_item_init(c.as_mut_ptr());
                c.assume_init()
            };
            c.size = std::mem::size_of::<sys::clade_append_item>(); // the array's stride
            c.parent = match it.parent {
                Parent::Node(n) => n,
                Parent::Item(k) => i32::try_from(k).ok().and_then(|k| (-2i32).checked_sub(k)).ok_or_else(|| {
                    Error::new(sys::CLADE_E_INVALID_ARG, format!("append_batch item {i}: item index {k} out of range"))
                })?,
            };
            c.tokens = it.tokens.as_ptr();
            c.n_tokens = it.tokens.len();
            if let Some(cache) = it.cache {
                if !Arc::ptr_eq(&cache.shared, &self.shared) {
                    return Err(Error::new(sys::CLADE_E_INVALID_ARG,
                                          format!("append_batch item {i}: the cache belongs to another tree")));
                }
                c.cache = cache.as_ptr();
            }
            if let Some(r) = row {
                c.logits = r.as_mut_ptr();
            }
            raw.push(c);
        }
        let n = raw.len();
        let p = raw.as_mut_ptr();
        self.shared.run(|| unsafe { sys::clade_tree_append_batch(self.as_ptr(), p, n) })?;
        // A new sequence's slot in its Cache's queue count is 0 already: a
        // slot is zeroed when its sequence goes, and this one queued nothing.
        Ok(raw
            .iter()
            .zip(items)
            .zip(rows)
            .map(|((c, it), logits)| {
                if it.cache.is_some() {
                    AppendResult { node: None, seq: Some(c.seq), logits }
                } else {
                    AppendResult { node: Some(c.node), seq: None, logits }
                }
            })
            .collect())
    }

    /// Drop the caller's reference to a node.
    pub fn release(&self, node: NodeId) -> Result<()> {
        self.call(|t| unsafe { sys::clade_tree_release(t, node) })
    }

    /// Evaluate a whole prompt reusing the deepest path of the tree that
    /// equals its beginning (a node it leaves halfway is split); only the
    /// rest is evaluated, as a new node the caller holds. Returns the node,
    /// the tokens reused and the logits of the last token (clade 1.3).
    pub fn append_prefix(&self, tokens: &[Token]) -> Result<(NodeId, usize, Vec<f32>)> {
        let mut logits = vec![0f32; self.n_vocab];
        let (mut out, mut reused): (NodeId, usize) = (0, 0);
        let lp = logits.as_mut_ptr();
        self.shared.run(|| unsafe {
            sys::clade_tree_append_prefix(self.as_ptr(), tokens.as_ptr(), tokens.len(), lp, &mut out, &mut reused)
        })?;
        Ok((out, reused, logits))
    }

    /// Evict cached nodes, least recently used first, until the tree and its
    /// caches hold at most `bytes` of KV; returns the bytes freed.
    pub fn trim(&self, bytes: u64) -> Result<u64> {
        let mut freed = 0u64;
        self.call(|t| unsafe { sys::clade_tree_trim(t, bytes, &mut freed) })?;
        Ok(freed)
    }

    /// Write the path root .. node (tokens and KV) to a file (a temporary
    /// file, then renamed).
    pub fn save<P: AsRef<Path>>(&self, node: NodeId, path: P) -> Result<()> {
        let c = path_cstring(path.as_ref())?;
        self.call(|t| unsafe { sys::clade_tree_save(t, node, c.as_ptr()) })
    }

    /// Load a saved path, matched against what the tree holds, evaluating
    /// nothing. Returns the node (the caller's), the file's tokens and the
    /// tokens the tree held already. ErrorKind::Mismatch for a file of
    /// another model, backend or KV type.
    pub fn load<P: AsRef<Path>>(&self, path: P) -> Result<(NodeId, usize, usize)> {
        let c = path_cstring(path.as_ref())?;
        let (mut out, mut n, mut reused): (NodeId, usize, usize) = (0, 0, 0);
        self.call(|t| unsafe { sys::clade_tree_load(t, c.as_ptr(), &mut out, &mut n, &mut reused) })?;
        Ok((out, n, reused))
    }

    pub fn node_info(&self, node: NodeId) -> Result<NodeInfo> {
        let mut i = unsafe { MaybeUninit::<sys::clade_node_info>::zeroed().assume_init() };
        i.size = std::mem::size_of::<sys::clade_node_info>();
        self.call(|t| unsafe { sys::clade_tree_node_info(t, node, &mut i) })?;
        Ok(NodeInfo {
            parent: if i.parent < 0 { None } else { Some(i.parent) },
            length: i.length,
            path_length: i.path_length,
            n_children: i.n_children,
            n_refs: i.n_refs,
        })
    }

    pub fn node_tokens(&self, node: NodeId) -> Result<Vec<Token>> {
        let mut buf: Vec<Token> = Vec::new();
        loop {
            let mut n = 0usize;
            let p = if buf.is_empty() { ptr::null_mut() } else { buf.as_mut_ptr() };
            if self.call_fits(|t| unsafe { sys::clade_tree_node_tokens(t, node, p, buf.len(), &mut n) })? {
                buf.truncate(n);
                return Ok(buf);
            }
            buf.resize(n, 0);
        }
    }

    /// The live children of node, oldest first.
    pub fn children(&self, node: NodeId) -> Result<Vec<NodeId>> {
        let mut buf: Vec<NodeId> = vec![0; 8];
        loop {
            let mut n = 0usize;
            let p = buf.as_mut_ptr();
            if self.call_fits(|t| unsafe { sys::clade_tree_children(t, node, p, buf.len(), &mut n) })? {
                buf.truncate(n);
                return Ok(buf);
            }
            buf.resize(n.max(1), 0);
        }
    }

    /// Bytes of KV held by the tree's live nodes.
    pub fn kv_bytes(&self) -> usize {
        let _g = self.shared.guard();
        unsafe { sys::clade_tree_kv_bytes(self.as_ptr()) }
    }

    /// The KV memory budget: bytes the tree's nodes and every cache made
    /// from it may hold together ([`Tree::kv_used`]); 0: no limit. A call
    /// that would grow past it fails with ErrorKind::KvBudget and changes
    /// nothing. Lowering it frees nothing.
    pub fn set_kv_budget(&self, bytes: u64) -> Result<()> {
        self.call(|t| unsafe { sys::clade_tree_set_kv_budget(t, bytes) })
    }

    /// Bytes of KV held by the tree's nodes and all its caches (allocated
    /// capacity, what the budget counts).
    pub fn kv_used(&self) -> u64 {
        let _g = self.shared.guard();
        unsafe { sys::clade_tree_kv_used(self.as_ptr()) }
    }

    /// Install an abort callback for the tree and its caches (None removes
    /// it). It is called between layers of [`Tree::append`] and
    /// [`Cache::decode`], on the thread running them; returning true stops
    /// the call, which fails with ErrorKind::Stopped and changes nothing.
    /// A panic in it stops the call too and is resumed by the call, once C
    /// has returned. It must not use this tree or its caches (their lock is
    /// held: that would deadlock). The tree keeps the closure; caches that
    /// outlive the Tree keep using it.
    pub fn set_abort(&self, f: Option<AbortCallback>) -> Result<()> {
        let new = match f {
            Some(f) => Box::into_raw(Box::new(AbortSlot { f, panic: None })),
            None => ptr::null_mut(),
        };
        let tramp: sys::clade_abort_fn = if new.is_null() { None } else { Some(abort_trampoline) };
        let g = self.shared.guard();
        let st = unsafe { sys::clade_tree_set_abort(self.as_ptr(), tramp, new as *mut c_void) };
        if st != sys::CLADE_OK {
            let e = Error::last(st);
            drop(g);
            if !new.is_null() {
                drop(unsafe { Box::from_raw(new) });
            }
            return Err(e);
        }
        // SAFETY: lock held; C now holds `new`, so nothing reaches the old one.
        let old = unsafe { std::mem::replace(&mut *self.shared.abort.get(), new) };
        drop(g);
        if !old.is_null() {
            drop(unsafe { Box::from_raw(old) }); // outside the lock: its drop may do anything
        }
        Ok(())
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _g = self.shared.guard();
        // Deferred in C: the nodes (and the abort callback, kept in Shared)
        // stay while caches made from this tree live.
        unsafe { sys::clade_tree_free(self.ptr.as_ptr()) }
    }
}

impl fmt::Debug for Tree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tree").field("n_vocab", &self.n_vocab).finish()
    }
}

// ---- cache -----------------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct CacheParams {
    pub max_seqs: i32,
    pub max_tokens: i32,
    /// None: the tree's.
    pub kv_type: Option<KvType>,
    pub attention: Attention,
}

impl Default for CacheParams {
    fn default() -> Self {
        let mut p = unsafe { MaybeUninit::<sys::clade_cache_params>::zeroed().assume_init() };
        unsafe { sys::clade_cache_params_init(&mut p) };
        CacheParams { max_seqs: p.max_seqs, max_tokens: p.max_tokens, kv_type: None, attention: Attention::Auto }
    }
}

/// Unique caches of up to max_seqs sequences of a tree, and decode steps.
/// The cache keeps the tree's nodes (and so the model) alive: the Tree may
/// be dropped first.
pub struct Cache {
    ptr: NonNull<sys::clade_cache>,
    n_vocab: usize,
    max_seqs: usize,
    queued: Vec<usize>, // tokens queued by add()/fork(), per sequence id
    shared: Arc<Shared>,
}

// Every call on the cache takes the lock shared with its tree and the
// tree's other caches.
unsafe impl Send for Cache {}
unsafe impl Sync for Cache {}

impl Cache {
    pub fn new(tree: &Tree, params: CacheParams) -> Result<Self> {
        let mut p = unsafe { MaybeUninit::<sys::clade_cache_params>::zeroed().assume_init() };
        unsafe { sys::clade_cache_params_init(&mut p) };
        p.max_seqs = params.max_seqs;
        p.max_tokens = params.max_tokens;
        if let Some(k) = params.kv_type {
            p.kv_type = k as i32;
        }
        p.attention = params.attention as i32;
        let mut out = ptr::null_mut();
        tree.call(|t| unsafe { sys::clade_cache_create(t, &p, &mut out) })?;
        let max_seqs = params.max_seqs.max(0) as usize;
        Ok(Cache {
            ptr: NonNull::new(out).expect("clade_cache_create gave NULL"),
            n_vocab: tree.n_vocab(),
            max_seqs,
            queued: vec![0; max_seqs],
            shared: tree.shared.clone(),
        })
    }

    /// The C handle. Calls on it must not overlap calls on its tree or the
    /// tree's caches.
    pub fn as_ptr(&self) -> *mut sys::clade_cache {
        self.ptr.as_ptr()
    }

    fn call(&self, f: impl FnOnce(*mut sys::clade_cache) -> sys::clade_status) -> Result<()> {
        let _g = self.shared.guard();
        check(f(self.as_ptr()))
    }

    fn queued_mut(&mut self, seq: SeqId) -> Option<&mut usize> {
        if seq >= 0 && (seq as usize) < self.max_seqs {
            self.queued.get_mut(seq as usize)
        } else {
            None
        }
    }

    fn queued(&self, seq: SeqId) -> usize {
        if seq >= 0 { self.queued.get(seq as usize).copied().unwrap_or(0) } else { 0 }
    }

    /// Add a sequence attached to node, with its own first tokens (queued
    /// and evaluated by the next decode). private: copy the path's KV into
    /// the sequence (the flat baseline). No free slot: ErrorKind::CacheFull.
    pub fn add(&mut self, node: NodeId, tokens: &[Token], private: bool) -> Result<SeqId> {
        let flags = if private { sys::CLADE_SEQ_PRIVATE } else { 0 };
        let mut out: SeqId = 0;
        self.call(|c| unsafe { sys::clade_cache_add(c, node, tokens.as_ptr(), tokens.len(), flags, &mut out) })?;
        if let Some(q) = self.queued_mut(out) {
            *q = tokens.len();
        }
        Ok(out)
    }

    pub fn remove(&mut self, seq: SeqId) -> Result<()> {
        self.call(|c| unsafe { sys::clade_cache_remove(c, seq) })?;
        if let Some(q) = self.queued_mut(seq) {
            *q = 0;
        }
        Ok(())
    }

    pub fn truncate(&mut self, seq: SeqId, length: i32) -> Result<()> {
        self.call(|c| unsafe { sys::clade_cache_truncate(c, seq, length) })
    }

    /// Unique tokens evaluated so far.
    pub fn length(&self, seq: SeqId) -> Result<i32> {
        let mut n = 0i32;
        self.call(|c| unsafe { sys::clade_cache_seq_length(c, seq, &mut n) })?;
        Ok(n)
    }

    pub fn kv_bytes(&self) -> usize {
        let _g = self.shared.guard();
        unsafe { sys::clade_cache_kv_bytes(self.as_ptr()) }
    }

    /// A new sequence under seq's node with a copy of seq's unique KV,
    /// tokens and queued tokens (nothing is evaluated). No free slot:
    /// ErrorKind::CacheFull.
    pub fn fork(&mut self, seq: SeqId) -> Result<SeqId> {
        let mut out: SeqId = 0;
        self.call(|c| unsafe { sys::clade_cache_fork(c, seq, &mut out) })?;
        let q = self.queued(seq);
        if let Some(slot) = self.queued_mut(out) {
            *slot = q;
        }
        Ok(out)
    }

    /// Turn seq's unique tokens into a new tree node under its node (their
    /// KV moves, nothing is evaluated) and attach seq to it. The caller
    /// holds a reference to the node: [`Tree::release`] it.
    /// Write seq's whole evaluated history (tokens and KV) to a file, for
    /// [`Tree::load`].
    pub fn save<P: AsRef<Path>>(&self, seq: SeqId, path: P) -> Result<()> {
        let c = path_cstring(path.as_ref())?;
        self.call(|c_| unsafe { sys::clade_cache_save(c_, seq, c.as_ptr()) })
    }

    pub fn promote(&mut self, seq: SeqId) -> Result<NodeId> {
        let mut out: NodeId = 0;
        self.call(|c| unsafe { sys::clade_cache_promote(c, seq, &mut out) })?;
        Ok(out)
    }

    /// Move seq under node (clade_cache_move; `move` is a Rust keyword):
    /// node's path tokens must be a prefix of seq's history. Positions stay
    /// the same, so the next logits are as before, to rounding.
    pub fn move_to(&mut self, seq: SeqId, node: NodeId) -> Result<()> {
        self.call(|c| unsafe { sys::clade_cache_move(c, seq, node) })
    }

    /// The node seq is attached to.
    pub fn seq_node(&self, seq: SeqId) -> Result<NodeId> {
        let mut out: NodeId = 0;
        self.call(|c| unsafe { sys::clade_cache_seq_node(c, seq, &mut out) })?;
        Ok(out)
    }

    /// seq's evaluated unique tokens (not the queued ones).
    pub fn seq_tokens(&self, seq: SeqId) -> Result<Vec<Token>> {
        let mut buf: Vec<Token> = Vec::new();
        loop {
            let mut n = 0usize;
            let p = if buf.is_empty() { ptr::null_mut() } else { buf.as_mut_ptr() };
            let st = {
                let _g = self.shared.guard();
                unsafe { sys::clade_cache_seq_tokens(self.as_ptr(), seq, p, buf.len(), &mut n) }
            };
            if check_fits(st)? {
                buf.truncate(n);
                return Ok(buf);
            }
            buf.resize(n, 0);
        }
    }

    /// One decode step: each (sequence, new tokens) pair, in order. Returns
    /// the logits rows (n_vocab floats each) in that order: one per sequence
    /// that evaluates any token (queued or new), or with all_logits one per
    /// evaluated token. Fails with ErrorKind::CacheFull (no room),
    /// KvBudget, ContextFull or Stopped (the abort callback) with nothing
    /// changed; a panic in the abort callback is resumed here.
    pub fn decode(&mut self, step: &[(SeqId, &[Token])], all_logits: bool) -> Result<Vec<Vec<f32>>> {
        let (rows, logits, _) = self.decode_impl(step, None, all_logits, false)?;
        Ok(logits.chunks(self.n_vocab.max(1)).take(rows).map(|r| r.to_vec()).collect())
    }

    /// [`Cache::decode`] returning each row's greedy token instead of the
    /// row (clade_batch.argmax, clade 1.4): its highest logit, the lowest
    /// id among equal ones, -1 for a row with none above -inf. Found where
    /// the logits are: on the GPU only the tokens come back. A library
    /// older than 1.4 refuses it ([`ErrorKind::Unsupported`]).
    pub fn decode_greedy(&mut self, step: &[(SeqId, &[Token])], all_logits: bool) -> Result<Vec<Token>> {
        self.decode_impl(step, None, all_logits, true).map(|(_, _, tokens)| tokens)
    }

    /// [`Cache::decode`] where each sequence's new tokens form a tree
    /// (clade_decode_tree, clade 1.2): (sequence, new tokens, parents), one
    /// parent per token: -1 (it follows the history and queued tokens) or
    /// the index of an earlier new token of that sequence. Each token sees
    /// the history and its ancestors only; all_logits gives one row per
    /// token. The tokens take the sequence's next slots in order: then
    /// [`Cache::keep`] keeps one path. Bad parents, or a tree of more than
    /// 64 tokens: [`ErrorKind::InvalidArg`], nothing changed.
    pub fn decode_tree(&mut self, step: &[(SeqId, &[Token], &[i32])], all_logits: bool) -> Result<Vec<Vec<f32>>> {
        let mut parents = Vec::new();
        for &(seq, tokens, ps) in step {
            if ps.len() != tokens.len() {
                return Err(Error::new(sys::CLADE_E_INVALID_ARG, format!(
                    "decode_tree: sequence {seq} has {} parents for {} tokens", ps.len(), tokens.len())));
            }
            parents.extend_from_slice(ps);
        }
        let pairs: Vec<(SeqId, &[Token])> = step.iter().map(|&(s, t, _)| (s, t)).collect();
        let (rows, logits, _) = self.decode_impl(&pairs, Some(&parents), all_logits, false)?;
        Ok(logits.chunks(self.n_vocab.max(1)).take(rows).map(|r| r.to_vec()).collect())
    }

    /// Keep seq's unique tokens [0, from) and those at from + `keep[i]`
    /// (keep strictly increasing), moved down in that order, and drop the
    /// rest (clade_cache_keep, clade 1.2). After a [`Cache::decode_tree`]
    /// step of a sequence of length L, `keep(seq, L, path)` with the batch
    /// indices of one root-to-node path leaves it as if only that path had
    /// been decoded.
    pub fn keep(&mut self, seq: SeqId, from: i32, keep: &[i32]) -> Result<()> {
        self.call(|c| unsafe { sys::clade_cache_keep(c, seq, from, keep.as_ptr(), keep.len()) })
    }

    /// clade_decode, or clade_decode_tree with parents: the step's row
    /// count, and its logits, or with greedy its rows' argmax tokens.
    fn decode_impl(&mut self, step: &[(SeqId, &[Token])], parents: Option<&[i32]>, all_logits: bool, greedy: bool)
        -> Result<(usize, Vec<f32>, Vec<Token>)> {
        let seqs: Vec<SeqId> = step.iter().map(|s| s.0).collect();
        let counts: Vec<i32> = step.iter().map(|s| s.1.len() as i32).collect();
        let tokens: Vec<Token> = step.iter().flat_map(|s| s.1.iter().copied()).collect();
        let mut rows = 0usize;
        for &(seq, toks) in step {
            let m = self.queued(seq) + toks.len();
            rows += if all_logits { m } else { (m > 0) as usize };
        }
        let mut logits = vec![0f32; if greedy { 0 } else { rows * self.n_vocab }];
        let mut argmax: Vec<Token> = vec![-1; if greedy { rows } else { 0 }];
        let mut b = unsafe { MaybeUninit::<sys::clade_batch>::zeroed().assume_init() };
        unsafe { sys::clade_batch_init(&mut b) };
        // (the whole struct this binding knows: an older library refuses a
        // field it lacks instead of ignoring it)
        b.size = std::mem::size_of::<sys::clade_batch>();
        b.n_seqs = seqs.len();
        b.seq_ids = seqs.as_ptr();
        b.n_tokens = counts.as_ptr();
        b.tokens = tokens.as_ptr();
        b.all_logits = all_logits as i32;
        if greedy {
            b.argmax = argmax.as_mut_ptr();
        } else {
            b.logits = logits.as_mut_ptr();
        }
        b.logits_rows = rows;
        let cache = self.as_ptr();
        self.shared.run(|| unsafe {
            match parents {
                Some(p) => sys::clade_decode_tree(cache, &b, p.as_ptr()),
                None => sys::clade_decode(cache, &b),
            }
        })?;
        for &s in &seqs {
            if let Some(q) = self.queued_mut(s) {
                *q = 0;
            }
        }
        Ok((rows, logits, argmax))
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        let _g = self.shared.guard();
        unsafe { sys::clade_cache_free(self.ptr.as_ptr()) }
    }
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache").field("max_seqs", &self.max_seqs).finish()
    }
}

// ---- sampler -------------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct SamplerParams {
    /// 0: greedy.
    pub temperature: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub seed: u64,
    /// Subtracted once from each token of the counted history (0: off).
    pub presence_penalty: f32,
    /// Subtracted per occurrence in the counted history (0: off).
    pub frequency_penalty: f32,
    /// (token, bias) pairs added to the logits first; copied at creation.
    pub logit_bias: Vec<(Token, f32)>,
    /// Whether a history's first n_prompt tokens count for the penalties.
    pub penalize_prompt: bool,
}

/// A drawn token, its log-probability in the distribution drawn from, and
/// the most likely alternatives asked for, (token, logprob), most likely
/// first.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleResult {
    pub token: Token,
    pub logprob: f32,
    pub top: Vec<(Token, f32)>,
}

impl Default for SamplerParams {
    fn default() -> Self {
        let mut p = unsafe { MaybeUninit::<sys::clade_sampler_params>::zeroed().assume_init() };
        unsafe { sys::clade_sampler_params_init(&mut p) };
        SamplerParams {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            repeat_penalty: p.repeat_penalty,
            seed: p.seed,
            presence_penalty: p.presence_penalty,
            frequency_penalty: p.frequency_penalty,
            logit_bias: Vec::new(),
            penalize_prompt: p.penalize_prompt != 0,
        }
    }
}

/// Sampling settings and per-stream random state.
pub struct Sampler {
    ptr: NonNull<sys::clade_sampler>,
}

unsafe impl Send for Sampler {}

impl Sampler {
    pub fn new(params: SamplerParams) -> Result<Self> {
        let mut p = unsafe { MaybeUninit::<sys::clade_sampler_params>::zeroed().assume_init() };
        unsafe { sys::clade_sampler_params_init(&mut p) };
        p.temperature = params.temperature;
        p.top_k = params.top_k;
        p.top_p = params.top_p;
        p.min_p = params.min_p;
        p.repeat_penalty = params.repeat_penalty;
        p.seed = params.seed;
        p.presence_penalty = params.presence_penalty;
        p.frequency_penalty = params.frequency_penalty;
        p.penalize_prompt = params.penalize_prompt as i32;
        let bias: Vec<sys::clade_logit_bias> =
            params.logit_bias.iter().map(|&(token, bias)| sys::clade_logit_bias { token, bias }).collect();
        if !bias.is_empty() {
            p.logit_bias = bias.as_ptr();
            p.n_logit_bias = bias.len();
        }
        let mut out = ptr::null_mut();
        check(unsafe { sys::clade_sampler_create(&p, &mut out) })?;
        Ok(Sampler { ptr: NonNull::new(out).expect("clade_sampler_create gave NULL") })
    }

    /// A greedy sampler.
    pub fn greedy() -> Result<Self> {
        Sampler::new(SamplerParams { temperature: 0.0, ..SamplerParams::default() })
    }

    /// Sample a token from one row of logits for stream `stream`; history
    /// feeds the repetition penalty.
    pub fn sample(&mut self, stream: u64, logits: &[f32], history: &[Token]) -> Result<Token> {
        let mut out: Token = 0;
        let h = if history.is_empty() { ptr::null() } else { history.as_ptr() };
        check(unsafe {
            sys::clade_sample(self.ptr.as_ptr(), stream, logits.as_ptr(), logits.len() as i32, h,
                              history.len(), &mut out)
        })?;
        Ok(out)
    }

    /// Sample with the log-probabilities: the drawn token's, and up to
    /// `top` alternatives. `n_prompt`: how many leading history tokens are
    /// the prompt (for `penalize_prompt: false`).
    pub fn sample_ex(&mut self, stream: u64, logits: &[f32], history: &[Token], n_prompt: usize, top: usize)
        -> Result<SampleResult> {
        let mut tt = vec![0 as Token; top];
        let mut tl = vec![0f32; top];
        let mut r = result_struct(&mut tt, &mut tl);
        let h = if history.is_empty() { ptr::null() } else { history.as_ptr() };
        check(unsafe {
            sys::clade_sample_ex(self.ptr.as_ptr(), stream, logits.as_ptr(), logits.len() as i32, h,
                                 history.len(), n_prompt, &mut r)
        })?;
        Ok(unpack_result(&r, &tt, &tl))
    }

    /// Sample rows of `n_vocab` logits (`logits.len()` a multiple of it) in
    /// one call, row r on `streams[r]` with `histories[r]` (empty slice for
    /// none; `histories` empty for none at all) and `n_prompts[r]` (empty:
    /// 0). Each row is drawn as `sample_ex` would.
    pub fn sample_batch(&mut self, logits: &[f32], n_vocab: usize, streams: &[u64], histories: &[&[Token]],
                        n_prompts: &[usize], top: usize) -> Result<Vec<SampleResult>> {
        let rows = streams.len();
        if n_vocab == 0 || logits.len() != rows * n_vocab || (!histories.is_empty() && histories.len() != rows)
            || (!n_prompts.is_empty() && n_prompts.len() != rows) {
            return Err(Error::new(sys::CLADE_E_INVALID_ARG,
                                  "sample_batch: rows, streams and histories disagree".into()));
        }
        let mut tt = vec![0 as Token; rows * top];
        let mut tl = vec![0f32; rows * top];
        let mut res: Vec<sys::clade_sample_result> = Vec::with_capacity(rows);
        for r in 0..rows {
            res.push(result_struct(&mut tt[r * top..(r + 1) * top], &mut tl[r * top..(r + 1) * top]));
        }
        let hp: Vec<*const Token> =
            histories.iter().map(|h| if h.is_empty() { ptr::null() } else { h.as_ptr() }).collect();
        let nh: Vec<usize> = histories.iter().map(|h| h.len()).collect();
        check(unsafe {
            sys::clade_sample_batch(self.ptr.as_ptr(), rows, logits.as_ptr(), n_vocab as i32, streams.as_ptr(),
                                    if histories.is_empty() { ptr::null() } else { hp.as_ptr() },
                                    if histories.is_empty() { ptr::null() } else { nh.as_ptr() },
                                    if n_prompts.is_empty() { ptr::null() } else { n_prompts.as_ptr() },
                                    res.as_mut_ptr())
        })?;
        Ok(res
            .iter()
            .enumerate()
            .map(|(r, x)| unpack_result(x, &tt[r * top..(r + 1) * top], &tl[r * top..(r + 1) * top]))
            .collect())
    }

    /// Drop a finished stream's random state; sampling it again starts
    /// afresh.
    pub fn forget(&mut self, stream: u64) -> Result<()> {
        check(unsafe { sys::clade_sampler_forget(self.ptr.as_ptr(), stream) })
    }
}

fn result_struct(tt: &mut [Token], tl: &mut [f32]) -> sys::clade_sample_result {
    sys::clade_sample_result {
        size: std::mem::size_of::<sys::clade_sample_result>(),
        top_tokens: if tt.is_empty() { ptr::null_mut() } else { tt.as_mut_ptr() },
        top_logprobs: if tl.is_empty() { ptr::null_mut() } else { tl.as_mut_ptr() },
        top_capacity: tt.len(),
        n_top: 0,
        token: -1,
        logprob: 0.0,
    }
}

fn unpack_result(r: &sys::clade_sample_result, tt: &[Token], tl: &[f32]) -> SampleResult {
    let n = r.n_top.min(tt.len());
    SampleResult { token: r.token, logprob: r.logprob, top: (0..n).map(|i| (tt[i], tl[i])).collect() }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        unsafe { sys::clade_sampler_free(self.ptr.as_ptr()) }
    }
}

// ---- generation (clade_generate) ----------------------------------------------------------

/// One prompt of [`Tree::generate`]: tokens under a parent, `None` for the
/// call's root node ([`GenerateParams::root`]) or the index of an earlier
/// prompt of the same slice (a tree of prompts: a shared prefix is
/// evaluated once). A leaf prompt needs at least one token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prompt<'a> {
    pub tokens: &'a [Token],
    pub parent: Option<usize>,
}

impl<'a> Prompt<'a> {
    /// A prompt under the call's root node.
    pub fn new(tokens: &'a [Token]) -> Self {
        Prompt { tokens, parent: None }
    }
    /// A prompt under prompt `parent` (an earlier index).
    pub fn under(parent: usize, tokens: &'a [Token]) -> Self {
        Prompt { tokens, parent: Some(parent) }
    }
}

/// Options of [`Tree::generate`] (clade_generate_params); `Default` gives
/// the C library's defaults.
#[derive(Debug, Clone)]
pub struct GenerateParams {
    /// Per sequence, at least 1.
    pub max_new_tokens: i32,
    /// Sequences under each leaf prompt.
    pub n_samples: i32,
    /// Whether the model's end-of-generation tokens do not stop a sequence.
    pub ignore_eog: bool,
    /// Sequences decoded at once (0: all).
    pub max_live: i32,
    /// More token ids that stop a sequence.
    pub stop_tokens: Vec<Token>,
    /// Stop strings: matched on the text across tokens and cut from it.
    pub stop_strings: Vec<String>,
    pub sampler: SamplerParams,
    /// Keep each output token's log-probability.
    pub logprobs: bool,
    /// Control tokens render as their text.
    pub special: bool,
    pub attention: Attention,
    /// The node prompts with no parent go under.
    pub root: NodeId,
    /// Sequence i draws on stream first_stream + i.
    pub first_stream: u64,
}

impl Default for GenerateParams {
    fn default() -> Self {
        let mut p = unsafe { MaybeUninit::<sys::clade_generate_params>::zeroed().assume_init() };
        unsafe { sys::clade_generate_params_init(&mut p) };
        GenerateParams {
            max_new_tokens: p.max_new_tokens,
            n_samples: p.n_samples,
            ignore_eog: p.ignore_eog != 0,
            max_live: p.max_live,
            stop_tokens: Vec::new(),
            stop_strings: Vec::new(),
            sampler: SamplerParams::default(),
            logprobs: p.logprobs != 0,
            special: p.special != 0,
            attention: Attention::Auto,
            root: p.root,
            first_stream: p.first_stream,
        }
    }
}

/// Why a sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// An end-of-generation or stop token (not part of the output).
    StopToken,
    /// A stop string (cut from the text; its tokens are in the output).
    StopString,
    /// max_new_tokens, or the context's end.
    Length,
    /// The streaming callback stopped it (or all).
    Callback,
    /// The tree's abort callback stopped all.
    Aborted,
    /// Unknown to this binding.
    Other(i32),
}

impl FinishReason {
    fn from_c(r: sys::clade_finish_reason) -> Self {
        match r {
            sys::CLADE_FINISH_STOP_TOKEN => FinishReason::StopToken,
            sys::CLADE_FINISH_STOP_STRING => FinishReason::StopString,
            sys::CLADE_FINISH_LENGTH => FinishReason::Length,
            sys::CLADE_FINISH_CALLBACK => FinishReason::Callback,
            sys::CLADE_FINISH_ABORTED => FinishReason::Aborted,
            other => FinishReason::Other(other),
        }
    }
}

/// One generated sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The text (UTF-8; invalid bytes replaced).
    pub text: String,
    /// The output tokens.
    pub tokens: Vec<Token>,
    pub finish: FinishReason,
    /// The index of its leaf prompt.
    pub prompt: usize,
    /// One per token, when [`GenerateParams::logprobs`] was set.
    pub logprobs: Option<Vec<f32>>,
}

/// What a streaming callback of [`Tree::generate_stream`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Finish this sequence (FinishReason::Callback).
    StopSeq,
    /// Finish every sequence; the results are still returned.
    StopAll,
}

struct StreamSlot<'f> {
    f: &'f mut dyn FnMut(usize, Option<Token>, &str) -> Flow,
    /// A panic of `f`, resumed once C has returned.
    panic: Option<Box<dyn Any + Send>>,
}

unsafe extern "C" fn generate_trampoline(user: *mut c_void, seq: usize, token: Token, text: *const c_char,
                                         len: usize) -> i32 {
    // SAFETY: `user` is the StreamSlot of the running Tree::generate_stream,
    // called on its own thread during the call only.
    let slot = &mut *(user as *mut StreamSlot<'_>);
    if slot.panic.is_some() {
        return sys::CLADE_GENERATE_STOP_ALL;
    }
    let bytes = if len == 0 { &[][..] } else { std::slice::from_raw_parts(text as *const u8, len) };
    let piece = String::from_utf8_lossy(bytes);
    let tok = if token >= 0 { Some(token) } else { None };
    // No unwinding across C: catch, stop everything, resume after the call.
    match panic::catch_unwind(AssertUnwindSafe(|| (slot.f)(seq, tok, &piece))) {
        Ok(Flow::Continue) => sys::CLADE_GENERATE_CONTINUE,
        Ok(Flow::StopSeq) => sys::CLADE_GENERATE_STOP_SEQ,
        Ok(Flow::StopAll) => sys::CLADE_GENERATE_STOP_ALL,
        Err(p) => {
            slot.panic = Some(p);
            sys::CLADE_GENERATE_STOP_ALL
        }
    }
}

// ---- speculative decoding (clade_generate_speculative) -------------------------------------

/// The drafter of a [`Speculative`] call.
pub enum Drafter<'a> {
    /// Prompt lookup: the longest n-gram (at most this long, 1..=64) that
    /// ends a sequence's history and occurs earlier in it; the tokens that
    /// followed that occurrence are the draft.
    Lookup(i32),
    /// A draft model with the same vocabulary as the tree's (a smaller
    /// one); it samples with the call's sampler settings.
    Model(&'a Model),
    /// A drafter of the caller's: `f(seq, history, max_tokens)` for each
    /// live sequence each step, on the calling thread; `history` is the
    /// sequence's prompt path then its output so far, and the returned
    /// tokens (at most `max_tokens`; none: no draft) continue after its
    /// last token. It runs with the tree's lock held: it must not use the
    /// tree or its caches.
    Fn(Box<dyn FnMut(u64, &[Token], usize) -> Vec<Token> + 'a>),
    /// As `Fn`, drafting a tree (clade 1.2; with [`Speculative::tree_width`]
    /// above 1): `(tokens, parents)`, where `parents[j]` is -1 (token j
    /// follows the history) or the index of an earlier token, at most
    /// tree_width children each, one parent per token; `None`: a chain.
    TreeFn(Box<dyn FnMut(u64, &[Token], usize) -> (Vec<Token>, Option<Vec<i32>>) + 'a>),
}

impl fmt::Debug for Drafter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Drafter::Lookup(n) => f.debug_tuple("Lookup").field(n).finish(),
            Drafter::Model(m) => f.debug_tuple("Model").field(&m.as_ptr()).finish(),
            Drafter::Fn(_) => f.write_str("Fn(..)"),
            Drafter::TreeFn(_) => f.write_str("TreeFn(..)"),
        }
    }
}

/// Options of [`Tree::generate_speculative`] (clade_speculative_params):
/// the drafter, and how much it drafts.
#[derive(Debug)]
pub struct Speculative<'a> {
    pub drafter: Drafter<'a>,
    /// Draft tokens per sequence per step, at most (1..=64; default 8).
    pub max_draft: i32,
    /// true (default): draft lengths, and drafting on or off, follow the
    /// measured acceptance and step times; false: always `max_draft`.
    pub adaptive: bool,
    /// Children per draft token at most (1..=8; default 1, chains; clade
    /// 1.2). Above 1 the drafter proposes a tree of alternatives (at most
    /// `max_draft` tokens, 63 at most), verified in one step: the draft
    /// model's next likeliest tokens, prompt lookup's continuations of
    /// several earlier occurrences, or a [`Drafter::TreeFn`]'s parents.
    pub tree_width: i32,
}

impl<'a> Speculative<'a> {
    /// `drafter` with the library's defaults for the rest.
    pub fn new(drafter: Drafter<'a>) -> Self {
        let mut c = unsafe { MaybeUninit::<sys::clade_speculative_params>::zeroed().assume_init() };
        unsafe { sys::clade_speculative_params_init(&mut c) };
        Speculative { drafter, max_draft: c.max_draft, adaptive: c.adaptive != 0, tree_width: c.tree_width }
    }
    /// Prompt lookup with n-grams of at most `ngram` tokens.
    pub fn lookup(ngram: i32) -> Self {
        Speculative::new(Drafter::Lookup(ngram))
    }
    /// A draft model of the same vocabulary.
    pub fn draft_model(model: &'a Model) -> Self {
        Speculative::new(Drafter::Model(model))
    }
    /// A drafter closure: `f(seq, history, max_tokens) -> tokens`.
    pub fn drafter<F>(f: F) -> Self
    where
        F: FnMut(u64, &[Token], usize) -> Vec<Token> + 'a,
    {
        Speculative::new(Drafter::Fn(Box::new(f)))
    }
    /// A tree drafter closure: `f(seq, history, max_tokens) -> (tokens,
    /// parents)` (see [`Drafter::TreeFn`]); set [`Speculative::tree_width`].
    pub fn tree_drafter<F>(f: F) -> Self
    where
        F: FnMut(u64, &[Token], usize) -> (Vec<Token>, Option<Vec<i32>>) + 'a,
    {
        Speculative::new(Drafter::TreeFn(Box::new(f)))
    }
    pub fn max_draft(mut self, n: i32) -> Self {
        self.max_draft = n;
        self
    }
    pub fn adaptive(mut self, on: bool) -> Self {
        self.adaptive = on;
        self
    }
    pub fn tree_width(mut self, w: i32) -> Self {
        self.tree_width = w;
        self
    }
}

/// Counters of one generation (clade_generation_stats).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GenerationStats {
    /// Target decode steps.
    pub steps: u64,
    /// Of them, steps that verified drafts.
    pub spec_steps: u64,
    /// Output tokens.
    pub tokens: u64,
    /// Draft tokens proposed.
    pub drafted: u64,
    /// Draft tokens accepted.
    pub accepted: u64,
    /// Draft model decode steps.
    pub draft_steps: u64,
    /// Time in target decode steps.
    pub target_seconds: f64,
    /// Time drafting (draft model steps, lookup, a drafter closure).
    pub draft_seconds: f64,
}

enum DraftFn<'f> {
    Chain(&'f mut dyn FnMut(u64, &[Token], usize) -> Vec<Token>),
    Tree(&'f mut dyn FnMut(u64, &[Token], usize) -> (Vec<Token>, Option<Vec<i32>>)),
}

struct DraftSlot<'f> {
    f: DraftFn<'f>,
    /// A panic of `f`, resumed once C has returned.
    panic: Option<Box<dyn Any + Send>>,
    /// This binding's refusal of an answer of `f`, returned after the call.
    error: Option<Error>,
}

/// A request's bytes up to the end of its clade 1.2 fields (parents,
/// tree_width): a 1.1 library's requests are shorter.
const TREE_REQUEST_SIZE: usize = std::mem::offset_of!(sys::clade_draft_request, tree_width) + 4;

/// Write a tree drafter's parents into request `r` of an array of stride
/// `stride` (the library checks their values).
unsafe fn write_parents(r: *mut sys::clade_draft_request, stride: usize, n_tokens: usize, parents: &[i32])
    -> Result<()> {
    if parents.len() != n_tokens {
        return Err(Error::new(sys::CLADE_E_INVALID_ARG, format!(
            "the drafter gave sequence {} {} parents for {n_tokens} tokens", (*r).seq, parents.len())));
    }
    if stride < TREE_REQUEST_SIZE {
        // a 1.1 library: chains only
        if parents.iter().enumerate().any(|(j, &p)| p != j as i32 - 1) {
            return Err(Error::new(sys::CLADE_E_UNSUPPORTED, format!(
                "the clade library loaded ({}) has no token trees: the drafter gave a tree", version())));
        }
        return Ok(());
    }
    let max = (*r).max_tokens.max(0) as usize;
    ptr::copy_nonoverlapping(parents.as_ptr(), (*r).parents, parents.len().min(max));
    Ok(())
}

unsafe extern "C" fn draft_trampoline(user: *mut c_void, requests: *mut sys::clade_draft_request,
                                      n_requests: usize) -> i32 {
    // SAFETY: `user` is the DraftSlot of the running generate_speculative,
    // called on its own thread during the call only.
    let slot = &mut *(user as *mut DraftSlot<'_>);
    if slot.panic.is_some() || slot.error.is_some() {
        return -1;
    }
    if n_requests == 0 {
        return 0;
    }
    // The array's stride is the library's sizeof(clade_draft_request),
    // requests[0].size: the struct may grow (or, from a 1.1 library, be
    // shorter than ours: fields are reached through the raw pointer only).
    let stride = (*requests).size;
    let f = &mut slot.f;
    // No unwinding across C: catch, fail the call, resume after it.
    let r = panic::catch_unwind(AssertUnwindSafe(|| -> Result<()> {
        for i in 0..n_requests {
            let r = (requests as *mut u8).add(i * stride) as *mut sys::clade_draft_request;
            let (seq, n_history) = ((*r).seq, (*r).n_history);
            let history = if n_history == 0 { &[][..] } else { std::slice::from_raw_parts((*r).history, n_history) };
            let max = (*r).max_tokens.max(0) as usize;
            let (got, parents) = match f {
                DraftFn::Chain(f) => (f(seq, history, max), None),
                DraftFn::Tree(f) => f(seq, history, max),
            };
            // More than max_tokens: only max_tokens are written, and the
            // library fails the call (n_tokens out of range).
            ptr::copy_nonoverlapping(got.as_ptr(), (*r).tokens, got.len().min(max));
            (*r).n_tokens = got.len().min(i32::MAX as usize) as i32;
            if let Some(p) = parents {
                write_parents(r, stride, got.len(), &p)?;
            }
        }
        Ok(())
    }));
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            slot.error = Some(e);
            -1
        }
        Err(p) => {
            slot.panic = Some(p);
            -1
        }
    }
}

impl Tree {
    /// Generate from prompts in one call (clade_generate): n_samples
    /// sequences under each leaf prompt, numbered leaf by leaf in prompt
    /// order. The results come back also when the tree's abort callback
    /// stopped the call (FinishReason::Aborted).
    pub fn generate(&self, prompts: &[Prompt<'_>], params: &GenerateParams) -> Result<Vec<Generation>> {
        self.generate_impl(prompts, params, None, None).map(|(r, _)| r)
    }

    /// As [`Tree::generate`], streaming: `f(seq, Some(token), piece)` for
    /// each token of sequence `seq` with the text it releases (often empty),
    /// then `f(seq, None, rest)` once at the sequence's end (its return
    /// value ignored). The pieces of a sequence make its text. Returning
    /// Flow::StopSeq or Flow::StopAll stops that sequence or all (the
    /// results are still returned). A panic in `f` stops the call and is
    /// resumed once C has returned. `f` runs with the tree's lock held: it
    /// must not use this tree or its caches.
    pub fn generate_stream<F>(&self, prompts: &[Prompt<'_>], params: &GenerateParams, mut f: F)
        -> Result<Vec<Generation>>
    where
        F: FnMut(usize, Option<Token>, &str) -> Flow,
    {
        let mut slot = StreamSlot { f: &mut f, panic: None };
        let r = self.generate_impl(prompts, params, Some(&mut slot), None);
        if let Some(p) = slot.panic.take() {
            panic::resume_unwind(p);
        }
        r.map(|(r, _)| r)
    }

    /// [`Tree::generate`] with speculative decoding
    /// (clade_generate_speculative): each step `spec`'s drafter proposes
    /// tokens after every live sequence and one decode step verifies them.
    /// Greedy output (temperature 0) is token for token that of
    /// [`Tree::generate`]; sampled output has the same distribution. Returns
    /// the results and the call's counters. A drafter's token outside the
    /// vocabulary fails the call with [`ErrorKind::Token`], more than
    /// `max_tokens` of them, or bad parents of a [`Drafter::TreeFn`], with
    /// [`ErrorKind::InvalidArg`]; a panic in a [`Drafter::Fn`] or
    /// [`Drafter::TreeFn`] stops the call and is resumed once C has returned.
    /// Either way the tree is as before the call.
    pub fn generate_speculative(&self, prompts: &[Prompt<'_>], params: &GenerateParams, spec: &mut Speculative<'_>)
        -> Result<(Vec<Generation>, GenerationStats)> {
        self.generate_impl(prompts, params, None, Some(spec))
    }

    /// [`Tree::generate_speculative`] with streaming, as
    /// [`Tree::generate_stream`].
    pub fn generate_speculative_stream<F>(&self, prompts: &[Prompt<'_>], params: &GenerateParams,
                                          spec: &mut Speculative<'_>, mut f: F)
        -> Result<(Vec<Generation>, GenerationStats)>
    where
        F: FnMut(usize, Option<Token>, &str) -> Flow,
    {
        let mut slot = StreamSlot { f: &mut f, panic: None };
        let r = self.generate_impl(prompts, params, Some(&mut slot), Some(spec));
        if let Some(p) = slot.panic.take() {
            panic::resume_unwind(p);
        }
        r
    }

    fn generate_impl(&self, prompts: &[Prompt<'_>], params: &GenerateParams, slot: Option<&mut StreamSlot<'_>>,
                     spec: Option<&mut Speculative<'_>>)
        -> Result<(Vec<Generation>, GenerationStats)> {
        let mut raw = Vec::with_capacity(prompts.len());
        for (i, p) in prompts.iter().enumerate() {
            let parent = match p.parent {
                None => -1,
                Some(j) if j < i => j as i32,
                Some(j) => {
                    return Err(Error::new(sys::CLADE_E_INVALID_ARG,
                                          format!("prompt {i}: parent {j} is not an earlier prompt")))
                }
            };
            raw.push(sys::clade_prompt { tokens: p.tokens.as_ptr(), n_tokens: p.tokens.len(), parent });
        }
        let s = &params.sampler;
        let mut sp = unsafe { MaybeUninit::<sys::clade_sampler_params>::zeroed().assume_init() };
        unsafe { sys::clade_sampler_params_init(&mut sp) };
        sp.temperature = s.temperature;
        sp.top_k = s.top_k;
        sp.top_p = s.top_p;
        sp.min_p = s.min_p;
        sp.repeat_penalty = s.repeat_penalty;
        sp.seed = s.seed;
        sp.presence_penalty = s.presence_penalty;
        sp.frequency_penalty = s.frequency_penalty;
        sp.penalize_prompt = s.penalize_prompt as i32;
        let bias: Vec<sys::clade_logit_bias> =
            s.logit_bias.iter().map(|&(token, bias)| sys::clade_logit_bias { token, bias }).collect();
        if !bias.is_empty() {
            sp.logit_bias = bias.as_ptr();
            sp.n_logit_bias = bias.len();
        }
        let stops = params.stop_strings.iter().map(|x| c_string(x, "a stop string")).collect::<Result<Vec<_>>>()?;
        let stop_ptrs: Vec<*const c_char> = stops.iter().map(|c| c.as_ptr()).collect();
        let mut gp = unsafe { MaybeUninit::<sys::clade_generate_params>::zeroed().assume_init() };
        unsafe { sys::clade_generate_params_init(&mut gp) };
        gp.max_new_tokens = params.max_new_tokens;
        gp.n_samples = params.n_samples;
        gp.ignore_eog = params.ignore_eog as i32;
        gp.max_live = params.max_live;
        if !params.stop_tokens.is_empty() {
            gp.stop_tokens = params.stop_tokens.as_ptr();
            gp.n_stop_tokens = params.stop_tokens.len();
        }
        if !stop_ptrs.is_empty() {
            gp.stop_strings = stop_ptrs.as_ptr();
            gp.n_stop_strings = stop_ptrs.len();
        }
        gp.sampler = &sp;
        if let Some(slot) = slot {
            gp.callback = Some(generate_trampoline);
            gp.user = slot as *mut StreamSlot<'_> as *mut c_void;
        }
        gp.attention = params.attention as c_int;
        gp.logprobs = params.logprobs as i32;
        gp.special = params.special as i32;
        gp.root = params.root;
        gp.first_stream = params.first_stream;
        let mut draft_slot = None;
        let sp = spec.map(|spec| {
            let mut c = unsafe { MaybeUninit::<sys::clade_speculative_params>::zeroed().assume_init() };
            unsafe { sys::clade_speculative_params_init(&mut c) };
            let mut draft_fn = None;
            match &mut spec.drafter {
                Drafter::Lookup(n) => c.lookup_ngram = *n,
                Drafter::Model(m) => c.draft_model = m.as_ptr(),
                Drafter::Fn(f) => draft_fn = Some(DraftFn::Chain(&mut **f)),
                Drafter::TreeFn(f) => draft_fn = Some(DraftFn::Tree(&mut **f)),
            }
            if let Some(f) = draft_fn {
                let ds = draft_slot.insert(DraftSlot { f, panic: None, error: None });
                c.draft = Some(draft_trampoline);
                c.user = ds as *mut DraftSlot<'_> as *mut c_void;
            }
            c.max_draft = spec.max_draft;
            c.adaptive = spec.adaptive as i32;
            c.tree_width = spec.tree_width;
            c
        });
        let mut out: *mut sys::clade_generation = ptr::null_mut();
        let g = self.shared.guard();
        let st = unsafe {
            match &sp {
                Some(c) => sys::clade_generate_speculative(self.as_ptr(), raw.as_ptr(), raw.len(), &gp, c, &mut out),
                None => sys::clade_generate(self.as_ptr(), raw.as_ptr(), raw.len(), &gp, &mut out),
            }
        };
        let err = if st == sys::CLADE_OK || st == sys::CLADE_STOPPED { None } else { Some(Error::last(st)) };
        // SAFETY: lock held.
        let caught = unsafe {
            let a = *self.shared.abort.get();
            if a.is_null() { None } else { (*a).panic.take() }
        };
        drop(g);
        let results = unsafe { read_generation(out, params.logprobs) };
        let stats = unsafe { read_stats(out) };
        unsafe { sys::clade_generation_free(out) };
        let (draft_panic, draft_err) = draft_slot.map_or((None, None), |d| (d.panic, d.error));
        if let Some(p) = draft_panic.or(caught) {
            panic::resume_unwind(p);
        }
        match draft_err.or(err) {
            Some(e) => Err(e),
            None => Ok((results, stats)),
        }
    }
}

/// The counters of a clade_generation (NULL or an error: zeros).
unsafe fn read_stats(g: *const sys::clade_generation) -> GenerationStats {
    if g.is_null() {
        return GenerationStats::default();
    }
    let mut s = sys::clade_generation_stats { size: std::mem::size_of::<sys::clade_generation_stats>(),
                                              ..Default::default() };
    if sys::clade_generation_get_stats(g, &mut s) != sys::CLADE_OK {
        return GenerationStats::default();
    }
    GenerationStats {
        steps: s.steps,
        spec_steps: s.spec_steps,
        tokens: s.tokens,
        drafted: s.drafted,
        accepted: s.accepted,
        draft_steps: s.draft_steps,
        target_seconds: s.target_seconds,
        draft_seconds: s.draft_seconds,
    }
}

/// The results of a clade_generation (NULL: none).
unsafe fn read_generation(g: *const sys::clade_generation, logprobs: bool) -> Vec<Generation> {
    let n = sys::clade_generation_count(g);
    (0..n)
        .map(|i| {
            let mut len = 0usize;
            let t = sys::clade_generation_text(g, i, &mut len);
            let text = if t.is_null() || len == 0 {
                String::new()
            } else {
                String::from_utf8_lossy(std::slice::from_raw_parts(t as *const u8, len)).into_owned()
            };
            let mut nt = 0usize;
            let tp = sys::clade_generation_tokens(g, i, &mut nt);
            let tokens = if tp.is_null() { Vec::new() } else { std::slice::from_raw_parts(tp, nt).to_vec() };
            let lp = sys::clade_generation_logprobs(g, i);
            let logprobs = if !logprobs {
                None
            } else if lp.is_null() {
                Some(Vec::new())
            } else {
                Some(std::slice::from_raw_parts(lp, tokens.len()).to_vec())
            };
            Generation {
                text,
                tokens,
                finish: FinishReason::from_c(sys::clade_generation_finish(g, i)),
                prompt: sys::clade_generation_prompt(g, i).max(0) as usize,
                logprobs,
            }
        })
        .collect()
}

// ---- generate ------------------------------------------------------------------------------

/// Generate n tokens for `samples` sequences sharing the prompt (one tree
/// node, evaluated once). temperature 0 is greedy. Returns one token list
/// per sample.
pub fn generate(model: &Model, prompt: &[Token], n: usize, samples: usize, temperature: f32,
                seed: u64) -> Result<Vec<Vec<Token>>> {
    if prompt.is_empty() {
        return Err(Error::new(sys::CLADE_E_INVALID_ARG, "generate: the prompt is empty".into()));
    }
    let tree = Tree::new(model, TreeParams::default())?;
    let mut cache = Cache::new(&tree, CacheParams {
        max_seqs: samples.max(1) as i32,
        max_tokens: n.max(1) as i32,
        ..CacheParams::default()
    })?;
    let mut sampler = Sampler::new(SamplerParams { temperature, seed, ..SamplerParams::default() })?;
    let (node, first) = tree.append_logits(ROOT, prompt)?;
    let mut seqs = Vec::with_capacity(samples);
    for _ in 0..samples {
        seqs.push(cache.add(node, &[], false)?);
    }
    tree.release(node)?;
    let mut out: Vec<Vec<Token>> = vec![Vec::new(); samples];
    let mut rows: Vec<Vec<f32>> = vec![first; samples];
    for step in 0..n {
        for i in 0..samples {
            let mut history = prompt.to_vec();
            history.extend_from_slice(&out[i]);
            let t = sampler.sample(i as u64, &rows[i], &history)?;
            out[i].push(t);
        }
        if step + 1 == n {
            break;
        }
        let last: Vec<[Token; 1]> = out.iter().map(|o| [*o.last().unwrap()]).collect();
        let batch: Vec<(SeqId, &[Token])> = seqs.iter().zip(&last).map(|(&s, t)| (s, &t[..])).collect();
        rows = cache.decode(&batch, false)?;
    }
    Ok(out)
}
