//! Errors: [`Error`], [`ErrorKind`], [`Result`] and the status checks of C calls.

use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_char;

use crate::sys;
#[cfg(doc)] // for the documentation's links
use crate::tree::Tree;

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
    pub(crate) fn new(status: sys::clade_status, message: String) -> Error {
        Error { kind: ErrorKind::from_status(status), status, message }
    }
    pub(crate) fn last(status: sys::clade_status) -> Error {
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

pub(crate) fn check(status: sys::clade_status) -> Result<()> {
    if status == sys::CLADE_OK {
        Ok(())
    } else {
        Err(Error::last(status))
    }
}

/// Ok(true) for CLADE_OK, Ok(false) for CLADE_BUFFER_SMALL, Err otherwise.
pub(crate) fn check_fits(status: sys::clade_status) -> Result<bool> {
    match status {
        sys::CLADE_OK => Ok(true),
        sys::CLADE_BUFFER_SMALL => Ok(false),
        s => Err(Error::last(s)),
    }
}

pub(crate) fn c_text(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
