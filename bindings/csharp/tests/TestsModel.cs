// Tests of version, errors and log, the struct layouts, the model,
// tokenizer, streaming detokenizer, chat templates and the sampler, and of
// bad input (null, disposed handles, wrong sizes) giving exceptions.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Text;
using Clade;

namespace CladeTests
{
    public static partial class Tests
    {
        public static void TestVersion()
        {
            A.Eq(Native.VersionString, Library.Version, "version string");
            A.Eq(Native.VersionNumber, Library.VersionNumber, "version number");
            A.True(Library.StatusString(Status.Ok).Length > 0, "status string of Ok");
            A.True(Library.StatusString(Status.CacheFull).Length > 0, "status string of CacheFull");
        }

        public static void TestStructLayouts()
        {
            if (IntPtr.Size != 8) return;  // the sizes below are x86_64/aarch64 Linux's
            var want = new Dictionary<Type, int> {
                { typeof(Native.clade_model_params), 24 }, { typeof(Native.clade_model_info), 216 },
                { typeof(Native.clade_special_tokens), 40 }, { typeof(Native.clade_chat_message), 16 },
                { typeof(Native.clade_tree_params), 32 }, { typeof(Native.clade_append_item), 56 },
                { typeof(Native.clade_node_info), 32 }, { typeof(Native.clade_cache_params), 24 },
                { typeof(Native.clade_batch), 72 }, { typeof(Native.clade_logit_bias), 8 },
                { typeof(Native.clade_sampler_params), 72 }, { typeof(Native.clade_sample_result), 48 },
                { typeof(Native.clade_prompt), 24 }, { typeof(Native.clade_generate_params), 128 },
                { typeof(Native.clade_draft_request), 80 }, { typeof(Native.clade_speculative_params), 56 },
                { typeof(Native.clade_generation_stats), 72 },
            };
            foreach (var kv in want) A.Eq(kv.Value, Marshal.SizeOf(kv.Key), "sizeof " + kv.Key.Name);
            A.Eq(104, (int)Marshal.OffsetOf(typeof(Native.clade_generate_params), "top_logprobs"), "offset of top_logprobs");
            A.Eq(200, (int)Marshal.OffsetOf(typeof(Native.clade_model_info), "n_params"), "offset of n_params");
            // the library's *_init fills exactly what our structs hold
            var p = new Native.clade_generate_params();
            Native.clade_generate_params_init(ref p);
            A.Eq(128UL, (ulong)p.size, "clade_generate_params_init's size");
            A.Eq(128, p.max_new_tokens, "default max_new_tokens");
        }

        public static void TestModelInfo()
        {
            using (var m = new Model(Env.Small(), nThreads: 1))
            {
                var i = m.Info();
                A.Eq("llama", i.Architecture, "architecture");
                A.Eq(2, i.Layers, "layers");
                A.Eq(64, i.Embd, "embd");
                A.Eq(4, i.Heads, "heads");
                A.Eq(2, i.KvHeads, "kv heads");
                A.Eq(16, i.HeadDim, "head dim");
                A.Eq(128, i.FF, "ff");
                A.Eq(300, i.Vocab, "vocab");
                A.Eq(WeightType.F32, i.WeightType, "weight type");
                A.True(i.Params > 0 && i.WeightBytes > 0, "params and bytes");
                A.Eq(300, m.NVocab, "NVocab");
                A.Status(Status.Unsupported, () => m.SpecialTokens(), "no tokenizer: no special tokens");
                A.Status(Status.Unsupported, () => m.Tokenize("x"), "no tokenizer");
            }
            using (var v = new Model(Env.Spm(), vocabOnly: true))
                A.True(v.Info().VocabOnly, "vocab only");
        }

