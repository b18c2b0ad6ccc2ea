//! Generation in one call (clade_generate, clade_generate_speculative):
//! prompts, parameters, results, streaming, and the simple [`generate`].

use std::any::Any;
use std::mem::MaybeUninit;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{self, AssertUnwindSafe};
use std::ptr;

use crate::{sys, Attention, NodeId, SeqId, Token, ROOT};
use crate::cache::{Cache, CacheParams};
use crate::error::{Error, Result};
use crate::model::{c_string, Model};
use crate::sampler::{Sampler, SamplerParams};
use crate::speculative::{draft_trampoline, DraftFn, DraftSlot, Drafter, GenerationStats,
    Speculative};
use crate::tree::{Tree, TreeParams};
#[cfg(doc)] // for the documentation's links
use crate::error::ErrorKind;

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
    /// (clade 1.5) grammars[i] constrains the sequences under prompt i
    /// (None or missing: unconstrained).
    pub grammars: Vec<Option<std::sync::Arc<crate::Grammar>>>,
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
            grammars: Vec::new(),
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
        let grammar_ptrs: Vec<*const c_void> = params.grammars.iter()
            .map(|g| g.as_ref().map_or(std::ptr::null(), |g| g.as_ptr()))
            .collect();
        if !grammar_ptrs.is_empty() {
            gp.grammars = grammar_ptrs.as_ptr();
            gp.n_grammars = grammar_ptrs.len();
        }
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
