// Tests of generation (Tree.Generate over clade_generate, streaming through
// a callback and through GenerationStream) and speculative decoding
// (prompt lookup, a draft model, C# drafters of chains and trees).
using System;
using System.Collections.Generic;
using System.Text;
using Clade;

namespace CladeTests
{
    public static partial class Tests
    {
        static Model spm;
        static Model Spm() { return spm ?? (spm = new Model(Env.Spm(), nThreads: 1)); }

        static List<Prompt> StoryPrompts(Model m)
        {
            return new List<Prompt> {
                new Prompt(m.Tokenize("Once upon a time")),
                new Prompt(m.Tokenize(" there was", addSpecial: false), 0),  // under prompt 0: one leaf
            };
        }

        static GenerateParams Greedy(int n, int samples = 2)
        {
            return new GenerateParams { MaxNewTokens = n, Samples = samples, Sampler = SamplerParams.Greedy() };
        }

        public static void TestGenerateGreedyMatchesSteps()
        {
            var m = Spm();
            var prompts = StoryPrompts(m);
            using (var t = new Tree(m, KvType.F32))
            {
                var res = t.Generate(prompts, Greedy(5));
                A.Eq(2, res.Count, "two samples");
                var again = t.Generate(prompts, Greedy(5));
                A.Seq(res[0].Tokens, again[0].Tokens, "deterministic");
                // the same by hand: the prompt tree, then greedy steps
                int na = t.Append(0, prompts[0].Tokens);
                float[] row;
                int nb = t.Append(na, prompts[1].Tokens, out row);
                var want = new List<int>();
                using (var c = new Cache(t))
                {
                    int s = c.Add(nb);
                    while (want.Count < 5)
                    {
                        int tok = A.Argmax(row);
                        if (m.IsEog(tok)) break;
                        want.Add(tok);
                        row = c.Decode(s, tok);
                    }
                }
                t.Release(nb);
                t.Release(na);
                A.Eq(0, t.Children(0).Length, "generate left no node");
                foreach (var g in res)
                {
                    A.Seq(want, g.Tokens, "greedy tokens");
                    A.Eq(1, g.Prompt, "leaf prompt");
                    A.Eq(want.Count == 5 ? FinishReason.Length : FinishReason.StopToken, g.Finish, "finish");
                    A.True(g.Logprobs == null, "no logprobs unless asked");
                    A.Eq(m.Detokenize(g.Tokens), g.Text, "text");
                }
                A.Eq((ulong)(res[0].Tokens.Length + res[1].Tokens.Length), res.Stats.Tokens, "stats tokens");
                A.True(!res.Stopped, "not stopped");
            }
        }

        public static void TestGenerateOptions()
        {
            var m = Spm();
            var prompts = StoryPrompts(m);
            using (var t = new Tree(m))
            {
                var full = t.Generate(prompts, Greedy(8))[0];
                A.True(full.Text.Length >= 4, "some text: " + full.Text);
                string stop = full.Text.Substring(2, 2);
                var p = Greedy(8);
                p.StopStrings = new[] { "\u0001never", stop };
                foreach (var g in t.Generate(prompts, p))
                {
                    A.Eq(full.Text.Substring(0, full.Text.IndexOf(stop)), g.Text, "cut at the stop string");
                    A.Eq(FinishReason.StopString, g.Finish, "finish");
                }
                p = Greedy(6);
                p.StopTokens = new[] { full.Tokens[1] };
                A.Seq(new[] { full.Tokens[0] }, t.Generate(prompts, p)[0].Tokens, "a stop token");
                p = new GenerateParams { MaxNewTokens = 6, Samples = 2, Logprobs = true, TopLogprobs = 3,
                                         Sampler = new SamplerParams { Temperature = 0.9f, Seed = 3 } };
                var res = t.Generate(prompts, p);
                foreach (var g in res)
                {
                    A.Eq(g.Tokens.Length, g.Logprobs.Length, "a logprob per token");
                    foreach (var lp in g.Logprobs) A.True(lp <= 0, "logprob <= 0");
                    A.Eq(g.Tokens.Length, g.TopTokens.Length, "top rows");
                    A.Eq(3, g.TopTokens[0].Length, "3 alternatives");
                }
                var res2 = t.Generate(prompts, p);
                A.Seq(res[1].Tokens, res2[1].Tokens, "seeded: reproducible");
                // errors
                int nv = m.NVocab;
                A.Status(Status.Token, () => t.Generate(new List<Prompt> { new[] { 1, nv + 3 } }), "a bad token");
                A.Status(Status.InvalidArg, () => t.Generate(new List<Prompt> { new[] { 1, 2 }, new Prompt(new int[0], 0) }),
                         "an empty leaf");
                A.Status(Status.InvalidArg, () => t.Generate(new List<Prompt> { new[] { 1, 2 } },
                                                             new GenerateParams { MaxNewTokens = 0 }), "max_new_tokens 0");
                A.Status(Status.InvalidArg, () => t.Generate(new List<Prompt> { new[] { 1, 2 }, new Prompt(new[] { 3 }, 1) }),
                         "a parent that is no earlier prompt");
                A.Status(Status.InvalidArg, () => t.Generate(new List<Prompt> { new[] { 1, 2 } },
                    new GenerateParams { Sampler = new SamplerParams { TopP = 2f, Temperature = 1 } }), "top_p 2");
                A.Throws<ArgumentNullException>(() => t.Generate(null), "null prompts");
                A.Throws<ArgumentNullException>(() => t.Generate(new List<Prompt> { new Prompt(null) }), "null tokens");
                A.Throws<ArgumentNullException>(() => t.Generate(prompts, new GenerateParams { StopStrings = new string[] { null } }),
                                                "a null stop string");
                A.Eq(2, t.Generate(prompts, Greedy(2)).Count, "the tree works on");
            }
            using (var t = new Tree(Small()))  // no tokenizer: no stop strings
                A.Throws<CladeException>(() => t.Generate(new List<Prompt> { new[] { 1, 2 } },
                                                          new GenerateParams { StopStrings = new[] { "x" }, MaxNewTokens = 2 }),
                                         "stop strings without a tokenizer");
        }

