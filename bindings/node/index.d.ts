// index.d.ts: TypeScript declarations of clade's Node.js binding: the
// idiomatic layer (lib/) and the addon's one-to-one calls (`native`).

/// <reference types="node" />

export type Token = number;
export type NodeId = number;
export type SeqId = number;
export type Tokens = readonly number[] | Int32Array;
/** A 64-bit unsigned value: a safe non-negative integer or a bigint. */
export type U64 = number | bigint;

/** A failed clade call. */
export class CladeError extends Error {
  constructor(message: string, status: number, code?: string);
  /** The clade_status (negative: an error; positive: a recoverable state). */
  status: number;
  /** The status's name, e.g. "CLADE_E_TOKEN", "CLADE_CACHE_FULL". */
  code: string;
}

/** Wrong argument types (TypeError) and out-of-range numbers (RangeError)
 *  carry these too. */
export interface ArgumentError extends Error {
  status: -1;
  code: 'CLADE_E_INVALID_ARG';
}

declare abstract class Handle {
  /** Free the handle now (also done by the garbage collector); idempotent. */
  close(): void;
  readonly closed: boolean;
}

export interface LoadOptions {
  backend?: number;
  nThreads?: number;
  vocabOnly?: boolean;
  useMmap?: boolean;
}

export interface ModelInfo {
  architecture: string;
  name: string;
  nLayers: number;
  nEmbd: number;
  nHeads: number;
  nKvHeads: number;
  headDim: number;
  nFf: number;
  nVocab: number;
  nCtx: number;
  ropeFreqBase: number;
  ropeFreqScale: number;
  ropeScaling: number;
  normEps: number;
  weightType: number;
  weightTypeName: string;
  hasQkvBias: number;
  tiedOutput: number;
  vocabOnly: number;
  nParams: number;
  weightBytes: number;
}

export interface SpecialTokens {
  bos: Token;
  eos: Token;
  eot: Token;
  pad: Token;
  unk: Token;
  addBos: boolean;
  addEos: boolean;
}

export interface ChatMessage {
  role: string;
  content: string;
}

export class Model extends Handle {
  private constructor(internal: symbol, handle: unknown);
  static load(path: string, options?: LoadOptions): Promise<Model>;
  readonly nVocab: number;
  info(): ModelInfo;
  specialTokens(): SpecialTokens;
  isEog(token: Token): boolean;
  tokenize(text: string, options?: { addSpecial?: boolean; parseSpecial?: boolean }): Token[];
  detokenize(tokens: Tokens, options?: { special?: boolean }): string;
  detokenizeBytes(tokens: Tokens, options?: { special?: boolean }): Buffer;
  tokenToPiece(token: Token, options?: { special?: boolean }): Buffer;
  detokenizer(options?: DetokenizerOptions): Detokenizer;
  chatApply(messages: readonly ChatMessage[], options?: { template?: string; addAssistantPrompt?: boolean }): string;
  chatTemplateName(): string;
  tree(options?: TreeOptions): Tree;
  generate(prompts: readonly Prompt[], options?: GenerateOptions & { kvType?: number }): Promise<GenerationList>;
}

export interface DetokenizerOptions {
  special?: boolean;
  /** Drop the first token's SentencePiece leading space (default true). */
  firstInText?: boolean;
}

export class Detokenizer extends Handle {
  constructor(model: Model, options?: DetokenizerOptions);
  push(token: Token): string;
  flush(): string;
}

export interface TreeOptions {
  kvType?: number;
  prefillChunk?: number;
  flags?: number;
  kvBudget?: U64;
}

export interface AppendResult {
  node: NodeId;
  logits: Float32Array | null;
}

export interface AppendItem {
  /** A node, or itemNode(i) for the node of an earlier item of the call. */
  parent?: NodeId;
  tokens?: Tokens;
  /** The item is a new sequence of this cache. */
  cache?: Cache;
  wantLogits?: boolean;
}

