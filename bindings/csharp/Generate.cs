// The idiomatic layer's generation: Prompt, GenerateParams, Speculative
// (lookup, draft model or a C# drafter), Tree.Generate (clade_generate and
// clade_generate_speculative, streaming through a callback) and its
// results (Generation, GenerationStats, GenerationResult).
using System;
using System.Collections;
using System.Collections.Generic;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;

namespace Clade
{
    /// <summary>A prompt of Generate: tokens under Parent (-1: the call's root node, else the
    /// index of an earlier prompt of the same list).</summary>
    public sealed class Prompt
    {
        public int[] Tokens;
        public int Parent;
        public Prompt(int[] tokens, int parent = -1) { Tokens = tokens; Parent = parent; }
        public static implicit operator Prompt(int[] tokens) { return new Prompt(tokens); }
    }

    /// <summary>What a C# drafter sees and answers: write Tokens (at most MaxTokens) and, for a
    /// token tree, Parents (one per token: -1 or an earlier token's index).</summary>
    public sealed class DraftRequest
    {
        public ulong Seq { get; internal set; }
        /// <summary>The prompt path then the output so far; drafts continue after its last token.</summary>
        public int[] History { get; internal set; }
        public int NPrompt { get; internal set; }
        public int MaxTokens { get; internal set; }
        public int TreeWidth { get; internal set; }
        public int[] Tokens;
        public int[] Parents;
    }

    public delegate void Drafter(DraftRequest request);

    /// <summary>The drafter of clade_generate_speculative: exactly one of Draft, DraftModel, Lookup.</summary>
    public sealed class Speculative
    {
        public Drafter Draft;
        public Model DraftModel;
        /// <summary>Prompt lookup: the longest n-gram (1..64) to match; 0 off.</summary>
        public int Lookup;
        public int MaxDraft = 8;
        public bool Adaptive = true;
        public int TreeWidth = 1;
    }

    /// <summary>clade_generate_params; the defaults are clade_generate_params_init's.</summary>
    public sealed class GenerateParams
    {
        public int MaxNewTokens = 128;
        public int Samples = 1;
        public bool IgnoreEog;
        public int MaxLive;
        public int[] StopTokens;
        public string[] StopStrings;
        /// <summary>null: clade_sampler_params_init's defaults.</summary>
        public SamplerParams Sampler;
        public Attention Attention = Attention.Auto;
        public bool Logprobs;
        public int TopLogprobs;
        public bool Special;
        public int Root;
        public ulong FirstStream;
        /// <summary>Not null: clade_generate_speculative with this drafter.</summary>
        public Speculative Speculative;
    }

    /// <summary>One generated sequence.</summary>
    public sealed class Generation
    {
        public string Text;
        public int[] Tokens;
        public FinishReason Finish;
        /// <summary>The index of its leaf prompt.</summary>
        public int Prompt;
        /// <summary>One per token with GenerateParams.Logprobs, else null.</summary>
        public float[] Logprobs;
        /// <summary>With TopLogprobs: per token, its row's likeliest tokens (-1 pads), else null.</summary>
        public int[][] TopTokens;
        public float[][] TopLogprobs;
    }

    /// <summary>clade_generation_stats.</summary>
    public sealed class GenerationStats
    {
        public ulong Steps, SpecSteps, Tokens, Drafted, Accepted, DraftSteps;
        public double TargetSeconds, DraftSeconds;
    }

    /// <summary>What Generate returns: the sequences in order, the stats, and whether it was stopped.</summary>
    public sealed class GenerationResult : IEnumerable<Generation>
    {
        readonly Generation[] seqs;
        public GenerationStats Stats { get; private set; }
        /// <summary>The call returned CLADE_STOPPED (a callback's StopAll or the abort callback).</summary>
        public bool Stopped { get; private set; }

        internal GenerationResult(Generation[] s, GenerationStats stats, bool stopped)
        {
            seqs = s; Stats = stats; Stopped = stopped;
        }