        public static void TestGenerateCallback()
        {
            var m = Spm();
            var prompts = StoryPrompts(m);
            var p = new GenerateParams { MaxNewTokens = 8, Samples = 2, Sampler = new SamplerParams { Temperature = 0.9f, Seed = 3 } };
            using (var t = new Tree(m))
            {
                var res = t.Generate(prompts, p);
                var texts = new[] { new StringBuilder(), new StringBuilder() };
                var finals = new List<int>();
                int calls = 0;
                var res2 = t.Generate(prompts, p, (seq, token, piece) => {
                    texts[seq].Append(piece);
                    calls++;
                    if (token < 0) finals.Add(seq);
                    return Flow.Continue;
                });
                for (int i = 0; i < 2; i++)
                {
                    A.Eq(res[i].Text, texts[i].ToString(), "pieces make the text");
                    A.Seq(res[i].Tokens, res2[i].Tokens, "the same tokens with a callback");
                }
                finals.Sort();
                A.Seq(new[] { 0, 1 }, finals, "one final call per sequence");
                A.Eq(res[0].Tokens.Length + res[1].Tokens.Length + 2, calls, "a call per token and a final one");
                // StopSeq on sequence 1
                var g = Greedy(5);
                g.IgnoreEog = true;
                var r = t.Generate(prompts, g, (seq, token, piece) => seq == 1 ? Flow.StopSeq : Flow.Continue);
                A.Eq(FinishReason.Callback, r[1].Finish, "sequence 1 stopped");
                A.Eq(1, r[1].Tokens.Length, "after its first token");
                A.Eq(FinishReason.Length, r[0].Finish, "sequence 0 went on");
                r = t.Generate(prompts, g, (seq, token, piece) => Flow.StopAll);
                A.True(r.Stopped, "StopAll: CLADE_STOPPED, with results");
                A.Eq(FinishReason.Callback, r[0].Finish, "stopped by the callback");
                // an exception in the callback stops the call and comes back
                int seen = 0;
                g.MaxNewTokens = 50;
                A.Throws<FormatException>(() => t.Generate(prompts, g, (seq, token, piece) => {
                    if (++seen == 2) throw new FormatException("boom");
                    return Flow.Continue;
                }), "the callback's exception");
                A.True(seen < 20, "stopped soon after: " + seen);
                A.Eq(0, t.Children(0).Length, "no node left");
            }
        }