        public static void TestBadInput()
        {
            var e = A.Status(Status.IO, () => new Model("/nonexistent/x.gguf"), "a missing file");
            A.True(e.Message.Contains("/nonexistent/x.gguf"), "the message names the file: " + e.Message);
            A.Throws<ArgumentNullException>(() => new Model(null), "a null path");
            string notGguf = System.IO.Path.Combine(Env.Tmp, "not.gguf");
            System.IO.File.WriteAllText(notGguf, "hello, this is not a model file at all");
            A.Status(Status.Format, () => new Model(notGguf), "not GGUF");
            A.Status(Status.InvalidArg, () => new Model(Env.Small(), nThreads: -3), "n_threads -3");
            A.Status(Status.InvalidArg, () => new Model("a\0b"), "a NUL in the path");
            using (var m = new Model(Env.Small(), nThreads: 1))
            {
                A.Throws<ArgumentNullException>(() => new Tree(null), "a null model");
                A.Throws<ArgumentNullException>(() => m.Tokenize((string)null), "null text");
                A.Throws<ArgumentNullException>(() => m.Detokenize(null), "null tokens");
                A.Status(Status.Token, () => Spm().Detokenize(new[] { 1, 999999 }), "a token out of the vocabulary");
                A.Status(Status.InvalidArg, () => new Tree(m, prefillChunk: -1), "prefill_chunk -1");
                using (var t = new Tree(m))
                {
                    A.Throws<ArgumentNullException>(() => t.Append(0, null), "null tokens");
                    A.Status(Status.InvalidArg, () => new Cache(t, maxSeqs: 0), "max_seqs 0");
                    A.Status(Status.State, () => t.Append(12345, new[] { 1 }), "an unknown parent");
                    using (var c = new Cache(t))
                    {
                        int s = c.Add(0, new[] { 1, 2 });
                        // wrong sizes
                        A.Throws<ArgumentException>(() => c.Decode(new[] { s }, new int[0][]), "1 seq, 0 token lists");
                        A.Throws<ArgumentNullException>(() => c.Decode(new[] { s }, new int[][] { null }), "a null token list");
                        A.Throws<ArgumentException>(() => c.DecodeTree(new[] { s }, new[] { new[] { 3, 4 } },
                                                                       new[] { new[] { -1 } }), "1 parent for 2 tokens");
                        A.Status(Status.State, () => c.Length(777), "an unknown sequence");
                        A.Status(Status.InvalidArg, () => c.Keep(s, 0, new[] { 5, 1 }), "keep not increasing");
                        A.Throws<ArgumentNullException>(() => c.Keep(s, 0, null), "keep null");
                        A.Status(Status.State, () => c.Add(999), "an unknown node");
                        A.Eq(0, c.Decode(new int[0], new int[0][]).Length, "a step of no sequence");
                        A.Status(Status.ContextFull, () => t.Append(0, new int[m.Info().Ctx + 1]), "past n_ctx");
                        using (var t2 = new Tree(m))
                        using (var c2 = new Cache(t2))
                            A.Status(Status.InvalidArg, () => t.AppendBatch(new[] { new AppendItem(0, new[] { 1 }, c2) }),
                                     "a cache of another tree");
                        var c3 = new Cache(t);
                        c3.Dispose();
                        A.Throws<ObjectDisposedException>(() => t.AppendBatch(new[] { new AppendItem(0, new[] { 1 }, c3) }),
                                                          "a disposed cache in a batch");
                        A.Status(Status.InvalidArg, () => t.Generate(new List<Prompt>()), "no prompts");
                        A.Status(Status.State, () => t.Generate(new List<Prompt> { new[] { 1 } }, new GenerateParams { Root = 77 }),
                                 "an unknown root");
                        A.Status(Status.InvalidArg, () => t.Generate(new List<Prompt> { new[] { 1 } }, new GenerateParams { TopLogprobs = 50 }),
                                 "top_logprobs 50");
                        A.Status(Status.IO, () => t.Load("/"), "a folder as a session");
                    }
                }
            }
        }

