//! Structured output (clade 1.5): [`Grammar`] (clade_grammar: a GBNF
//! grammar, a JSON Schema, a regular expression or any JSON value compiled
//! for a model's vocabulary), given to generation through
//! [`GenerateParams::grammars`](crate::GenerateParams).

use std::mem::MaybeUninit;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::NonNull;

use crate::error::{check, Error, Result};
use crate::model::Model;
use crate::sys;

/// What a grammar's text is (clade_grammar_kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrammarKind {
    /// llama.cpp's GBNF (root rule `root`).
    Gbnf = 0,
    /// A JSON Schema (draft 2020-12).
    JsonSchema = 1,
    /// A regular expression, matched whole.
    Regex = 2,
    /// Any JSON value (the text is ignored).
    Json = 3,
}

/// Options of [`Grammar::new`] (clade_grammar_params).
#[derive(Debug, Clone, Copy)]
pub struct GrammarParams {
    pub kind: GrammarKind,
    /// Ignore schema keywords that cannot be enforced (else an error naming them).
    pub lenient: bool,
    /// JSON with whitespace between tokens (default: compact).
    pub free_whitespace: bool,
    /// Append text the grammar forces without sampling it (default on).
    pub jump_forward: bool,
}

impl Default for GrammarParams {
    fn default() -> Self {
        GrammarParams { kind: GrammarKind::Gbnf, lenient: false, free_whitespace: false, jump_forward: true }
    }
}

#[repr(C)]
struct RawParams {
    size: usize,
    kind: c_int,
    lenient: i32,
    free_whitespace: i32,
    jump_forward: i32,
}

extern "C" {
    fn clade_grammar_params_init(p: *mut RawParams);
    fn clade_grammar_create(model: *const sys::clade_model, text: *const c_char, len: usize, p: *const RawParams,
                            out: *mut *mut c_void) -> sys::clade_status;
    fn clade_grammar_free(g: *mut c_void);
}

/// A grammar compiled for a model's vocabulary: read-only, shareable
/// between threads and calls.
#[derive(Debug)]
pub struct Grammar {
    ptr: NonNull<c_void>,
}

// The header: "a clade_grammar is immutable once made; any number of
// threads and calls may use one at once".
unsafe impl Send for Grammar {}
unsafe impl Sync for Grammar {}

impl Grammar {
    /// Compiles `text` for `model`'s vocabulary. A grammar that does not
    /// compile is an error naming the keyword and JSON pointer, the regex
    /// column or the GBNF line:column.
    pub fn new(model: &Model, text: &str, params: GrammarParams) -> Result<Grammar> {
        let mut p = unsafe { MaybeUninit::<RawParams>::zeroed().assume_init() };
        unsafe { clade_grammar_params_init(&mut p) };
        p.kind = params.kind as c_int;
        p.lenient = params.lenient as i32;
        p.free_whitespace = params.free_whitespace as i32;
        p.jump_forward = params.jump_forward as i32;
        let mut out: *mut c_void = std::ptr::null_mut();
        check(unsafe {
            clade_grammar_create(model.as_ptr(), text.as_ptr() as *const c_char, text.len(), &p, &mut out)
        })?;
        NonNull::new(out)
            .map(|ptr| Grammar { ptr })
            .ok_or_else(|| Error::new(sys::CLADE_E_INTERNAL, "clade_grammar_create gave NULL".into()))
    }

    /// A JSON Schema grammar with the default options.
    pub fn json_schema(model: &Model, schema: &str) -> Result<Grammar> {
        Grammar::new(model, schema, GrammarParams { kind: GrammarKind::JsonSchema, ..Default::default() })
    }

    pub(crate) fn as_ptr(&self) -> *const c_void {
        self.ptr.as_ptr()
    }
}

impl Drop for Grammar {
    fn drop(&mut self) {
        unsafe { clade_grammar_free(self.ptr.as_ptr()) }
    }
}
