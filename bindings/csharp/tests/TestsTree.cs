// Tests of the tree (append, batch append, release, node info, children,
// prefix reuse, KV budget, abort), the cache (add, remove, truncate, fork,
// promote, move, decode, greedy decode, token trees) and saved sessions.
using System;
using System.Collections.Generic;
using System.IO;
using Clade;

namespace CladeTests
{
    public static partial class Tests
    {
        static Model small;
        static Model Small() { return small ?? (small = new Model(Env.Small(), nThreads: 1)); }

        public static void TestTreeNodes()
        {
            var m = Small();
            var prompt = new[] { 5, 17, 42, 99, 3, 250, 11, 64, 7, 123 };
            using (var t = new Tree(m, KvType.F32))
            {
                A.Eq(0, t.Children(Tree.Root).Length, "an empty tree");
                float[] logits;
                int node = t.Append(Tree.Root, prompt, out logits);
                A.Eq(m.NVocab, logits.Length, "logits length");
                var info = t.NodeInfo(node);
                A.Eq(0, info.Parent, "parent");
                A.Eq(prompt.Length, info.Length, "length");
                A.Eq(0, info.PathLength, "path length");
                A.Seq(prompt, t.NodeTokens(node), "node tokens");
                A.True(t.KvBytes > 0 && t.KvUsed >= t.KvBytes, "KV bytes");
                int b = t.Append(0, new[] { 3 });
                var many = new List<int>();
                for (int i = 0; i < 20; i++) many.Add(t.Append(b, new[] { i }));  // past the first buffer
                A.Seq(new[] { node, b }, t.Children(0), "children of the root");
                A.Seq(many, t.Children(b), "20 children");
                foreach (var n in many) t.Release(n);
                t.Release(b);
                A.Seq(new[] { node }, t.Children(0), "after releases");
                A.Status(Status.State, () => t.Children(b), "a released node");
                A.Status(Status.State, () => t.Release(0), "releasing the root");
                A.Status(Status.Token, () => t.Append(0, new[] { 1, m.NVocab + 5 }), "a bad token");
                A.Eq(1, t.Children(0).Length, "nothing added by a failure");
                // the same prompt's logits in a sequence of a cache: close
                using (var c = new Cache(t))
                {
                    int s = c.Add(0, prompt);
                    A.Close(logits, c.Decode(s), "a node's logits and a sequence's");
                }
                t.Release(node);
            }
        }

        public static void TestAppendBatch()
        {
            var m = Small();
            int[] a = { 5, 17, 42, 99, 3, 250, 11 }, b = { 64, 7, 123 }, s0 = { 21, 150, 9 };
            using (var t = new Tree(m, KvType.F32))
            using (var c = new Cache(t, maxSeqs: 4, maxTokens: 64))
            using (var t1 = new Tree(m, KvType.F32))
            using (var c1 = new Cache(t1, maxSeqs: 4, maxTokens: 64))
            {
                var items = new List<AppendItem> {
                    new AppendItem(Tree.Root, a, wantLogits: true),
                    new AppendItem(AppendItem.ItemNode(0), b, wantLogits: true),
                    new AppendItem(AppendItem.ItemNode(1), s0, c, true),
                };
                t.AppendBatch(items);
                A.True(items[0].Node > 0 && items[1].Node > 0 && items[0].Seq == -1, "node items");
                A.True(items[2].Node == -1 && items[2].Seq >= 0, "a sequence item");
                A.Eq(items[0].Node, t.NodeInfo(items[1].Node).Parent, "item 1 under item 0");
                A.Eq(items[1].Node, c.SeqNode(items[2].Seq), "the sequence under item 1");
                A.Seq(s0, c.SeqTokens(items[2].Seq), "evaluated, not queued");
                // the same one at a time
                float[] la, lb;
                int na = t1.Append(0, a, out la);
                int nb = t1.Append(na, b, out lb);
                int q = c1.Add(nb, s0);
                var lq = c1.Decode(q);
                A.Close(la, items[0].Logits, "item 0's logits");
                A.Close(lb, items[1].Logits, "item 1's logits");
                A.Close(lq, items[2].Logits, "item 2's logits");
                A.Close(c1.Decode(q, 33), c.Decode(items[2].Seq, 33), "the batch's sequence goes on alike");
                // atomic: a bad token in the last item adds nothing
                var kids = t.Children(0).Length;
                A.Status(Status.Token, () => t.AppendBatch(new[] {
                    new AppendItem(0, new[] { 1, 2 }), new AppendItem(AppendItem.ItemNode(0), new[] { m.NVocab }),
                }), "a bad token in a batch");
                A.Eq(kids, t.Children(0).Length, "nothing added");
                A.Throws<ArgumentNullException>(() => t.AppendBatch(new AppendItem[] { null }), "a null item");
                A.Throws<ArgumentNullException>(() => t.AppendBatch(null), "null items");
                A.Status(Status.InvalidArg, () => t.AppendBatch(new[] { new AppendItem(AppendItem.ItemNode(0), new[] { 1 }) }),
                         "an item under itself");
                t.AppendBatch(new AppendItem[0]);
                t.Release(items[0].Node);
                t.Release(items[1].Node);
            }
        }