export interface NodeInfo {
  parent: NodeId;
  length: number;
  pathLength: number;
  nChildren: number;
  nRefs: number;
}

export class Tree extends Handle {
  constructor(model: Model, options?: TreeOptions);
  readonly model: Model;
  readonly nVocab: number;
  append(parent: NodeId, tokens: Tokens, options?: { wantLogits?: boolean; signal?: AbortSignal }): Promise<AppendResult>;
  appendPrefix(tokens: Tokens, options?: { wantLogits?: boolean; signal?: AbortSignal }): Promise<AppendResult & { reused: number }>;
  appendBatch(items: readonly AppendItem[], options?: { signal?: AbortSignal }): Promise<Array<{ node: NodeId | null; seq: SeqId | null; logits: Float32Array | null }>>;
  release(node: NodeId): void;
  nodeInfo(node: NodeId): NodeInfo;
  nodeTokens(node: NodeId): Token[];
  children(node: NodeId): NodeId[];
  kvBytes(): number;
  kvUsed(): number;
  setKvBudget(bytes: U64): void;
  trim(bytes?: U64): number;
  save(node: NodeId, path: string): Promise<void>;
  load(path: string): Promise<{ node: NodeId; nTokens: number; reused: number }>;
  cache(options?: CacheOptions): Cache;
  generate(prompts: readonly Prompt[], options?: GenerateOptions): Promise<GenerationList>;
  stream(prompts: readonly Prompt[], options?: Omit<GenerateOptions, 'onPiece'>): GenerationStream;
}

export interface CacheOptions {
  maxSeqs?: number;
  maxTokens?: number;
  kvType?: number;
  attention?: number;
}

/** A decode step: each sequence's new tokens. */
export type Step = Map<SeqId, Tokens> | ReadonlyArray<readonly [SeqId, Tokens]> | { [seq: number]: Tokens };

export class Cache extends Handle {
  constructor(tree: Tree, options?: CacheOptions);
  readonly tree: Tree;
  readonly nVocab: number;
  add(node: NodeId, tokens?: Tokens, options?: { private?: boolean }): SeqId;
  remove(seq: SeqId): void;
  truncate(seq: SeqId, length: number): void;
  length(seq: SeqId): number;
  kvBytes(): number;
  fork(seq: SeqId): SeqId;
  promote(seq: SeqId): NodeId;
  move(seq: SeqId, node: NodeId): void;
  seqNode(seq: SeqId): NodeId;
  seqTokens(seq: SeqId): Token[];
  keep(seq: SeqId, from: number, keep: Tokens): void;
  save(seq: SeqId, path: string): Promise<void>;
  decode(step: Step, options?: { allLogits?: boolean; signal?: AbortSignal }): Promise<Float32Array[]>;
  decodeGreedy(step: Step, options?: { allLogits?: boolean; signal?: AbortSignal }): Promise<Token[]>;
  decodeTree(step: Step, parents: Tokens, options?: { allLogits?: boolean; signal?: AbortSignal }): Promise<Float32Array[]>;
}

export type LogitBias = Map<Token, number> | ReadonlyArray<readonly [Token, number]> | { [token: number]: number };

export interface SamplerOptions {
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repeatPenalty?: number;
  seed?: U64;
  presencePenalty?: number;
  frequencyPenalty?: number;
  logitBias?: LogitBias;
  penalizePrompt?: boolean;
  nThreads?: number;
}

export interface SampleResult {
  token: Token;
  logprob: number;
  /** The most likely kept tokens with their log-probabilities. */
  top: Array<[Token, number]>;
}

export class Sampler extends Handle {
  constructor(options?: SamplerOptions);
  sample(logits: Float32Array, options?: { stream?: U64; history?: Tokens | null }): Token;
  sampleEx(logits: Float32Array, options?: { stream?: U64; history?: Tokens | null; nPrompt?: number; top?: number }): SampleResult;
  sampleBatch(rows: readonly Float32Array[], options?: { streams?: readonly U64[]; histories?: ReadonlyArray<Tokens | null>; nPrompts?: readonly number[]; top?: number }): SampleResult[];
  forget(stream: U64): void;
}

