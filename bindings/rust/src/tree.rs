//! The shared-cache [`Tree`] of a model: nodes, the KV budget, the abort
//! callback and batched appends ([`AppendItem`]).

use std::any::Any;
use std::cell::UnsafeCell;
use std::fmt;
use std::mem::MaybeUninit;
use std::os::raw::c_void;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::{sys, KvType, NodeId, SeqId, Token};
use crate::cache::Cache;
use crate::error::{check, check_fits, Error, Result};
use crate::model::{path_cstring, Model};
#[cfg(doc)] // for the documentation's links
use crate::{error::ErrorKind, ROOT};

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
pub(crate) struct AbortSlot {
    f: AbortCallback,
    /// A panic of `f`, caught in the trampoline, to resume after the C call.
    pub(crate) panic: Option<Box<dyn Any + Send>>,
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
pub(crate) struct Shared {
    lock: Mutex<()>,
    /// The installed AbortSlot (Box::into_raw), or null. Read and written
    /// only with `lock` held.
    pub(crate) abort: UnsafeCell<*mut AbortSlot>,
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
    pub(crate) fn guard(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run a C call that may invoke the abort callback, with the lock held;
    /// a panic the callback raised is resumed here, after the call, with
    /// the lock released.
    pub(crate) fn run(&self, f: impl FnOnce() -> sys::clade_status) -> Result<()> {
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
    pub(crate) shared: Arc<Shared>,
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

    pub(crate) fn call(&self, f: impl FnOnce(*mut sys::clade_tree) -> sys::clade_status) -> Result<()> {
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
