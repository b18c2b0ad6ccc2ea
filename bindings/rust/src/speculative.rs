//! Speculative decoding's drafters ([`Speculative`], [`Drafter`]), its
//! counters ([`GenerationStats`]) and the draft callback's trampoline.

use std::any::Any;
use std::fmt;
use std::mem::MaybeUninit;
use std::os::raw::c_void;
use std::panic::{self, AssertUnwindSafe};
use std::ptr;

use crate::{sys, version, Token};
use crate::error::{Error, Result};
use crate::model::Model;
#[cfg(doc)] // for the documentation's links
use crate::tree::Tree;

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

pub(crate) enum DraftFn<'f> {
    Chain(&'f mut dyn FnMut(u64, &[Token], usize) -> Vec<Token>),
    Tree(&'f mut dyn FnMut(u64, &[Token], usize) -> (Vec<Token>, Option<Vec<i32>>)),
}

pub(crate) struct DraftSlot<'f> {
    pub(crate) f: DraftFn<'f>,
    /// A panic of `f`, resumed once C has returned.
    pub(crate) panic: Option<Box<dyn Any + Send>>,
    /// This binding's refusal of an answer of `f`, returned after the call.
    pub(crate) error: Option<Error>,
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

pub(crate) unsafe extern "C" fn draft_trampoline(user: *mut c_void, requests: *mut sys::clade_draft_request,
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