        public static void TestCacheOps()
        {
            var m = Small();
            using (var t = new Tree(m, KvType.F32))
            using (var c = new Cache(t, maxSeqs: 6, maxTokens: 64))
            {
                int node = t.Append(0, new[] { 5, 17, 42, 99 });
                int s = c.Add(node, new[] { 21, 22 });
                A.Eq(0, c.Length(s), "queued, not evaluated");
                c.Decode(s, 23);
                A.Eq(3, c.Length(s), "length");
                A.Seq(new[] { 21, 22, 23 }, c.SeqTokens(s), "seq tokens");
                A.True(c.KvBytes > 0, "kv bytes");
                // fork: the same next logits
                int f = c.Fork(s);
                var rows = c.Decode(new[] { s, f }, new[] { new[] { 24 }, new[] { 24 } });
                A.Eq(2, rows.Length, "two rows");
                A.Close(rows[0], rows[1], "a fork decodes alike");
                // truncate, all logits
                c.Truncate(f, 2);
                A.Eq(2, c.Length(f), "truncated");
                A.Eq(3, c.Decode(new[] { f }, new[] { new[] { 7, 8, 9 } }, true).Length, "all logits");
                // promote: s's unique tokens become a node
                var probe = c.Fork(s);
                var want = c.Decode(probe, 40);
                int p = c.Promote(s);
                A.Seq(new[] { 21, 22, 23, 24 }, t.NodeTokens(p), "promoted tokens");
                A.Eq(p, c.SeqNode(s), "attached to the new node");
                A.Eq(0, c.Length(s), "no unique tokens left");
                A.Close(want, c.Decode(s, 40), "the same logits after promote");
                // move a fresh sequence of the same history under p
                int g = c.Add(node, new[] { 21, 22, 23, 24 });
                c.Decode(new[] { g }, new[] { new int[0] });
                c.Move(g, p);
                A.Eq(p, c.SeqNode(g), "moved");
                A.Eq(0, c.Length(g), "unique part covered by the node");
                int other = t.Append(0, new[] { 1, 2, 3 });
                A.Status(Status.State, () => c.Move(g, other), "not a prefix");
                c.Remove(g);
                A.Status(Status.State, () => c.Length(g), "a removed sequence");
                foreach (var n in new[] { node, p, other }) t.Release(n);
            }
            using (var t = new Tree(m))
            using (var c = new Cache(t, maxSeqs: 1, maxTokens: 4))
            {
                int s = c.Add(0, new[] { 1, 2 });
                A.Status(Status.CacheFull, () => c.Decode(s, 3, 4, 5), "past max_tokens");
                A.Status(Status.CacheFull, () => c.Add(0), "every slot taken");
                A.Status(Status.CacheFull, () => c.Fork(s), "fork with no slot");
                A.Eq(1, c.Decode(new[] { s }, new[] { new[] { 3, 4 } }).Length, "then a step that fits");
                c.Truncate(s, 2);
                A.Status(Status.Token, () => c.Decode(s, -1), "a negative token");
                A.Eq(2, c.Length(s), "nothing changed");
            }
        }

