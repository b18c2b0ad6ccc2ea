// The idiomatic layer's sampler: SamplerParams (clade_sampler_params with
// the library's defaults), Sampler (sample, sample_ex, sample_batch,
// forget) and SampleResult.
using System;
using System.Collections.Generic;

namespace Clade
{
    /// <summary>clade_sampler_params; the defaults are clade_sampler_params_init's.</summary>
    public sealed class SamplerParams
    {
        public float Temperature = 0.8f;
        public int TopK = 40;
        public float TopP = 0.95f, MinP = 0.05f, RepeatPenalty = 1f;
        public ulong Seed;
        public float PresencePenalty, FrequencyPenalty;
        /// <summary>token -> bias added to its logit (float.NegativeInfinity bans it).</summary>
        public IDictionary<int, float> LogitBias;
        public bool PenalizePrompt = true;
        public int Threads;

        /// <summary>Greedy: temperature 0.</summary>
        public static SamplerParams Greedy() { return new SamplerParams { Temperature = 0 }; }

        /// <summary>The C struct; the bias array is pinned in pins until the call ends.</summary>
        internal Native.clade_sampler_params ToNative(Pins pins)
        {
            var p = new Native.clade_sampler_params();
            Native.clade_sampler_params_init(ref p);
            p.temperature = Temperature;
            p.top_k = TopK;
            p.top_p = TopP;
            p.min_p = MinP;
            p.repeat_penalty = RepeatPenalty;
            p.seed = Seed;
            p.presence_penalty = PresencePenalty;
            p.frequency_penalty = FrequencyPenalty;
            p.penalize_prompt = PenalizePrompt ? 1 : 0;
            p.n_threads = Threads;
            if (LogitBias != null && LogitBias.Count > 0)
            {
                var arr = new Native.clade_logit_bias[LogitBias.Count];
                int i = 0;
                foreach (var kv in LogitBias)
                {
                    arr[i].token = kv.Key;
                    arr[i].bias = kv.Value;
                    i++;
                }
                p.logit_bias = pins.Pin(arr);
                p.n_logit_bias = Check.Len(arr);
            }
            return p;
        }
    }

    /// <summary>A draw: the token, its log-probability, and the likeliest alternatives.</summary>
    public sealed class SampleResult
    {
        public int Token;
        public float Logprob;
        public int[] TopTokens;
        public float[] TopLogprobs;
    }

    /// <summary>clade_sampler: the sampling pipeline and per-stream random state. One thread at a time.</summary>
    public sealed class Sampler : IDisposable
    {
        readonly SamplerHandle h;

        public Sampler(SamplerParams p = null)
        {
            p = p ?? new SamplerParams();
            using (var pins = new Pins())
            {
                var np = p.ToNative(pins);
                CladeException.Check(Native.clade_sampler_create(ref np, out h));
            }
        }

        public SamplerHandle Handle { get { return Check.Live(h, "Sampler"); } }
        public void Dispose() { h.Dispose(); }

        /// <summary>clade_sample: a token from one row of logits on stream.</summary>
        public int Sample(float[] logits, ulong stream = 0, int[] history = null)
        {
            Check.NotNull(logits, "logits");
            int t;
            CladeException.Check(Native.clade_sample(Handle, stream, logits, logits.Length, history,
                Check.Len(history), out t));
            return t;
        }

        /// <summary>clade_sample_ex: with n_prompt and up to top alternatives.</summary>
        public SampleResult SampleEx(float[] logits, ulong stream = 0, int[] history = null, int nPrompt = 0,
                                     int top = 0)
        {
            Check.NotNull(logits, "logits");
            if (top < 0) throw new ArgumentOutOfRangeException("top", "top is negative");
            if (nPrompt < 0) throw new ArgumentOutOfRangeException("nPrompt", "nPrompt is negative");
            var tt = new int[top];
            var tl = new float[top];
            var r = Native.OutInit<Native.clade_sample_result>();
            using (var pins = new Pins())
            {
                r.top_tokens = top > 0 ? pins.Pin(tt) : IntPtr.Zero;
                r.top_logprobs = top > 0 ? pins.Pin(tl) : IntPtr.Zero;
                r.top_capacity = Check.Size(top);
                CladeException.Check(Native.clade_sample_ex(Handle, stream, logits, logits.Length, history,
                    Check.Len(history), Check.Size(nPrompt), ref r));
            }
            return Result(r, tt, tl, 0);
        }