        public int Count { get { return seqs.Length; } }
        public Generation this[int i] { get { return seqs[i]; } }
        public IEnumerator<Generation> GetEnumerator() { return ((IEnumerable<Generation>)seqs).GetEnumerator(); }
        IEnumerator IEnumerable.GetEnumerator() { return seqs.GetEnumerator(); }
    }

    /// <summary>A streaming callback: sequence seq's next piece of text (token -1: its last
    /// call, with the rest of its text). Return Flow.StopSeq or Flow.StopAll to stop.</summary>
    public delegate Flow PieceCallback(int seq, int token, string piece);

    public sealed partial class Tree
    {
        // The delegates C calls: static, alive for the whole process (so a callback pointer
        // can never outlive its delegate); each call's state travels in user as a GCHandle.
        static readonly Native.clade_generate_fn generateThunk = GenerateThunk;
        static readonly Native.clade_draft_fn draftThunk = DraftThunk;
        static readonly int requestSize = Marshal.SizeOf(typeof(Native.clade_draft_request));

        sealed class CallState
        {
            public PieceCallback Callback;
            public Drafter Drafter;
            public Exception Error;
        }

        /// <summary>clade_generate (clade_generate_speculative when p.Speculative is set) over
        /// prompts; callback (may be null) gets the text as it comes, on this thread. An
        /// exception thrown by the callback or a drafter stops the call and is rethrown.</summary>
        public GenerationResult Generate(IList<Prompt> prompts, GenerateParams p = null,
                                         PieceCallback callback = null)
        {
            Check.NotNull(prompts, "prompts");
            p = p ?? new GenerateParams();
            var state = new CallState { Callback = callback };
            var spec = p.Speculative;
            if (spec != null)
            {
                int kinds = (spec.Draft != null ? 1 : 0) + (spec.DraftModel != null ? 1 : 0) + (spec.Lookup != 0 ? 1 : 0);
                if (kinds != 1)
                    throw new ArgumentException("Speculative needs exactly one of Draft, DraftModel and Lookup, not " + kinds,
                                                "p");
                state.Drafter = spec.Draft;
            }
            var gh = GCHandle.Alloc(state);
            var pins = new Pins();
            GenerationHandle gen = null;
            ModelHandle draftModel = null;
            bool draftRef = false;
            try
            {
                var arr = new Native.clade_prompt[Math.Max(prompts.Count, 1)];
                for (int i = 0; i < prompts.Count; i++)
                {
                    var pr = prompts[i];
                    if (pr == null || pr.Tokens == null)
                        throw new ArgumentNullException("prompts", "prompt " + i + " or its tokens is null");
                    arr[i].tokens = pins.Pin(pr.Tokens);
                    arr[i].n_tokens = Check.Len(pr.Tokens);
                    arr[i].parent = pr.Parent;
                }
                var gp = new Native.clade_generate_params();
                Native.clade_generate_params_init(ref gp);
                gp.max_new_tokens = p.MaxNewTokens;
                gp.n_samples = p.Samples;
                gp.ignore_eog = p.IgnoreEog ? 1 : 0;
                gp.max_live = p.MaxLive;
                if (p.StopTokens != null && p.StopTokens.Length > 0)
                {
                    gp.stop_tokens = pins.Pin(p.StopTokens);
                    gp.n_stop_tokens = Check.Len(p.StopTokens);
                }
                if (p.StopStrings != null && p.StopStrings.Length > 0)
                {
                    var ptrs = new IntPtr[p.StopStrings.Length];
                    for (int i = 0; i < ptrs.Length; i++)
                    {
                        if (p.StopStrings[i] == null)
                            throw new ArgumentNullException("p", "StopStrings[" + i + "] is null");
                        ptrs[i] = pins.Pin(Utf8.Z(p.StopStrings[i], "stop string " + i));
                    }
                    gp.stop_strings = pins.Pin(ptrs);
                    gp.n_stop_strings = Check.Len(ptrs);
                }
                if (p.Sampler != null)
                {
                    var sp = new[] { p.Sampler.ToNative(pins) };
                    gp.sampler = pins.Pin(sp);
                }
                if (callback != null)
                {
                    gp.callback = Marshal.GetFunctionPointerForDelegate(generateThunk);
                    gp.user = GCHandle.ToIntPtr(gh);
                }
                gp.attention = p.Attention;
                gp.logprobs = p.Logprobs ? 1 : 0;
                gp.top_logprobs = p.TopLogprobs;
                gp.special = p.Special ? 1 : 0;
                gp.root = p.Root;
                gp.first_stream = p.FirstStream;
                Status st;
                ResetAbort();
                if (spec == null)
                {
                    st = Native.clade_generate(Handle, arr, Check.Size(prompts.Count), ref gp, out gen);
                }
                else
                {
                    var s = new Native.clade_speculative_params();
                    Native.clade_speculative_params_init(ref s);
                    if (spec.Draft != null)
                    {
                        s.draft = Marshal.GetFunctionPointerForDelegate(draftThunk);
                        s.user = GCHandle.ToIntPtr(gh);
                    }
                    if (spec.DraftModel != null)
                    {
                        draftModel = spec.DraftModel.Handle;
                        draftModel.DangerousAddRef(ref draftRef);
                        s.draft_model = draftModel.DangerousGetHandle();
                    }
                    s.lookup_ngram = spec.Lookup;
                    s.max_draft = spec.MaxDraft;
                    s.adaptive = spec.Adaptive ? 1 : 0;
                    s.tree_width = spec.TreeWidth;
                    st = Native.clade_generate_speculative(Handle, arr, Check.Size(prompts.Count), ref gp, ref s,
                                                           out gen);
                }
                if (state.Error != null) ExceptionDispatchInfo.Capture(state.Error).Throw();
                if (st != Status.Stopped) Stopped(st);
                else if (abort != null && abort.Error != null) Stopped(st);
                // stopped before any result (the abort callback during the prompts)
                if (gen == null || gen.IsInvalid) throw CladeException.FromStatus(st);
                return Results(gen, st == Status.Stopped);
            }
            finally
            {
                if (gen != null) gen.Dispose();
                if (draftRef) draftModel.DangerousRelease();
                pins.Dispose();
                gh.Free();
                GC.KeepAlive(state);
            }
        }