        public static void TestDisposedHandles()
        {
            var m = new Model(Env.Small(), nThreads: 1);
            var t = new Tree(m);
            var c = new Cache(t);
            var smp = new Sampler();
            var ms = new Model(Env.Spm(), nThreads: 1);
            var d = new Detokenizer(ms);
            ms.Dispose();
            m.Dispose();
            m.Dispose();  // twice: fine
            A.True(m.IsDisposed, "IsDisposed");
            A.Throws<ObjectDisposedException>(() => m.Info(), "Info on a disposed model");
            A.Throws<ObjectDisposedException>(() => m.Tokenize("x"), "Tokenize on a disposed model");
            A.Throws<ObjectDisposedException>(() => new Tree(m), "a tree of a disposed model");
            A.Throws<ObjectDisposedException>(() => { var x = m.Handle; }, "the handle of a disposed model");
            // the tree, cache and detokenizer made from it go on working
            int s = c.Add(0, new[] { 1, 2, 3 });
            A.Eq(1, c.Decode(new[] { s }, new[] { new[] { 4 } }).Length, "a step after the model's Dispose");
            d.Push(5);
            t.Dispose();
            A.Throws<ObjectDisposedException>(() => t.Append(0, new[] { 1 }), "Append on a disposed tree");
            A.Throws<ObjectDisposedException>(() => new Cache(t), "a cache of a disposed tree");
            A.Eq(300, c.Decode(s, 5).Length, "a step after the tree's Dispose");
            c.Dispose();
            A.Throws<ObjectDisposedException>(() => c.Add(0), "Add on a disposed cache");
            A.Throws<ObjectDisposedException>(() => c.Decode(s, 1), "Decode on a disposed cache");
            smp.Dispose();
            A.Throws<ObjectDisposedException>(() => smp.Sample(new float[] { 1, 2 }), "a disposed sampler");
            d.Dispose();
            A.Throws<ObjectDisposedException>(() => d.Push(1), "a disposed detokenizer");
            // the one-to-one layer: a disposed SafeHandle is refused by the marshaller
            var m2 = new Model(Env.Small(), nThreads: 1);
            var h = m2.Handle;
            m2.Dispose();
            var info = Native.OutInit<Native.clade_model_info>();
            A.Throws<ObjectDisposedException>(() => Native.clade_model_describe(h, ref info), "Native on a freed handle");
            // and a NULL handle is clade's InvalidArg
            A.Eq(Status.InvalidArg, Native.clade_model_describe(ModelHandle.Null, ref info), "describe(NULL)");
            A.True(Utf8.FromC(Native.clade_last_error()).Length > 0, "clade_last_error after describe(NULL)");
            // a struct size below 1.0's: InvalidArg, never a crash
            var bad = new Native.clade_model_params();
            Native.clade_model_params_init(ref bad);
            bad.size = (UIntPtr)4;
            ModelHandle mh;
            A.Eq(Status.InvalidArg, Native.clade_model_load(Utf8.Z(Env.Small()), ref bad, out mh), "params.size 4");
            A.True(mh.IsInvalid, "no model on failure");
            // handles dropped without Dispose are freed by their finalizers
            new Tree(new Model(Env.Small(), nThreads: 1));
            GC.Collect();
            GC.WaitForPendingFinalizers();
        }

        public static void TestTokenizer()
        {
            using (var m = new Model(Env.Spm(), nThreads: 1))
            {
                var sp = m.SpecialTokens();
                foreach (var text in new[] { "Hello world", "héllo, wörld! 日本語 🙂", "  two  spaces\nand a line" })
                {
                    var ids = m.Tokenize(text);
                    A.True(ids.Length > 0, "tokens of " + text);
                    if (sp.AddBos) A.Eq(sp.Bos, ids[0], "BOS first");
                    A.Eq(text, m.Detokenize(ids), "round trip");
                    A.Eq(text, string.Concat(m.Stream(ids)), "streamed round trip");
                    A.True(Array.IndexOf(m.Tokenize(text, addSpecial: false), sp.Bos) < 0, "no BOS without add_special");
                }
                A.Eq(0, m.Tokenize("", addSpecial: false).Length, "empty text");
                var hello = m.Tokenize("Hello", addSpecial: false);
                A.Eq("Hello", Encoding.UTF8.GetString(m.TokenToPiece(hello[0])).Trim(), "token to piece");
                var long_ = new StringBuilder();
                for (int i = 0; i < 300; i++) long_.Append("word" + i + " ");
                var many = m.Tokenize(long_.ToString());  // grows its buffer
                A.Eq(long_.ToString(), m.Detokenize(many), "a long text");
                A.Status(Status.Utf8, () => m.Tokenize(new byte[] { 0x6f, 0x6b, 0x20, 0xff, 0xfe }), "bad UTF-8");
                A.Status(Status.Utf8, () => m.Tokenize("lone \ud800 surrogate"), "a lone surrogate");
                A.True(m.IsEog(sp.Eos), "EOS ends a generation");
                A.True(!m.IsEog(hello[0]), "Hello does not");
                var ctrl = m.Tokenize("</s>", addSpecial: false, parseSpecial: true);
                A.Seq(new[] { sp.Eos }, ctrl, "parse_special");
                A.Eq("</s>", m.Detokenize(ctrl, special: true), "special rendered");
                A.Eq("", m.Detokenize(ctrl), "special not rendered");
            }
        }