        static SampleResult Result(Native.clade_sample_result r, int[] tt, float[] tl, int at)
        {
            int n = (int)r.n_top;
            var res = new SampleResult { Token = r.token, Logprob = r.logprob,
                                         TopTokens = new int[n], TopLogprobs = new float[n] };
            Array.Copy(tt, at, res.TopTokens, 0, n);
            Array.Copy(tl, at, res.TopLogprobs, 0, n);
            return res;
        }

        /// <summary>clade_sample_batch: rows[r] (all of one length) on streams[r], with optional
        /// histories and prompt lengths, each as SampleEx would draw it.</summary>
        public SampleResult[] SampleBatch(float[][] rows, ulong[] streams, int[][] histories = null,
                                          int[] nPrompts = null, int top = 0)
        {
            Check.NotNull(rows, "rows");
            Check.NotNull(streams, "streams");
            int n = rows.Length;
            if (streams.Length != n) throw new ArgumentException(n + " rows but " + streams.Length + " streams", "streams");
            if (histories != null && histories.Length != n)
                throw new ArgumentException(n + " rows but " + histories.Length + " histories", "histories");
            if (nPrompts != null && nPrompts.Length != n)
                throw new ArgumentException(n + " rows but " + nPrompts.Length + " prompt lengths", "nPrompts");
            if (top < 0) throw new ArgumentOutOfRangeException("top", "top is negative");
            if (n == 0) return new SampleResult[0];
            int nv = Check.NotNull(rows[0], "rows").Length;
            var flat = new float[(long)n * nv];
            for (int r = 0; r < n; r++)
            {
                if (rows[r] == null) throw new ArgumentNullException("rows", "rows[" + r + "] is null");
                if (rows[r].Length != nv)
                    throw new ArgumentException("row " + r + " has " + rows[r].Length + " logits, row 0 " + nv, "rows");
                Array.Copy(rows[r], 0, flat, (long)r * nv, nv);
            }
            var tt = new int[Math.Max(n * top, 1)];
            var tl = new float[Math.Max(n * top, 1)];
            var res = new Native.clade_sample_result[n];
            using (var pins = new Pins())
            {
                IntPtr ptt = pins.Pin(tt), ptl = pins.Pin(tl);
                for (int r = 0; r < n; r++)
                {
                    res[r] = Native.OutInit<Native.clade_sample_result>();
                    if (top > 0)
                    {
                        res[r].top_tokens = new IntPtr(ptt.ToInt64() + 4L * r * top);
                        res[r].top_logprobs = new IntPtr(ptl.ToInt64() + 4L * r * top);
                        res[r].top_capacity = Check.Size(top);
                    }
                }
                IntPtr[] hp = null;
                UIntPtr[] hn = null, np = null;
                if (histories != null)
                {
                    hp = new IntPtr[n];
                    hn = new UIntPtr[n];
                    for (int r = 0; r < n; r++)
                    {
                        var hr = histories[r];
                        hp[r] = hr != null && hr.Length > 0 ? pins.Pin(hr) : IntPtr.Zero;
                        hn[r] = Check.Len(hr);
                    }
                }
                if (nPrompts != null)
                {
                    np = new UIntPtr[n];
                    for (int r = 0; r < n; r++)
                    {
                        if (nPrompts[r] < 0) throw new ArgumentOutOfRangeException("nPrompts", "nPrompts[" + r + "] is negative");
                        np[r] = Check.Size(nPrompts[r]);
                    }
                }
                CladeException.Check(Native.clade_sample_batch(Handle, Check.Size(n), flat, nv, streams, hp, hn, np, res));
            }
            var o = new SampleResult[n];
            for (int r = 0; r < n; r++) o[r] = Result(res[r], tt, tl, r * top);
            return o;
        }

        /// <summary>clade_sampler_forget: drop a finished stream's random state.</summary>
        public void Forget(ulong stream) { CladeException.Check(Native.clade_sampler_forget(Handle, stream)); }
    }
}