        /// <summary>The results of a generation handle, copied (clade_generation_*).</summary>
        public static GenerationResult Results(GenerationHandle gen, bool stopped)
        {
            Check.Live(gen, "GenerationHandle");
            var gs = Native.OutInit<Native.clade_generation_stats>();
            CladeException.Check(Native.clade_generation_get_stats(gen, ref gs));
            var stats = new GenerationStats {
                Steps = gs.steps, SpecSteps = gs.spec_steps, Tokens = gs.tokens, Drafted = gs.drafted,
                Accepted = gs.accepted, DraftSteps = gs.draft_steps, TargetSeconds = gs.target_seconds,
                DraftSeconds = gs.draft_seconds,
            };
            int count = (int)Native.clade_generation_count(gen);
            var seqs = new Generation[count];
            for (int i = 0; i < count; i++)
            {
                var ui = Check.Size(i);
                UIntPtr len, nt;
                var g = new Generation();
                g.Text = Utf8.FromC(Native.clade_generation_text(gen, ui, out len), (long)len);
                IntPtr tp = Native.clade_generation_tokens(gen, ui, out nt);
                int n = tp == IntPtr.Zero ? 0 : (int)nt;
                g.Tokens = new int[n];
                if (n > 0) Marshal.Copy(tp, g.Tokens, 0, n);
                IntPtr lp = Native.clade_generation_logprobs(gen, ui);
                if (lp != IntPtr.Zero)
                {
                    g.Logprobs = new float[n];
                    if (n > 0) Marshal.Copy(lp, g.Logprobs, 0, n);
                }
                g.Finish = Native.clade_generation_finish(gen, ui);
                g.Prompt = (int)Native.clade_generation_prompt(gen, ui);
                IntPtr tl; UIntPtr per;
                IntPtr tt = Native.clade_generation_top(gen, ui, out tl, out per);
                int k = (int)per;
                if (tt != IntPtr.Zero && k > 0)
                {
                    g.TopTokens = new int[n][];
                    g.TopLogprobs = new float[n][];
                    var at = new int[n * k];
                    var al = new float[n * k];
                    Marshal.Copy(tt, at, 0, n * k);
                    if (tl != IntPtr.Zero) Marshal.Copy(tl, al, 0, n * k);
                    for (int j = 0; j < n; j++)
                    {
                        g.TopTokens[j] = new int[k];
                        g.TopLogprobs[j] = new float[k];
                        Array.Copy(at, j * k, g.TopTokens[j], 0, k);
                        Array.Copy(al, j * k, g.TopLogprobs[j], 0, k);
                    }
                }
                seqs[i] = g;
            }
            return new GenerationResult(seqs, stats, stopped);
        }

