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

// One module per part of the API (error, log, model, tree, cache, sampler,
// generation, speculative), re-exported here: the crate's paths are flat.
mod cache;
mod error;
mod generation;
mod grammar;
mod log;
mod model;
mod sampler;
mod speculative;
mod tree;

pub use cache::{Cache, CacheParams};
pub use error::{status_string, Error, ErrorKind, Result};
pub use generation::{generate, FinishReason, Flow, GenerateParams, Generation, Prompt};
pub use grammar::{Grammar, GrammarKind, GrammarParams};
pub use log::{set_log, LogCallback, LogLevel};
pub use model::{chat_templates, ChatMessage, Detokenizer, Model, ModelInfo, ModelParams,
    SpecialTokens};
pub use sampler::{SampleResult, Sampler, SamplerParams};
pub use speculative::{Drafter, GenerationStats, Speculative};
pub use tree::{AbortCallback, AppendItem, AppendResult, NodeInfo, Parent, Tree, TreeParams,
    TREE_ALLOW_LONG_CONTEXT, TREE_PREFIX_CACHE};

use std::ffi::CStr;

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

