//! The process-wide log callback ([`set_log`]) and its C trampoline.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{self, AssertUnwindSafe};
use std::ptr;
use std::sync::{Arc, RwLock};

use crate::sys;

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
