//! The [`Cache`] of a tree's sequences and its decode steps.

use std::fmt;
use std::mem::MaybeUninit;
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::{sys, Attention, KvType, NodeId, SeqId, Token};
use crate::error::{check, check_fits, Error, Result};
use crate::model::path_cstring;
use crate::tree::{Shared, Tree};
#[cfg(doc)] // for the documentation's links
use crate::error::ErrorKind;

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
    pub(crate) shared: Arc<Shared>,
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