        public static void TestGenerateStream()
        {
            var m = Spm();
            var prompts = StoryPrompts(m);
            var p = new GenerateParams { MaxNewTokens = 8, Samples = 2, Sampler = new SamplerParams { Temperature = 0.9f, Seed = 3 } };
            using (var t = new Tree(m))
            {
                var res = t.Generate(prompts, p);
                var texts = new[] { new StringBuilder(), new StringBuilder() };
                using (var stream = t.GenerateStream(prompts, p))
                {
                    A.True(stream.Results == null, "no results before the end");
                    foreach (var piece in stream)
                    {
                        A.True(piece.Text.Length > 0, "a non-empty piece");
                        texts[piece.Seq].Append(piece.Text);
                    }
                    A.Eq(res[0].Text, texts[0].ToString(), "stream text 0");
                    A.Eq(res[1].Text, texts[1].ToString(), "stream text 1");
                    A.Seq(res[1].Tokens, stream.Results[1].Tokens, "stream results");
                    A.True(!stream.Stopped, "not stopped");
                    A.Throws<InvalidOperationException>(() => { foreach (var x in stream) { } }, "enumerated twice");
                }
                // IEnumerable<string>, one sequence
                var one = new List<Prompt> { prompts[0] };
                var q = new GenerateParams { MaxNewTokens = 8, Sampler = SamplerParams.Greedy() };
                A.Eq(t.Generate(one, q)[0].Text, string.Concat(t.GenerateStream(one, q).Texts()), "Texts()");
                // leaving early stops the generation
                var g = Greedy(200);
                g.IgnoreEog = true;
                var st = t.GenerateStream(prompts, g);
                foreach (var piece in st) break;
                A.True(st.Stopped, "stopped by leaving the foreach");
                A.True(st.Results[0].Tokens.Length < 200, "fewer tokens");
                // disposed before enumerating
                var st2 = t.GenerateStream(prompts, g);
                st2.Dispose();
                A.True(st2.Results != null, "results after Dispose");
                // an error comes out of the enumeration
                var bad = t.GenerateStream(new List<Prompt> { new[] { m.NVocab + 1 } });
                A.Status(Status.Token, () => { foreach (var x in bad) { } }, "a bad token in a stream");
                A.Eq(2, t.Generate(prompts, Greedy(2)).Count, "the tree works on");
                // abandoned unconsumed: the finalizer stops the thread
                t.GenerateStream(prompts, g);
                GC.Collect();
                GC.WaitForPendingFinalizers();
            }
        }

        static List<Prompt> specPrompts;
        static GenerateParams SpecParams(Speculative s)
        {
            var p = Greedy(12);
            p.IgnoreEog = true;
            p.Speculative = s;
            return p;
        }

        static void SameAs(GenerationResult want, GenerationResult got, string what)
        {
            A.Eq(want.Count, got.Count, what + ": count");
            for (int i = 0; i < want.Count; i++)
            {
                A.Seq(want[i].Tokens, got[i].Tokens, what + ": tokens " + i);
                A.Eq(want[i].Text, got[i].Text, what + ": text " + i);
            }
            A.True(got.Stats.Accepted <= got.Stats.Drafted, what + ": accepted <= drafted");
            A.True(got.Stats.SpecSteps <= got.Stats.Steps, what + ": spec steps <= steps");
        }

