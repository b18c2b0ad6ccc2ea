//! Models ([`Model`]: loading, description, tokenizing, detokenizing), chat
//! templates and the streaming [`Detokenizer`].

use std::ffi::{CStr, CString};
use std::fmt;
use std::mem::MaybeUninit;
use std::os::raw::c_char;
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::{sys, Backend, Token};
use crate::error::{c_text, check, check_fits, Error, Result};

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

pub(crate) fn path_cstring(path: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::new(sys::CLADE_E_INVALID_ARG, format!("path {} contains a NUL byte", path.display())))
}

pub(crate) fn c_string(s: &str, what: &str) -> Result<CString> {
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
