// lib/model.js: the idiomatic Model (loaded off the JS thread; describe,
// tokenizer, chat templates, a one-call generate), the streaming
// Detokenizer, and the model-free chat helpers.
'use strict';

const { native, C, INTERNAL, Handle, options, snakeToCamel, tokenList, typeError } =
  require('./util');

const LOAD_OPTS = ['backend', 'nThreads', 'vocabOnly', 'useMmap'];

class Model extends Handle {
  /** Use `await Model.load(path, options)`. */
  constructor(internal, h) {
    if (internal !== INTERNAL) throw typeError('use `await Model.load(path)` to load a model');
    super(h, native.model_free);
    this.nVocab = native.model_describe(h).n_vocab;
  }

  /** Load a GGUF file on a worker thread. */
  static async load(path, opts) {
    const o = options(opts, LOAD_OPTS, 'Model.load');
    if (typeof path !== 'string') throw typeError('Model.load: path must be a string');
    const h = await native.model_load(path, {
      backend: o.backend, n_threads: o.nThreads, vocab_only: o.vocabOnly, use_mmap: o.useMmap,
    });
    return new Model(INTERNAL, h);
  }

  /** clade_model_describe, camelCase (nLayers, nVocab, weightTypeName...). */
  info() {
    return snakeToCamel(native.model_describe(this._get()));
  }

  /** {bos, eos, eot, pad, unk} (-1 where none), addBos, addEos. */
  specialTokens() {
    return snakeToCamel(native.model_special_tokens(this._get()));
  }

  isEog(token) {
    return native.token_is_eog(this._get(), token);
  }

  /** Text to token ids (an Array). addSpecial (default true) adds BOS/EOS as
   *  the model asks; parseSpecial matches control-token texts. */
  tokenize(text, opts) {
    const o = options(opts, ['addSpecial', 'parseSpecial'], 'tokenize');
    const flags = (o.addSpecial === false ? 0 : C.CLADE_TOKENIZE_ADD_SPECIAL) |
      (o.parseSpecial ? C.CLADE_TOKENIZE_PARSE_SPECIAL : 0);
    return tokenList(native.tokenize(this._get(), text, flags));
  }

  /** Token ids to text (invalid UTF-8 replaced); see detokenizeBytes. */
  detokenize(tokens, opts) {
    return this.detokenizeBytes(tokens, opts).toString('utf8');
  }

  detokenizeBytes(tokens, opts) {
    const o = options(opts, ['special'], 'detokenize');
    return native.detokenize(this._get(), tokens, !!o.special);
  }

  /** One token's bytes (a Buffer: may be part of a UTF-8 character). */
  tokenToPiece(token, opts) {
    const o = options(opts, ['special'], 'tokenToPiece');
    return native.token_to_piece(this._get(), token, !!o.special);
  }

  /** A streaming detokenizer of this model. */
  detokenizer(opts) {
    return new Detokenizer(this, opts);
  }

  /** Format a conversation with template (a name) or the model's own. */
  chatApply(messages, opts) {
    const o = options(opts, ['template', 'addAssistantPrompt'], 'chatApply');
    return native.chat_apply(this._get(), o.template ?? null, messages,
      o.addAssistantPrompt !== false);
  }

  /** The family recognized from the model's chat template. */
  chatTemplateName() {
    return native.chat_template_name(this._get());
  }

  /** A Tree of this model (see Tree). */
  tree(opts) {
    const { Tree } = require('./tree');
    return new Tree(this, opts);
  }

  /** generate on a tree made for the call (options as Tree.generate, plus
   *  kvType). */
  async generate(prompts, opts) {
    const { kvType, ...rest } = opts || {};
    const t = this.tree({ kvType });
    try {
      return await t.generate(prompts, rest);
    } finally {
      t.close();
    }
  }
}

class Detokenizer extends Handle {
  /** Feed tokens one at a time; push gives the text that is complete.
   *  firstInText (default true) drops the first token's leading space. */
  constructor(model, opts) {
    if (!(model instanceof Model)) throw typeError('Detokenizer: model must be a clade Model');
    const o = options(opts, ['special', 'firstInText'], 'Detokenizer');
    super(native.detokenizer_create(model._get(), !!o.special, o.firstInText !== false),
      native.detokenizer_free);
  }

  push(token) {
    return native.detokenizer_push(this._get(), token);
  }

  /** What is left (an incomplete character at the end). */
  flush() {
    return native.detokenizer_flush(this._get());
  }
}

/** The chat template names clade knows. */
function chatTemplates() {
  return native.chat_template_list();
}

/** Format messages with a named template (no model: BOS/EOS are <s>, </s>). */
function chatApply(messages, opts) {
  const o = options(opts, ['template', 'addAssistantPrompt', 'model'], 'chatApply');
  if (o.model !== undefined && o.model !== null) {
    if (!(o.model instanceof Model)) throw typeError('chatApply: model must be a clade Model');
    return o.model.chatApply(messages, { template: o.template, addAssistantPrompt: o.addAssistantPrompt });
  }
  if (typeof o.template !== 'string') throw typeError('chatApply: a template name is needed');
  return native.chat_apply(null, o.template, messages, o.addAssistantPrompt !== false);
}

module.exports = { Model, Detokenizer, chatTemplates, chatApply };
