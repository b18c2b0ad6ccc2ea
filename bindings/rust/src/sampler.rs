//! Token sampling from logits: [`Sampler`].

use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};

use crate::{sys, Token};
use crate::error::{check, Error, Result};

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