/** Token ids (under the call's root), or tokens under an earlier prompt. */
export type Prompt = Tokens | { tokens: Tokens; parent?: number | null };

export interface GenerateOptions extends SamplerOptions {
  maxNewTokens?: number;
  samples?: number;
  stop?: string | readonly string[];
  stopTokens?: Tokens;
  ignoreEog?: boolean;
  maxLive?: number;
  logprobs?: boolean;
  topLogprobs?: number;
  special?: boolean;
  attention?: number;
  root?: NodeId;
  firstStream?: U64;
  /** Each piece, on the JS thread; STOP_SEQ / STOP_ALL stop from the next token. */
  onPiece?: (seq: number, token: Token | null, text: string) => void | number;
  signal?: AbortSignal;
  /** Speculative decoding: a drafter of the caller's (called on the JS
   *  thread, the generation's worker waiting for it; one draft per
   *  request: token ids, or {tokens, parents} for token trees), */
  draft?: (requests: DraftRequest[]) => ReadonlyArray<Tokens | { tokens: Tokens; parents?: Tokens } | null | undefined>;
  /** a draft model of the same vocabulary, */
  draftModel?: Model;
  /** or prompt lookup of n-grams up to this length. */
  lookup?: number;
  maxDraft?: number;
  adaptive?: boolean;
  treeWidth?: number;
}

export interface DraftRequest {
  /** The sequence's number in the generation. */
  seq: number;
  /** Its prompt path, then its output so far: drafts continue after it. */
  history: Int32Array;
  /** Leading history tokens of the prompt. */
  nPrompt: number;
  /** Draft at most this many tokens. */
  maxTokens: number;
  /** Children per draft token at most (1: chains only). */
  treeWidth: number;
}

export type FinishReason = 'none' | 'stop_token' | 'stop_string' | 'length' | 'callback' | 'aborted';

export interface Generation {
  text: string;
  tokens: Token[];
  finish: FinishReason;
  /** The index of the sequence's leaf prompt. */
  prompt: number;
  logprobs: number[] | null;
  top: Array<Array<[Token, number]>> | null;
}

export interface GenerationStats {
  steps: number;
  specSteps: number;
  tokens: number;
  drafted: number;
  accepted: number;
  draftSteps: number;
  targetSeconds: number;
  draftSeconds: number;
}

export interface GenerationList extends Array<Generation> {
  stats: GenerationStats;
  /** STOP_ALL, stop(), leaving a stream's loop or an AbortSignal stopped it. */
  stopped: boolean;
}

export interface Piece {
  seq: number;
  /** null: the sequence's last piece (the rest of its text). */
  token: Token | null;
  text: string;
}

export class GenerationStream implements AsyncIterableIterator<Piece> {
  private constructor(nSeqs: number, signal?: AbortSignal);
  readonly result: Promise<GenerationList>;
  stop(seq?: number): void;
  next(): Promise<IteratorResult<Piece>>;
  return(): Promise<IteratorResult<Piece>>;
  [Symbol.asyncIterator](): GenerationStream;
}

export function version(): string;
export function statusString(status: number): string;
export function setLog(fn: ((level: number, message: string) => void) | null, minLevel?: number): void;
export function chatTemplates(): string[];
export function chatApply(messages: readonly ChatMessage[], options: { template?: string; addAssistantPrompt?: boolean; model?: Model }): string;
/** In Tree.appendBatch, the node made by item i of the same call. */
export function itemNode(i: number): NodeId;