        public static void TestDetokenizer()
        {
            var m = new Model(Env.Spm(), nThreads: 1);
            var ids = m.Tokenize("Hello wörld 🙂", addSpecial: false);
            var d = m.NewDetokenizer();
            m.Dispose();  // the detokenizer keeps the model alive
            var sb = new StringBuilder();
            foreach (var t in ids) sb.Append(d.Push(t));
            sb.Append(d.Flush());
            A.Eq("Hello wörld 🙂", sb.ToString(), "streamed text");
            d.Dispose();
        }

        public static void TestChat()
        {
            A.True(Array.IndexOf(Library.ChatTemplates(), "chatml") >= 0, "chatml listed");
            var conv = new List<ChatMessage> {
                new ChatMessage("system", "Be brief."), new ChatMessage("user", "Hi"),
                new ChatMessage("assistant", "Hello."), new ChatMessage("user", "Bye"),
            };
            using (var m = new Model(Env.Spm(), nThreads: 1))
            {
                A.Eq("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n" +
                     "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n" +
                     "<|im_start|>assistant\n", m.ChatApply(conv, "chatml"), "chatml");
                A.Eq("[INST] Hi [/INST]", Library.ChatApply(conv.GetRange(1, 1), "llama2"), "llama2 without a model");
                var ids = m.Tokenize(m.ChatApply(conv, "llama2"), addSpecial: true, parseSpecial: true);
                var sp = m.SpecialTokens();
                A.Eq(sp.Bos, ids[0], "BOS first");
                A.Eq(1, Array.FindAll(ids, x => x == sp.Eos).Length, "one EOS");
                // the random model has no template; an unknown name is unsupported too
                A.Status(Status.Unsupported, () => m.ChatApply(conv), "no template");
                A.Status(Status.Unsupported, () => m.ChatTemplateName(), "no template name");
                A.Status(Status.Unsupported, () => m.ChatApply(conv, "vicuna"), "an unknown template");
                A.Status(Status.InvalidArg, () => m.ChatApply(new[] { new ChatMessage("user", "a"),
                                                                      new ChatMessage("user", "b") }, "gemma"), "user twice");
                A.Throws<ArgumentNullException>(() => m.ChatApply(new[] { new ChatMessage("user", null) }, "chatml"),
                                                "null content");
                A.Throws<ArgumentNullException>(() => m.ChatApply(null, "chatml"), "null messages");
                A.Throws<ArgumentNullException>(() => Library.ChatApply(conv, null), "null template");
                var big = new string('x', 5000);
                A.True(m.ChatApply(new[] { new ChatMessage("user", big) }, "chatml").Contains(big), "a long message");
            }
        }

        public static void TestLog()
        {
            var got = new List<string>();
            Library.SetLog((level, msg) => { lock (got) got.Add(level + ": " + msg); }, LogLevel.Debug);
            try
            {
                using (var m = new Model(Env.Small(), nThreads: 1)) { }
                try { new Model("/nonexistent/y.gguf"); } catch (CladeException) { }
            }
            finally
            {
                Library.SetLog(null);
            }
            A.True(got.Count > 0, "log messages");
            int n = got.Count;
            using (var m = new Model(Env.Small(), nThreads: 1)) { }
            A.Eq(n, got.Count, "no messages after SetLog(null)");
            // a handler that throws: dropped, never into C
            Library.SetLog((level, msg) => { throw new InvalidOperationException("boom"); }, LogLevel.Debug);
            try { using (var m = new Model(Env.Small(), nThreads: 1)) { } }
            finally { Library.SetLog(null); }
        }