        public static void TestSpeculative()
        {
            var m = Spm();
            var a = m.Tokenize("Once upon a time there was a cat. Once upon a time");
            var b = m.Tokenize(" there was", addSpecial: false);
            specPrompts = new List<Prompt> { new Prompt(a), new Prompt(b, 0), new Prompt(new[] { 1, 5, 9, 5, 9, 5 }) };
            using (var draft = new Model(Env.RandomModel("spm-draft.gguf", "--vocab-from", Env.SpmVocab, "--layers", "1",
                                                          "--seed", "11"), nThreads: 1))
            using (var t = new Tree(m, KvType.F32))
            {
                var want = t.Generate(specPrompts, SpecParams(null));
                A.Eq(4, want.Count, "two leaves, two samples");
                A.Eq(0UL, want.Stats.Drafted, "plain: no drafts");
                foreach (var adaptive in new[] { true, false })
                {
                    var got = t.Generate(specPrompts, SpecParams(new Speculative { Lookup = 3, MaxDraft = 4, Adaptive = adaptive }));
                    SameAs(want, got, "lookup");
                    A.Eq(0UL, got.Stats.DraftSteps, "lookup: no draft steps");
                }
                var dm = t.Generate(specPrompts, SpecParams(new Speculative { DraftModel = draft, Adaptive = false, MaxDraft = 3 }));
                SameAs(want, dm, "draft model");
                A.True(dm.Stats.DraftSteps > 0 && dm.Stats.Drafted > 0, "the draft model drafted");
                var self = t.Generate(specPrompts, SpecParams(new Speculative { DraftModel = m, Adaptive = false }));
                SameAs(want, self, "its own draft model");
                A.Eq(self.Stats.Drafted, self.Stats.Accepted, "every draft accepted");
                var tw = t.Generate(specPrompts, SpecParams(new Speculative { DraftModel = m, TreeWidth = 2, MaxDraft = 6 }));
                SameAs(want, tw, "tree width 2");
                // C# drafters: a fixed guess, and an oracle (the plain output's continuation)
                var calls = new List<ulong>();
                var fixedGuess = t.Generate(specPrompts, SpecParams(new Speculative { Adaptive = false, MaxDraft = 4,
                    Draft = r => {
                        calls.Add(r.Seq);
                        r.Tokens = new int[Math.Min(4, r.MaxTokens)];
                        Array.Copy(new[] { 3, 4, 5, 6 }, r.Tokens, r.Tokens.Length);
                    } }));
                SameAs(want, fixedGuess, "a fixed drafter");
                A.True(calls.Count > 0, "the drafter ran");
                int[] lens = { a.Length + b.Length, a.Length + b.Length, 6, 6 };
                var oracle = new Speculative { Adaptive = false, Draft = r => {
                    A.True(r.MaxTokens >= 1 && r.History.Length >= lens[r.Seq], "a request");
                    int done = r.History.Length - lens[r.Seq];
                    var w = want[(int)r.Seq].Tokens;
                    int n = Math.Max(0, Math.Min(r.MaxTokens, w.Length - done));
                    r.Tokens = new int[n];
                    Array.Copy(w, done, r.Tokens, 0, n);
                } };
                var or = t.Generate(specPrompts, SpecParams(oracle));
                SameAs(want, or, "an oracle");
                A.Eq(or.Stats.Drafted, or.Stats.Accepted, "the oracle's drafts all accepted");
                A.True(or.Stats.Accepted > 0 && or.Stats.Steps < or.Stats.Tokens, "fewer steps than tokens");
                // a tree drafter: a wrong token and the right one beside it, the right chain under it
                var treeSpec = new Speculative { Adaptive = false, TreeWidth = 2, MaxDraft = 4, Draft = r => {
                    int done = r.History.Length - lens[r.Seq];
                    var w = want[(int)r.Seq].Tokens;
                    if (done >= w.Length || r.MaxTokens < 3) return;
                    r.Tokens = new[] { (w[done] + 1) % 300, w[done], done + 1 < w.Length ? w[done + 1] : 7 };
                    r.Parents = new[] { -1, -1, 1 };
                } };
                var tr = t.Generate(specPrompts, SpecParams(treeSpec));
                SameAs(want, tr, "a tree drafter");
                A.True(tr.Stats.Accepted > 0, "tree drafts accepted");
                // streamed, with a drafter
                var texts = new string[4];
                using (var st = t.GenerateStream(specPrompts, SpecParams(oracle)))
                    foreach (var piece in st) texts[piece.Seq] += piece.Text;
                for (int i = 0; i < 4; i++) A.Eq(want[i].Text, texts[i] ?? "", "streamed text " + i);
                // bad drafters fail the call cleanly
                A.Throws<ArithmeticException>(() => t.Generate(specPrompts, SpecParams(new Speculative { Adaptive = false,
                    Draft = r => { throw new ArithmeticException("drafter"); } })), "a drafter's exception");
                A.Status(Status.Token, () => t.Generate(specPrompts, SpecParams(new Speculative { Adaptive = false,
                    Draft = r => { r.Tokens = new[] { 999999 }; } })), "a draft token past the vocabulary");
                A.Status(Status.InvalidArg, () => t.Generate(specPrompts, SpecParams(new Speculative { Adaptive = false,
                    Draft = r => { r.Tokens = new int[r.MaxTokens + 1]; } })), "too many draft tokens");
                A.Status(Status.InvalidArg, () => t.Generate(specPrompts, SpecParams(new Speculative { Adaptive = false,
                    Draft = r => { r.Tokens = new[] { 1, 2 }; r.Parents = new[] { -1 }; } })), "parents of the wrong length");
                A.Throws<ArgumentException>(() => t.Generate(specPrompts, SpecParams(new Speculative())), "no drafter");
                A.Status(Status.InvalidArg, () => t.Generate(specPrompts, SpecParams(new Speculative { Lookup = 100 })), "lookup 100");
                A.Status(Status.InvalidArg, () => t.Generate(specPrompts, SpecParams(new Speculative { Lookup = 2, TreeWidth = 9 })),
                         "tree width 9");
                A.Throws<ArgumentException>(() => t.Generate(specPrompts, SpecParams(new Speculative { Lookup = 2, DraftModel = draft })),
                                            "two drafters");
                A.Eq(0, t.Children(0).Length, "no node left");
                var disposed = new Model(Env.Small(), nThreads: 1);
                disposed.Dispose();
                A.Throws<ObjectDisposedException>(() => t.Generate(specPrompts, SpecParams(new Speculative { DraftModel = disposed })),
                                                  "a disposed draft model");
            }
            // a 300-token vocabulary: greedy output soon repeats itself, and lookup drafts get accepted
            using (var t = new Tree(Small(), KvType.F32))
            {
                var prompts = new List<Prompt> { new[] { 1, 5, 9, 5, 9, 5 }, new[] { 7, 8, 9 } };
                var p = Greedy(40, 1);
                p.IgnoreEog = true;
                var want = t.Generate(prompts, p);
                p.Speculative = new Speculative { Lookup = 3, Adaptive = false };
                var got = t.Generate(prompts, p);
                SameAs(want, got, "lookup on repeats");
                A.True(got.Stats.Accepted > 0 && got.Stats.Steps < want.Stats.Steps, "lookup paid");
            }
        }
    }
}