export const STOP_SEQ: number;
export const STOP_ALL: number;
export const KV_DEFAULT: number;
export const KV_F32: number;
export const KV_F16: number;
export const KV_BF16: number;
export const ATTENTION_AUTO: number;
export const ATTENTION_SHARED: number;
export const ATTENTION_FLAT: number;
export const ATTENTION_NONE: number;
export const BACKEND_CPU: number;
export const BACKEND_CUDA: number;
export const TREE_ALLOW_LONG_CONTEXT: number;
export const TREE_PREFIX_CACHE: number;
export const LOG_DEBUG: number;
export const LOG_INFO: number;
export const LOG_WARN: number;
export const LOG_ERROR: number;
/** The statuses by name without CLADE_: OK, CACHE_FULL, ..., E_TOKEN, ... */
export const status: Readonly<Record<string, number>>;

/** The addon's handles: opaque, type-tagged objects. */
export interface NativeHandle { readonly __brand: 'clade native handle' }
/** A stop flag: element 0 nonzero stops the call; in generate, element
 *  1 + seq stops sequence seq. */
export type StopFlags = Int32Array | null;

export interface NativeGenerateResult {
  results: Array<{ text: string; tokens: Int32Array; logprobs: Float32Array | null; finish: FinishReason; prompt: number;
    top_tokens?: Int32Array; top_logprobs?: Float32Array | null; top_per_token?: number }>;
  stats: { steps: number; spec_steps: number; tokens: number; drafted: number; accepted: number; draft_steps: number;
    target_seconds: number; draft_seconds: number };
  stopped: boolean;
}

export interface NativeSampleResult {
  token: Token;
  logprob: number;
  top_tokens: Int32Array;
  top_logprobs: Float32Array;
}

