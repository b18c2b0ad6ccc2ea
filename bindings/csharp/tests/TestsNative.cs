// Tests of the one-to-one layer alone (Clade.Native and the SafeHandles):
// a model, a tree, a cache, a decode step, a sampler and clade_generate
// with a delegate of the test's own as the C callback, as a user of the
// raw calls would write them.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Text;
using Clade;

namespace CladeTests
{
    public static partial class Tests
    {
        public static void TestNativeLayer()
        {
            var mp = new Native.clade_model_params();
            Native.clade_model_params_init(ref mp);
            mp.n_threads = 1;
            ModelHandle model;
            A.Eq(Status.Ok, Native.clade_model_load(Utf8.Z(Env.Spm()), ref mp, out model), "load");
            using (model)
            {
                var info = Native.OutInit<Native.clade_model_info>();
                A.Eq(Status.Ok, Native.clade_model_describe(model, ref info), "describe");
                int nv = info.n_vocab;
                var tp = new Native.clade_tree_params();
                Native.clade_tree_params_init(ref tp);
                tp.kv_type = KvType.F32;
                TreeHandle tree;
                A.Eq(Status.Ok, Native.clade_tree_create(model, ref tp, out tree), "tree");
                using (tree)
                {
                    var prompt = new[] { 1, 5, 9, 13 };
                    var logits = new float[nv];
                    int node;
                    A.Eq(Status.Ok, Native.clade_tree_append(tree, 0, prompt, (UIntPtr)4, logits, out node), "append");
                    var cp = new Native.clade_cache_params();
                    Native.clade_cache_params_init(ref cp);
                    CacheHandle cache;
                    A.Eq(Status.Ok, Native.clade_cache_create(tree, ref cp, out cache), "cache");
                    var sp = new Native.clade_sampler_params();
                    Native.clade_sampler_params_init(ref sp);
                    sp.temperature = 0;
                    SamplerHandle sampler;
                    A.Eq(Status.Ok, Native.clade_sampler_create(ref sp, out sampler), "sampler");
                    var greedy = new List<int>();
                    using (cache)
                    using (sampler)
                    {
                        int seq, tok;
                        A.Eq(Status.Ok, Native.clade_cache_add(cache, node, null, UIntPtr.Zero, 0, out seq), "add");
                        A.Eq(Status.Ok, Native.clade_sample(sampler, 0, logits, nv, null, UIntPtr.Zero, out tok), "sample");
                        A.Eq(A.Argmax(logits), tok, "greedy sample");
                        greedy.Add(tok);
                        var ids = new[] { seq };
                        var counts = new[] { 1 };
                        for (int step = 0; step < 4; step++)
                        {
                            var toks = new[] { tok };
                            var b = new Native.clade_batch();
                            Native.clade_batch_init(ref b);
                            var hs = new[] { GCHandle.Alloc(ids, GCHandleType.Pinned), GCHandle.Alloc(counts, GCHandleType.Pinned),
                                             GCHandle.Alloc(toks, GCHandleType.Pinned), GCHandle.Alloc(logits, GCHandleType.Pinned) };
                            try
                            {
                                b.n_seqs = (UIntPtr)1;
                                b.seq_ids = hs[0].AddrOfPinnedObject();
                                b.n_tokens = hs[1].AddrOfPinnedObject();
                                b.tokens = hs[2].AddrOfPinnedObject();
                                b.logits = hs[3].AddrOfPinnedObject();
                                b.logits_rows = (UIntPtr)1;
                                A.Eq(Status.Ok, Native.clade_decode(cache, ref b), "decode");
                            }
                            finally
                            {
                                foreach (var h in hs) h.Free();
                            }
                            A.Eq(Status.Ok, Native.clade_sample(sampler, 0, logits, nv, null, UIntPtr.Zero, out tok), "sample");
                            greedy.Add(tok);
                        }
                    }
                    A.Eq(Status.Ok, Native.clade_tree_release(tree, node), "release");
                    A.Eq(Status.State, Native.clade_tree_release(tree, node), "released twice");
                    A.True(Utf8.FromC(Native.clade_last_error()).Length > 0, "a message for CLADE_E_STATE");

                    // clade_generate with this test's own delegate, kept alive across the call
                    var text = new StringBuilder();
                    int calls = 0;
                    Native.clade_generate_fn fn = (user, s, token, ptr, len) => {
                        calls++;
                        text.Append(Utf8.FromC(ptr, (long)len));
                        return Native.CLADE_GENERATE_CONTINUE;
                    };
                    var pin = GCHandle.Alloc(prompt, GCHandleType.Pinned);
                    var gsp = new[] { sp };
                    var spin = GCHandle.Alloc(gsp, GCHandleType.Pinned);
                    try
                    {
                        var prompts = new[] { new Native.clade_prompt { tokens = pin.AddrOfPinnedObject(), n_tokens = (UIntPtr)4, parent = -1 } };
                        var gp = new Native.clade_generate_params();
                        Native.clade_generate_params_init(ref gp);
                        gp.max_new_tokens = 5;
                        gp.ignore_eog = 1;
                        gp.sampler = spin.AddrOfPinnedObject();
                        gp.callback = Marshal.GetFunctionPointerForDelegate(fn);
                        GenerationHandle gen;
                        A.Eq(Status.Ok, Native.clade_generate(tree, prompts, (UIntPtr)1, ref gp, out gen), "generate");
                        using (gen)
                        {
                            A.Eq(1, (int)Native.clade_generation_count(gen), "count");
                            UIntPtr n, len;
                            IntPtr tp2 = Native.clade_generation_tokens(gen, UIntPtr.Zero, out n);
                            var got = new int[(int)n];
                            Marshal.Copy(tp2, got, 0, got.Length);
                            A.Seq(greedy, got, "generate equals the step loop");
                            A.Eq(text.ToString(), Utf8.FromC(Native.clade_generation_text(gen, UIntPtr.Zero, out len), (long)len),
                                 "the callback's pieces");
                            A.Eq(6, calls, "5 tokens and a final call");
                            A.Eq(FinishReason.Length, Native.clade_generation_finish(gen, UIntPtr.Zero), "finish");
                            A.Eq(FinishReason.None, Native.clade_generation_finish(gen, (UIntPtr)7), "an index out of range");
                            A.True(Native.clade_generation_text(gen, (UIntPtr)7, out len) == IntPtr.Zero, "no text out of range");
                            // the idiomatic copy of the same handle
                            A.Seq(greedy, Tree.Results(gen, false)[0].Tokens, "Tree.Results");
                        }
                        A.Throws<ObjectDisposedException>(() => Tree.Results(gen, false), "a freed generation");
                    }
                    finally
                    {
                        pin.Free();
                        spin.Free();
                        GC.KeepAlive(fn);
                    }
                }
            }
            var names = new IntPtr[2];
            A.True((int)Native.clade_chat_template_list(names, (UIntPtr)2) > 2, "more templates than room");
            A.True(Utf8.FromC(names[0]).Length > 0, "a template name");
        }

        public static void TestModelGenerate()
        {
            var m = Spm();
            var prompts = StoryPrompts(m);
            var p = Greedy(4);
            GenerationResult want;
            using (var t = new Tree(m)) want = t.Generate(prompts, p);
            var got = m.Generate(prompts, p);
            A.Seq(want[0].Tokens, got[0].Tokens, "Model.Generate on a tree of its own");
        }
    }
}