        public static void TestSampler()
        {
            float ninf = float.NegativeInfinity;
            var row = new float[] { 1f, 3f, -2f, 3f, 0.5f, 2f, ninf, 2.5f };
            var bias = new Dictionary<int, float> { { 2, 10f }, { 1, ninf } };
            using (var s = new Sampler(new SamplerParams { Temperature = 0, LogitBias = bias }))
                A.Eq(2, s.Sample(row), "logit bias");
            using (var s = new Sampler(new SamplerParams { Temperature = 0, FrequencyPenalty = 1f, PenalizePrompt = false }))
                A.Eq(1, s.SampleEx(row, history: new[] { 1, 3, 3 }, nPrompt: 1).Token, "frequency penalty");
            using (var s = new Sampler(new SamplerParams { Temperature = 0, PresencePenalty = 5f }))
                A.Eq(7, s.SampleEx(row, history: new[] { 1, 3 }, nPrompt: 1).Token, "presence penalty");
            double mx = 3, sum = 0;
            foreach (var v in row) if (!float.IsInfinity(v)) sum += Math.Exp(v - mx);
            double lse = mx + Math.Log(sum);
            using (var s = new Sampler(new SamplerParams { Temperature = 1, TopK = 0, TopP = 1, MinP = 0, Seed = 3 }))
            {
                var r = s.SampleEx(row, top: 3);
                A.True(Math.Abs(r.Logprob - (row[r.Token] - lse)) < 1e-5, "logprob");
                A.Seq(new[] { 1, 3, 7 }, r.TopTokens, "top tokens");
                for (int i = 0; i < 3; i++)
                    A.True(Math.Abs(r.TopLogprobs[i] - (row[r.TopTokens[i]] - lse)) < 1e-5, "top logprob " + i);
                // a forgotten stream starts again
                var first = new List<int>();
                for (int i = 0; i < 8; i++) first.Add(s.Sample(row, 7));
                s.Forget(7);
                s.Forget(12345);
                var again = new List<int>();
                for (int i = 0; i < 8; i++) again.Add(s.Sample(row, 7));
                A.Seq(first, again, "forget");
            }
            // a batch equals the rows one by one, stream by stream
            var rev = (float[])row.Clone();
            Array.Reverse(rev);
            var rows = new[] { row, rev, row };
            var streams = new ulong[] { 4, 9, 4 };
            var hist = new[] { new[] { 0, 1 }, new int[0], new[] { 5 } };
            var sp = new SamplerParams { Temperature = 1, Seed = 8, PresencePenalty = 0.5f };
            using (var a = new Sampler(sp))
            using (var b = new Sampler(sp))
            {
                for (int k = 0; k < 5; k++)
                {
                    var got = a.SampleBatch(rows, streams, hist, null, 2);
                    for (int i = 0; i < 3; i++)
                    {
                        var want = b.SampleEx(rows[i], streams[i], hist[i], 0, 2);
                        A.Eq(want.Token, got[i].Token, "batch token " + i);
                        A.Eq(want.Logprob, got[i].Logprob, "batch logprob " + i);
                        A.Seq(want.TopTokens, got[i].TopTokens, "batch top " + i);
                    }
                }
                A.Throws<ArgumentException>(() => a.SampleBatch(rows, new ulong[] { 1 }), "3 rows, 1 stream");
                A.Throws<ArgumentException>(() => a.SampleBatch(new[] { row, new float[3] }, new ulong[] { 1, 2 }),
                                            "rows of two lengths");
                A.Throws<ArgumentNullException>(() => a.Sample(null), "null logits");
                A.Status(Status.InvalidArg, () => a.Sample(new float[0]), "no logits");
                A.Throws<ArgumentOutOfRangeException>(() => a.SampleEx(row, 0, new[] { 1 }, -1), "a negative nPrompt");
                A.Status(Status.InvalidArg, () => a.Sample(new[] { 1f, float.NaN }), "a NaN logit");
                A.Status(Status.Token, () => a.Sample(row, 0, new[] { 99 }), "a history token past the row");
                A.Status(Status.InvalidArg, () => a.SampleEx(row, 0, new[] { 1 }, 5), "n_prompt past the history");
            }
            A.Status(Status.Token, () => new Sampler(new SamplerParams { LogitBias = new Dictionary<int, float> { { -1, 1f } } }),
                     "a negative bias token");
            A.Status(Status.InvalidArg, () => new Sampler(new SamplerParams { TopP = 0 }), "top_p 0");
        }
    }
}