        /// <summary>Generate on a producer thread, its pieces enumerated as they come.</summary>
        public GenerationStream GenerateStream(IList<Prompt> prompts, GenerateParams p = null)
        {
            Check.NotNull(prompts, "prompts");
            Check.Live(h, "Tree");
            return new GenerationStream(this, prompts, p);
        }

        [MonoPInvokeCallback(typeof(Native.clade_generate_fn))]
        static int GenerateThunk(IntPtr user, UIntPtr seq, int token, IntPtr text, UIntPtr len)
        {
            var s = (CallState)GCHandle.FromIntPtr(user).Target;
            if (s.Error != null) return Native.CLADE_GENERATE_STOP_ALL;
            try
            {
                return (int)s.Callback((int)seq, token, Utf8.FromC(text, (long)len));
            }
            catch (Exception e)  // nothing may unwind into C
            {
                s.Error = e;
                return Native.CLADE_GENERATE_STOP_ALL;
            }
        }

        [MonoPInvokeCallback(typeof(Native.clade_draft_fn))]
        static int DraftThunk(IntPtr user, IntPtr requests, UIntPtr nRequests)
        {
            var s = (CallState)GCHandle.FromIntPtr(user).Target;
            if (s.Error != null) return -1;
            try
            {
                long n = (long)nRequests;
                if (n == 0) return 0;
                long stride = (long)(ulong)Marshal.ReadIntPtr(requests);  // the library's sizeof
                bool trees = stride >= requestSize;
                for (long i = 0; i < n; i++)
                    Draft(s.Drafter, new IntPtr(requests.ToInt64() + i * stride), trees);
                return 0;
            }
            catch (Exception e)
            {
                s.Error = e;
                return -1;
            }
        }

        static unsafe void Draft(Drafter drafter, IntPtr at, bool trees)
        {
            var r = (Native.clade_draft_request*)at;
            int nh = (int)r->n_history;
            var req = new DraftRequest {
                Seq = r->seq, History = new int[nh], NPrompt = (int)r->n_prompt, MaxTokens = r->max_tokens,
                TreeWidth = trees ? r->tree_width : 1,
            };
            if (nh > 0) Marshal.Copy(r->history, req.History, 0, nh);
            drafter(req);
            var toks = req.Tokens ?? new int[0];
            int m = Math.Min(toks.Length, r->max_tokens);
            var outp = (int*)r->tokens;
            for (int k = 0; k < m; k++) outp[k] = toks[k];
            r->n_tokens = toks.Length;  // past max_tokens: the library refuses it (InvalidArg)
            if (req.Parents == null) return;
            if (req.Parents.Length != toks.Length)
                throw new CladeException(Status.InvalidArg, "the drafter gave sequence " + req.Seq + " " +
                                         req.Parents.Length + " parents for " + toks.Length + " tokens");
            if (!trees)
                throw new CladeException(Status.Unsupported, "the clade library loaded has no token trees");
            var par = (int*)r->parents;
            for (int k = 0; k < m; k++) par[k] = req.Parents[k];
        }
    }
}