        public static void TestSharedPrefixEqualsAlone()
        {
            var m = Small();
            var prompt = new[] { 5, 17, 42, 99, 3, 250, 11, 64, 7, 123 };
            var suffixes = new[] { new[] { 21 }, new[] { 150, 9 }, new[] { 299 } };
            var shared = new List<int>[3];
            using (var t = new Tree(m, KvType.F32))
            using (var c = new Cache(t, maxSeqs: 4, maxTokens: 64))
            {
                int node = t.Append(0, prompt);
                var seqs = new int[3];
                for (int i = 0; i < 3; i++) seqs[i] = c.Add(node, suffixes[i]);
                var rows = c.Decode(seqs, new[] { new int[0], new int[0], new int[0] });
                for (int i = 0; i < 3; i++) shared[i] = new List<int> { A.Argmax(rows[i]) };
                for (int step = 0; step < 5; step++)
                {
                    var toks = new int[3][];
                    for (int i = 0; i < 3; i++) toks[i] = new[] { shared[i][shared[i].Count - 1] };
                    rows = c.Decode(seqs, toks);
                    for (int i = 0; i < 3; i++) shared[i].Add(A.Argmax(rows[i]));
                }
                t.Release(node);
            }
            for (int i = 0; i < 3; i++)
            {
                using (var t = new Tree(m, KvType.F32))
                using (var c = new Cache(t))
                {
                    var all = new List<int>(prompt);
                    all.AddRange(suffixes[i]);
                    int s = c.Add(0, all.ToArray());
                    var alone = new List<int> { A.Argmax(c.Decode(s)) };
                    for (int step = 0; step < 5; step++) alone.Add(A.Argmax(c.Decode(s, alone[alone.Count - 1])));
                    A.Seq(alone, shared[i], "sequence " + i + " shared and alone");
                }
            }
        }

        public static void TestDecodeGreedyAndTree()
        {
            var m = Small();
            using (var t = new Tree(m))
            using (var c1 = new Cache(t, maxSeqs: 2))
            using (var c2 = new Cache(t, maxSeqs: 2))
            {
                int a1 = c1.Add(0, new[] { 1, 2, 3 }), b1 = c1.Add(0, new[] { 4 });
                int a2 = c2.Add(0, new[] { 1, 2, 3 }), b2 = c2.Add(0, new[] { 4 });
                for (int step = 0; step < 3; step++)
                {
                    var rows = c1.Decode(new[] { a1, b1 }, new[] { new[] { 5 + step }, new[] { 6 } }, step == 0);
                    var got = c2.DecodeGreedy(new[] { a2, b2 }, new[] { new[] { 5 + step }, new[] { 6 } }, step == 0);
                    A.Eq(step == 0 ? 6 : 2, got.Length, "greedy rows");
                    var want = new int[rows.Length];
                    for (int i = 0; i < rows.Length; i++) want[i] = A.Argmax(rows[i]);
                    A.Seq(want, got, "greedy tokens");
                }
            }
            using (var t = new Tree(m, KvType.F32))
            using (var c = new Cache(t, maxSeqs: 3, maxTokens: 64))
            {
                int node = t.Append(0, new[] { 5, 6, 7, 8 });
                int s = c.Add(node, new[] { 9, 10 });
                c.Decode(new[] { s }, new[] { new int[0] });
                int f = c.Fork(s), d = c.Fork(s);
                // 21 and 30 after the history, 31 under 30, 22 under 21
                var rows = c.DecodeTree(new[] { s }, new[] { new[] { 21, 30, 31, 22 } }, new[] { new[] { -1, -1, 1, 0 } }, true);
                A.Eq(4, rows.Length, "a row per tree token");
                var ra = c.Decode(new[] { f }, new[] { new[] { 30, 31 } }, true);
                var rb = c.DecodeTree(new[] { d }, new[] { new[] { 21, 22 } }, null, true);
                A.Close(rb[0], rows[0], "21");
                A.Close(ra[0], rows[1], "30");
                A.Close(ra[1], rows[2], "31");
                A.Close(rb[1], rows[3], "22");
                c.Keep(s, 2, new[] { 1, 2 });
                A.Seq(c.SeqTokens(f), c.SeqTokens(s), "kept the path 30, 31");
                A.Status(Status.InvalidArg, () => c.DecodeTree(new[] { s }, new[] { new[] { 1, 2 } }, new[] { new[] { 0, -1 } }),
                         "a token its own parent");
                t.Release(node);
            }
        }

