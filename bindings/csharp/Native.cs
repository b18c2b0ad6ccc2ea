// Clade.Native: the one-to-one P/Invoke layer over include/clade/clade.h
// (clade 1.4): the public enums, every struct with the header's layout and
// every exported function, declared with DllImport("clade"). Handles are
// the SafeHandle subclasses of Handles.cs; size_t is UIntPtr; strings in
// are NUL-terminated UTF-8 byte arrays (Utf8.Z), strings out are IntPtr.
using System;
using System.Runtime.InteropServices;

namespace Clade
{
    /// <summary>clade_status: 0 success, positive recoverable, negative errors.</summary>
    public enum Status
    {
        Ok = 0,
        CacheFull = 1,
        Stopped = 2,
        BufferSmall = 3,
        KvBudget = 4,
        ContextFull = 5,
        InvalidArg = -1,
        NoMem = -2,
        IO = -3,
        Format = -4,
        Unsupported = -5,
        Token = -6,
        State = -7,
        Backend = -8,
        Utf8 = -9,
        Mismatch = -10,
        Internal = -100,
    }

    public enum LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 }
    public enum Backend { Cpu = 0, Cuda = 1 }
    public enum KvType { Default = -1, F32 = 0, F16 = 1, BF16 = 2 }
    public enum RopeScaling { None = 0, Linear = 1, Llama3 = 2 }
    public enum Attention { Auto = 0, Shared = 1, Flat = 2, None = 3 }

    public enum WeightType
    {
        F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
        Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, BF16 = 30,
    }

    public enum FinishReason
    {
        None = 0, StopToken = 1, StopString = 2, Length = 3, Callback = 4, Aborted = 5,
    }

    /// <summary>What a generation callback returns (CLADE_GENERATE_*).</summary>
    public enum Flow { Continue = 0, StopSeq = 1, StopAll = 2 }

    /// <summary>The C API, call for call. Every function here is the header's.</summary>
    public static class Native
    {
        public const string Library = "clade";
        public const int VersionMajor = 1, VersionMinor = 5, VersionPatch = 0;
        public const int VersionNumber = VersionMajor * 10000 + VersionMinor * 100 + VersionPatch;
        public const string VersionString = "1.5.0";
        public const int AbiMajor = 1;

        public const uint CLADE_TOKENIZE_ADD_SPECIAL = 1, CLADE_TOKENIZE_PARSE_SPECIAL = 2;
        public const uint CLADE_TREE_ALLOW_LONG_CONTEXT = 1, CLADE_TREE_PREFIX_CACHE = 2;
        public const uint CLADE_SEQ_PRIVATE = 1;
        public const int CLADE_GENERATE_CONTINUE = 0, CLADE_GENERATE_STOP_SEQ = 1,
            CLADE_GENERATE_STOP_ALL = 2;

        /// <summary>CLADE_ITEM_NODE(i): a batch item's parent that is item i's node.</summary>
        public static int CLADE_ITEM_NODE(int i) { return -2 - i; }

        // ---- callbacks (cdecl; user is a GCHandle's IntPtr in the idiomatic layer)
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate void clade_log_fn(LogLevel level, IntPtr message, IntPtr user);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int clade_abort_fn(IntPtr user);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int clade_generate_fn(IntPtr user, UIntPtr seq, int token, IntPtr text,
                                              UIntPtr len);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int clade_draft_fn(IntPtr user, IntPtr requests, UIntPtr n_requests);

        // ---- structs (layouts of clade.h; sizes checked by the tests on 64-bit)
        [StructLayout(LayoutKind.Sequential)]
        public struct clade_model_params
        {
            public UIntPtr size;
            public Backend backend;
            public int n_threads, vocab_only, use_mmap;
        }

        [StructLayout(LayoutKind.Sequential)]
        public unsafe struct clade_model_info
        {
            public UIntPtr size;
            public fixed byte architecture[32];
            public fixed byte name[96];
            public int n_layers, n_embd, n_heads, n_kv_heads, head_dim, n_ff, n_vocab, n_ctx;
            public float rope_freq_base, rope_freq_scale;
            public RopeScaling rope_scaling;
            public float norm_eps;
            public WeightType weight_type;
            public int has_qkv_bias, tied_output, vocab_only;
            public ulong n_params, weight_bytes;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct clade_special_tokens
        {
            public UIntPtr size;
            public int bos, eos, eot, pad, unk;
            public int add_bos, add_eos;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct clade_chat_message { public IntPtr role, content; }

        [StructLayout(LayoutKind.Sequential)]
        public struct clade_tree_params
        {
            public UIntPtr size;
            public KvType kv_type;
            public int prefill_chunk;
            public uint flags;
            public ulong kv_budget;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct clade_append_item
        {
            public UIntPtr size;
            public int parent;
            public IntPtr tokens;
            public UIntPtr n_tokens;
            public IntPtr cache;
            public IntPtr logits;
            public int node;
            public int seq;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct clade_node_info
        {
            public UIntPtr size;
            public int parent, length, path_length, n_children, n_refs;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct clade_cache_params
        {
            public UIntPtr size;
            public int max_seqs, max_tokens;
            public KvType kv_type;
            public Attention attention;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct clade_batch
        {
            public UIntPtr size;
            public UIntPtr n_seqs;
            public IntPtr seq_ids, n_tokens, tokens;
            public int all_logits;
            public IntPtr logits;
            public UIntPtr logits_rows;
            public IntPtr argmax;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct clade_logit_bias { public int token; public float bias; }

        [StructLayout(LayoutKind.Sequential)]
        public struct clade_sampler_params
        {
            public UIntPtr size;
            public float temperature;
            public int top_k;
            public float top_p, min_p, repeat_penalty;
            public ulong seed;
            public float presence_penalty, frequency_penalty;
            public IntPtr logit_bias;
            public UIntPtr n_logit_bias;
            public int penalize_prompt, n_threads;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct clade_sample_result
        {
            public UIntPtr size;
            public IntPtr top_tokens, top_logprobs;
            public UIntPtr top_capacity, n_top;
            public int token;
            public float logprob;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct clade_prompt
        {
            public IntPtr tokens;
            public UIntPtr n_tokens;
            public int parent;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct clade_generate_params
        {
            public UIntPtr size;
            public int max_new_tokens, n_samples, ignore_eog, max_live;
            public IntPtr stop_tokens;
            public UIntPtr n_stop_tokens;
            public IntPtr stop_strings;
            public UIntPtr n_stop_strings;
            public IntPtr sampler;
            public IntPtr callback;
            public IntPtr user;
            public Attention attention;
            public int logprobs, special, root;
            public ulong first_stream;
            public int top_logprobs;
            public IntPtr grammars;      // clade 1.5: const clade_grammar *const *
            public UIntPtr n_grammars;   // (clade_generate_params_init fills them)
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct clade_draft_request
        {
            public UIntPtr size;
            public ulong seq;
            public IntPtr history;
            public UIntPtr n_history, n_prompt;
            public int max_tokens;
            public IntPtr tokens;
            public int n_tokens;
            public IntPtr parents;
            public int tree_width;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct clade_speculative_params
        {
            public UIntPtr size;
            public IntPtr draft, user, draft_model;
            public int lookup_ngram, max_draft, adaptive, reserved, tree_width;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct clade_generation_stats
        {
            public UIntPtr size;
            public ulong steps, spec_steps, tokens, drafted, accepted, draft_steps;
            public double target_seconds, draft_seconds;
        }

        /// <summary>The header's inline *_init of a caller-sized struct: zero, size set.</summary>
        public static T OutInit<T>() where T : struct
        {
            object o = new T();
            // every out struct starts with its UIntPtr size
            typeof(T).GetField("size").SetValue(o, (UIntPtr)(uint)Marshal.SizeOf(typeof(T)));
            return (T)o;
        }

        // ---- version, errors, log
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int clade_version_number();
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern IntPtr clade_version_string();
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern IntPtr clade_status_string(Status status);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern IntPtr clade_last_error();
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void clade_set_log(clade_log_fn fn, IntPtr user, LogLevel min_level);

        // ---- model
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void clade_model_params_init(ref clade_model_params p);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_model_load(byte[] path, ref clade_model_params p,
                                                     out ModelHandle model);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void clade_model_free(IntPtr model);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_model_describe(ModelHandle model, ref clade_model_info info);

        // ---- tokenizer
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_tokenize(ModelHandle model, byte[] text, UIntPtr len,
                                                   uint flags, int[] tokens, UIntPtr capacity,
                                                   out UIntPtr n_tokens);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_detokenize(ModelHandle model, int[] tokens, UIntPtr n,
                                                     int special, byte[] buf, UIntPtr capacity,
                                                     out UIntPtr n_bytes);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_token_to_piece(ModelHandle model, int token, int special,
                                                         byte[] buf, UIntPtr capacity,
                                                         out UIntPtr n_bytes);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_model_special_tokens(ModelHandle model,
                                                               ref clade_special_tokens o);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int clade_token_is_eog(ModelHandle model, int token);

        // ---- streaming detokenizer
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_detokenizer_create(ModelHandle model, int special,
                                                             int first_in_text,
                                                             out DetokenizerHandle o);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_detokenizer_push(DetokenizerHandle d, int token,
                                                           out IntPtr text, out UIntPtr len);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_detokenizer_flush(DetokenizerHandle d, out IntPtr text,
                                                            out UIntPtr len);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void clade_detokenizer_free(IntPtr d);

        // ---- chat templates (model may be null: pass ModelHandle.Null)
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_chat_apply(ModelHandle model, byte[] template_name,
                                                     clade_chat_message[] messages, UIntPtr n,
                                                     int add_assistant_prompt, byte[] buf,
                                                     UIntPtr capacity, out UIntPtr n_bytes);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_chat_template_name(ModelHandle model, out IntPtr name);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern UIntPtr clade_chat_template_list(IntPtr[] names, UIntPtr capacity);

        // ---- tree
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void clade_tree_params_init(ref clade_tree_params p);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_tree_create(ModelHandle model, ref clade_tree_params p,
                                                      out TreeHandle tree);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void clade_tree_free(IntPtr tree);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_tree_append(TreeHandle tree, int parent, int[] tokens,
                                                      UIntPtr n_tokens, float[] logits, out int node);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void clade_append_item_init(ref clade_append_item item);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_tree_append_batch(TreeHandle tree,
                                                            [In, Out] clade_append_item[] items,
                                                            UIntPtr n_items);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_tree_release(TreeHandle tree, int node);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_tree_node_info(TreeHandle tree, int node,
                                                         ref clade_node_info info);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_tree_node_tokens(TreeHandle tree, int node, int[] tokens,
                                                           UIntPtr capacity, out UIntPtr n_tokens);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern UIntPtr clade_tree_kv_bytes(TreeHandle tree);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_tree_children(TreeHandle tree, int node, int[] ids,
                                                        UIntPtr capacity, out UIntPtr n_children);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_tree_set_kv_budget(TreeHandle tree, ulong bytes);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern ulong clade_tree_kv_used(TreeHandle tree);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_tree_set_abort(TreeHandle tree, clade_abort_fn fn,
                                                         IntPtr user);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_tree_append_prefix(TreeHandle tree, int[] tokens,
                                                             UIntPtr n_tokens, float[] logits,
                                                             out int node, out UIntPtr n_reused);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_tree_trim(TreeHandle tree, ulong bytes, out ulong freed);

        // ---- sessions
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_tree_save(TreeHandle tree, int node, byte[] path);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_cache_save(CacheHandle cache, int seq, byte[] path);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_tree_load(TreeHandle tree, byte[] path, out int node,
                                                    out UIntPtr n_tokens, out UIntPtr n_reused);

        // ---- caches and decode steps
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void clade_cache_params_init(ref clade_cache_params p);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_cache_create(TreeHandle tree, ref clade_cache_params p,
                                                       out CacheHandle cache);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void clade_cache_free(IntPtr cache);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_cache_add(CacheHandle cache, int node, int[] tokens,
                                                    UIntPtr n_tokens, uint flags, out int seq);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_cache_remove(CacheHandle cache, int seq);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_cache_truncate(CacheHandle cache, int seq, int length);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_cache_seq_length(CacheHandle cache, int seq, out int length);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern UIntPtr clade_cache_kv_bytes(CacheHandle cache);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_cache_fork(CacheHandle cache, int seq, out int o);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_cache_promote(CacheHandle cache, int seq, out int node);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_cache_move(CacheHandle cache, int seq, int node);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_cache_seq_node(CacheHandle cache, int seq, out int node);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_cache_seq_tokens(CacheHandle cache, int seq, int[] tokens,
                                                           UIntPtr capacity, out UIntPtr n_tokens);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void clade_batch_init(ref clade_batch batch);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_decode(CacheHandle cache, ref clade_batch batch);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_decode_tree(CacheHandle cache, ref clade_batch batch,
                                                      int[] parents);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_cache_keep(CacheHandle cache, int seq, int from,
                                                     int[] keep, UIntPtr n_keep);

        // ---- sampler
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void clade_sampler_params_init(ref clade_sampler_params p);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_sampler_create(ref clade_sampler_params p,
                                                         out SamplerHandle sampler);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void clade_sampler_free(IntPtr sampler);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_sample(SamplerHandle sampler, ulong stream, float[] logits,
                                                 int n_vocab, int[] history, UIntPtr n_history,
                                                 out int token);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_sample_ex(SamplerHandle sampler, ulong stream,
                                                    float[] logits, int n_vocab, int[] history,
                                                    UIntPtr n_history, UIntPtr n_prompt,
                                                    ref clade_sample_result result);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_sample_batch(SamplerHandle sampler, UIntPtr n_rows,
                                                       float[] logits, int n_vocab, ulong[] streams,
                                                       IntPtr[] histories, UIntPtr[] n_histories,
                                                       UIntPtr[] n_prompts,
                                                       [In, Out] clade_sample_result[] results);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_sampler_forget(SamplerHandle sampler, ulong stream);

        // ---- generation
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void clade_generate_params_init(ref clade_generate_params p);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_generate(TreeHandle tree, clade_prompt[] prompts,
                                                   UIntPtr n_prompts, ref clade_generate_params p,
                                                   out GenerationHandle gen);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void clade_generation_free(IntPtr gen);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern UIntPtr clade_generation_count(GenerationHandle gen);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern IntPtr clade_generation_text(GenerationHandle gen, UIntPtr i,
                                                          out UIntPtr len);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern IntPtr clade_generation_tokens(GenerationHandle gen, UIntPtr i,
                                                            out UIntPtr n_tokens);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern IntPtr clade_generation_logprobs(GenerationHandle gen, UIntPtr i);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern FinishReason clade_generation_finish(GenerationHandle gen, UIntPtr i);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern IntPtr clade_generation_top(GenerationHandle gen, UIntPtr i,
                                                         out IntPtr logprobs, out UIntPtr per_token);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern long clade_generation_prompt(GenerationHandle gen, UIntPtr i);

        // ---- speculative decoding, stats
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void clade_speculative_params_init(ref clade_speculative_params p);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_generate_speculative(TreeHandle tree, clade_prompt[] prompts,
                                                               UIntPtr n_prompts,
                                                               ref clade_generate_params p,
                                                               ref clade_speculative_params spec,
                                                               out GenerationHandle gen);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern Status clade_generation_get_stats(GenerationHandle gen,
                                                               ref clade_generation_stats stats);
    }
}
