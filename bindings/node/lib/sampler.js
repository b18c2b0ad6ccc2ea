// lib/sampler.js: the idiomatic Sampler (sample, sampleEx with top
// alternatives, sampleBatch, forget) and the sampler options shared with
// generation.
'use strict';

const { native, Handle, options, typeError } = require('./util');

const SAMPLER_OPTS = ['temperature', 'topK', 'topP', 'minP', 'repeatPenalty', 'seed',
  'presencePenalty', 'frequencyPenalty', 'logitBias', 'penalizePrompt', 'nThreads'];

/** logitBias as [token, bias] pairs: from a Map, pairs, or {token: bias}. */
function biasPairs(b) {
  if (b === undefined || b === null) return undefined;
  if (b instanceof Map) return [...b.entries()];
  if (Array.isArray(b)) return b;
  if (typeof b === 'object') return Object.entries(b).map(([k, v]) => [Number(k), v]);
  throw typeError('logitBias must be a Map, an Array of [token, bias] or {token: bias}');
}

/** The addon's clade_sampler_params from camelCase options (absent: the
 *  library's defaults). */
function samplerParams(o) {
  return {
    temperature: o.temperature, top_k: o.topK, top_p: o.topP, min_p: o.minP,
    repeat_penalty: o.repeatPenalty, seed: o.seed, presence_penalty: o.presencePenalty,
    frequency_penalty: o.frequencyPenalty, logit_bias: biasPairs(o.logitBias),
    penalize_prompt: o.penalizePrompt, n_threads: o.nThreads,
  };
}

function result(r) {
  const top = [];
  for (let i = 0; i < r.top_tokens.length; i++) top.push([r.top_tokens[i], r.top_logprobs[i]]);
  return { token: r.token, logprob: r.logprob, top };
}

class Sampler extends Handle {
  /** temperature (0: greedy; default 0.8), topK 40, topP 0.95, minP 0.05,
   *  repeatPenalty 1, seed 0, presencePenalty, frequencyPenalty, logitBias,
   *  penalizePrompt (true), nThreads. */
  constructor(opts) {
    const o = options(opts, SAMPLER_OPTS, 'Sampler');
    super(native.sampler_create(samplerParams(o)), native.sampler_free);
  }

  /** A token from one row of logits (a Float32Array) on stream `stream`;
   *  history feeds the penalties. */
  sample(logits, opts) {
    const o = options(opts, ['stream', 'history'], 'sample');
    return native.sample(this._get(), o.stream ?? 0, logits, o.history ?? null);
  }

  /** {token, logprob, top: [[token, logprob], ...]} (top: the alternatives
   *  wanted). */
  sampleEx(logits, opts) {
    const o = options(opts, ['stream', 'history', 'nPrompt', 'top'], 'sampleEx');
    return result(native.sample_ex(this._get(), o.stream ?? 0, logits, o.history ?? null,
      o.nPrompt ?? 0, o.top ?? 0));
  }

  /** Many rows at once: rows (Float32Arrays of one length), streams (one
   *  per row), histories and nPrompts (optional, per row). */
  sampleBatch(rows, opts) {
    const o = options(opts, ['streams', 'histories', 'nPrompts', 'top'], 'sampleBatch');
    if (!Array.isArray(rows) || rows.length === 0) throw typeError('sampleBatch: rows must be a non-empty Array');
    const nv = rows[0].length;
    const flat = new Float32Array(rows.length * nv);
    rows.forEach((r, i) => {
      if (!(r instanceof Float32Array) || r.length !== nv) {
        throw typeError('sampleBatch: rows must be Float32Arrays of one length');
      }
      flat.set(r, i * nv);
    });
    const streams = o.streams ?? rows.map((_, i) => i);
    return native.sample_batch(this._get(), flat, nv, streams, o.histories ?? null,
      o.nPrompts ?? null, o.top ?? 0).map(result);
  }

  /** Forget a stream's random state. */
  forget(stream) {
    native.sampler_forget(this._get(), stream);
  }
}

module.exports = { Sampler, SAMPLER_OPTS, samplerParams };