        public static void TestPrefixAndSessions()
        {
            var m = Small();
            var doc = new int[40];
            for (int i = 0; i < 40; i++) doc[i] = (7 * i + 3) % 300;
            var docA = new List<int>(doc) { 5, 6 }.ToArray();
            var docB = new List<int>(new ArraySegment<int>(doc, 0, 30)) { 9 }.ToArray();
            string path = Path.Combine(Env.Tmp, "s.clade"), seqPath = Path.Combine(Env.Tmp, "q.clade");
            using (var t = new Tree(m, KvType.F32, flags: TreeFlags.PrefixCache))
            {
                int reused;
                float[] got;
                int a = t.AppendPrefix(docA, out reused);
                A.Eq(0, reused, "nothing to reuse");
                int b = t.AppendPrefix(docB, out reused, out got);
                A.Eq(30, reused, "30 reused (a split)");
                using (var fresh = new Tree(m, KvType.F32))
                {
                    float[] want;
                    fresh.Append(0, docB, out want);
                    A.Close(want, got, "reused logits");
                }
                t.Release(b);
                A.True(t.Trim(0) > 0, "the released node was cached");
                t.Save(a, path);
                using (var c = new Cache(t))
                {
                    int s = c.Add(a, new[] { 11 });
                    c.Decode(s);
                    c.Save(s, seqPath);
                }
                A.Status(Status.IO, () => t.Save(a, "/nonexistent/dir/x.clade"), "an unwritable path");
            }
            using (var t2 = new Tree(m, KvType.F32))
            {
                int n, reused;
                int node = t2.Load(path, out n, out reused);
                A.Eq(42, n, "tokens loaded");
                A.Eq(0, reused, "none reused");
                float[] row;
                using (var c = new Cache(t2))
                {
                    int s = c.Add(node);
                    row = c.Decode(s, 11);
                }
                using (var fresh = new Tree(m, KvType.F32))
                {
                    float[] want;
                    fresh.Append(0, new List<int>(docA) { 11 }.ToArray(), out want);
                    A.Close(want, row, "logits after a loaded session");
                }
                int q = t2.Load(seqPath, out n, out reused);
                A.Eq(43, n, "a sequence's session");
                A.Eq(42, reused, "its path reused");
                t2.Release(q);
                t2.Release(node);
            }
            using (var t16 = new Tree(m))  // F16 KV: the file holds F32
            {
                A.Status(Status.Mismatch, () => t16.Load(path), "another KV type");
                A.Status(Status.IO, () => t16.Load(path + ".missing"), "a missing file");
                A.Throws<ArgumentNullException>(() => t16.Load(null), "a null path");
                File.WriteAllText(seqPath, "garbage");
                A.Status(Status.Format, () => t16.Load(seqPath), "not a session");
            }
        }