/** The one-to-one layer: C's calls and snake_case struct fields. */
export const native: {
  constants: Readonly<Record<string, number>>;
  version_number(): number;
  version_string(): string;
  status_string(status: number): string;
  status_name(status: number): string;
  last_error(): string;
  set_log(fn: ((level: number, message: string) => void) | null, min_level?: number): void;
  set_error_class(ctor: new (message: string, status: number, code: string) => Error): void;
  model_load(path: string, params?: { backend?: number; n_threads?: number; vocab_only?: boolean; use_mmap?: boolean } | null): Promise<NativeHandle>;
  model_free(model: NativeHandle | null): void;
  model_describe(model: NativeHandle): Record<string, number | string>;
  tokenize(model: NativeHandle, text: string, flags: number): Int32Array;
  detokenize(model: NativeHandle, tokens: Tokens, special: boolean): Buffer;
  token_to_piece(model: NativeHandle, token: Token, special: boolean): Buffer;
  model_special_tokens(model: NativeHandle): Record<string, number | boolean>;
  token_is_eog(model: NativeHandle, token: Token): boolean;
  detokenizer_create(model: NativeHandle, special: boolean, first_in_text: boolean): NativeHandle;
  detokenizer_push(detok: NativeHandle, token: Token): string;
  detokenizer_flush(detok: NativeHandle): string;
  detokenizer_free(detok: NativeHandle | null): void;
  chat_apply(model: NativeHandle | null, template: string | null, messages: readonly ChatMessage[], add_assistant_prompt: boolean): string;
  chat_template_name(model: NativeHandle): string;
  chat_template_list(): string[];
  tree_create(model: NativeHandle, params?: { kv_type?: number; prefill_chunk?: number; flags?: number; kv_budget?: U64 } | null): NativeHandle;
  tree_free(tree: NativeHandle | null): void;
  tree_append(tree: NativeHandle, parent: NodeId, tokens: Tokens, want_logits: boolean, ctrl: StopFlags): Promise<AppendResult>;
  tree_append_prefix(tree: NativeHandle, tokens: Tokens, want_logits: boolean, ctrl: StopFlags): Promise<AppendResult & { reused: number }>;
  tree_append_batch(tree: NativeHandle, items: ReadonlyArray<{ parent?: NodeId; tokens?: Tokens; cache?: NativeHandle; want_logits?: boolean }>, ctrl: StopFlags): Promise<Array<{ node: NodeId; seq: SeqId; logits: Float32Array | null }>>;
  tree_release(tree: NativeHandle, node: NodeId): void;
  tree_node_info(tree: NativeHandle, node: NodeId): { parent: NodeId; length: number; path_length: number; n_children: number; n_refs: number };
  tree_node_tokens(tree: NativeHandle, node: NodeId): Int32Array;
  tree_children(tree: NativeHandle, node: NodeId): Int32Array;
  tree_kv_bytes(tree: NativeHandle): number;
  tree_kv_used(tree: NativeHandle): number;
  tree_set_kv_budget(tree: NativeHandle, bytes: U64): void;
  tree_trim(tree: NativeHandle, bytes: U64): number;
  tree_save(tree: NativeHandle, node: NodeId, path: string): Promise<void>;
  tree_load(tree: NativeHandle, path: string): Promise<{ node: NodeId; n_tokens: number; reused: number }>;
  cache_create(tree: NativeHandle, params?: { max_seqs?: number; max_tokens?: number; kv_type?: number; attention?: number } | null): NativeHandle;
  cache_free(cache: NativeHandle | null): void;
  cache_add(cache: NativeHandle, node: NodeId, tokens: Tokens | null, flags: number): SeqId;
  cache_remove(cache: NativeHandle, seq: SeqId): number;
  cache_truncate(cache: NativeHandle, seq: SeqId, length: number): number;
  cache_seq_length(cache: NativeHandle, seq: SeqId): number;
  cache_kv_bytes(cache: NativeHandle): number;
  cache_fork(cache: NativeHandle, seq: SeqId): SeqId;
  cache_promote(cache: NativeHandle, seq: SeqId): NodeId;
  cache_move(cache: NativeHandle, seq: SeqId, node: NodeId): number;
  cache_seq_node(cache: NativeHandle, seq: SeqId): NodeId;
  cache_seq_tokens(cache: NativeHandle, seq: SeqId): Int32Array;
  cache_keep(cache: NativeHandle, seq: SeqId, from: number, keep: Tokens): void;
  cache_save(cache: NativeHandle, seq: SeqId, path: string): Promise<void>;
  decode(cache: NativeHandle, batch: { seq_ids: Tokens; n_tokens: Tokens; tokens: Tokens; all_logits?: boolean; logits_rows?: number; logits?: boolean; argmax?: boolean; parents?: Tokens }, ctrl: StopFlags): Promise<{ logits: Float32Array | null; argmax: Int32Array | null; rows: number }>;
  sampler_create(params?: { temperature?: number; top_k?: number; top_p?: number; min_p?: number; repeat_penalty?: number; seed?: U64; presence_penalty?: number; frequency_penalty?: number; logit_bias?: ReadonlyArray<readonly [Token, number]>; penalize_prompt?: boolean; n_threads?: number } | null): NativeHandle;
  sampler_free(sampler: NativeHandle | null): void;
  sample(sampler: NativeHandle, stream: U64, logits: Float32Array, history: Tokens | null): Token;
  sample_ex(sampler: NativeHandle, stream: U64, logits: Float32Array, history: Tokens | null, n_prompt: number, top: number): NativeSampleResult;
  sample_batch(sampler: NativeHandle, logits: Float32Array, n_vocab: number, streams: readonly U64[], histories: ReadonlyArray<Tokens | null> | null, n_prompts: readonly number[] | null, top: number): NativeSampleResult[];
  sampler_forget(sampler: NativeHandle, stream: U64): void;
  generate(tree: NativeHandle, prompts: ReadonlyArray<{ tokens: Tokens; parent?: number }>, params: Record<string, unknown> | null,
    spec: { draft?: (requests: Array<{ seq: number; history: Int32Array; n_prompt: number; max_tokens: number; tree_width: number }>) => unknown;
      draft_model?: NativeHandle; lookup_ngram?: number; max_draft?: number; adaptive?: boolean; tree_width?: number } | null,
    on_piece: ((seq: number, token: Token, text: string) => void) | null, ctrl: StopFlags): Promise<NativeGenerateResult>;
};