        public static void TestKvBudgetAndAbort()
        {
            var m = Small();
            using (var t = new Tree(m))
            using (var c = new Cache(t, maxSeqs: 2, maxTokens: 64))
            {
                int s = c.Add(0);
                ulong used = t.KvUsed;
                t.SetKvBudget(Math.Max(used, 1));
                A.Status(Status.KvBudget, () => t.Append(0, new[] { 1, 2, 3 }), "past the budget");
                var forty = new int[40];
                for (int i = 0; i < 40; i++) forty[i] = i + 1;
                A.Status(Status.KvBudget, () => c.Decode(s, forty), "a step past the budget");
                A.Eq(used, t.KvUsed, "nothing allocated");
                t.SetKvBudget(0);
                t.Release(t.Append(0, new[] { 1, 2, 3 }));
            }
            using (var t = new Tree(m))
            using (var c = new Cache(t, maxSeqs: 2))
            {
                int calls = 0;
                int s = c.Add(0, new[] { 1, 2, 3 });
                t.SetAbort(() => { calls++; return true; });
                A.Status(Status.Stopped, () => c.Decode(s, 4), "aborted");
                A.True(calls > 0, "the abort callback ran");
                A.Eq(0, c.Length(s), "nothing changed");
                A.Status(Status.Stopped, () => t.Append(0, new[] { 5, 6 }), "an aborted append");
                t.SetAbort(() => { throw new KeyNotFoundException("from the callback"); });
                A.Throws<KeyNotFoundException>(() => c.Decode(s, 4), "the callback's exception");
                A.Eq(0, c.Length(s), "nothing changed");
                int n = calls;
                t.SetAbort(() => { calls++; return false; });
                A.Eq(1, c.Decode(new[] { s }, new[] { new[] { 4 } }).Length, "a step");
                A.True(calls > n, "called again");
                // generate stopped by the abort callback mid-way: results marked Stopped, or
                // (a library that gives none) CladeException Stopped; a throw comes back as is
                int k = 0;
                t.SetAbort(() => ++k > 20);
                try
                {
                    var r = t.Generate(new List<Prompt> { new[] { 1, 2 } }, new GenerateParams { MaxNewTokens = 30, IgnoreEog = true });
                    A.True(r.Stopped, "stopped");
                }
                catch (CladeException e)
                {
                    A.Eq(Status.Stopped, e.Status, "stopped: " + e.Message);
                }
                k = 0;
                t.SetAbort(() => { if (++k > 20) throw new TimeoutException("abort"); return false; });
                A.Throws<TimeoutException>(() => t.Generate(new List<Prompt> { new[] { 1, 2 } },
                    new GenerateParams { MaxNewTokens = 30, IgnoreEog = true }), "the abort callback's exception from Generate");
                A.Eq(0, t.Children(0).Length, "no node left");
                t.SetAbort(() => { calls++; return false; });
                // the tree disposed first: its abort callback stays with the cache
                t.Dispose();
                c.Decode(s, 5);
                A.True(calls > n + 1, "called after the tree's Dispose");
            }
        }

        public static void TestModelFreedFirst()
        {
            var m = new Model(Env.Small(), nThreads: 1);
            var tree = new Tree(m, KvType.F32);
            var cache = new Cache(tree, maxSeqs: 2, maxTokens: 32);
            int s = cache.Add(0, new[] { 1, 2, 3 });
            var want = cache.Decode(s, 4);
            cache.Truncate(s, 3);
            m.Dispose();  // the tree and cache keep the model's memory alive
            int node = tree.Append(0, new[] { 7, 8 });
            A.Close(want, cache.Decode(s, 4), "after the model's Dispose");
            tree.Dispose();  // the cache keeps the tree's nodes alive
            int s2 = cache.Add(node, new[] { 9 });
            A.Eq(2, cache.Decode(new[] { s, s2 }, new[] { new[] { 5 }, new int[0] }).Length, "after the tree's Dispose");
            cache.Dispose();
        }
    }
}
