// The idiomatic layer's tree side: Tree (nodes, batch append, prefix
// reuse, sessions, KV budget, abort callback) and Cache (sequences, tree
// search operations, decode steps, token trees).
using System;
using System.Collections.Generic;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;

namespace Clade
{
    [Flags]
    public enum TreeFlags : uint { None = 0, AllowLongContext = 1, PrefixCache = 2 }

    /// <summary>clade_node_info, copied.</summary>
    public sealed class NodeInfo
    {
        public int Parent, Length, PathLength, Children, Refs;
    }

    /// <summary>One item of Tree.AppendBatch: a node (Cache null) or a new sequence of Cache.
    /// Parent: a node id, or ItemNode(i) for the node of an earlier item i.</summary>
    public sealed class AppendItem
    {
        public int Parent;
        public int[] Tokens;
        public Cache Cache;
        public bool WantLogits;
        /// <summary>Out: the node of a node item (the caller holds a reference), else -1.</summary>
        public int Node = -1;
        /// <summary>Out: the sequence of a sequence item, else -1.</summary>
        public int Seq = -1;
        /// <summary>Out: the logits of the item's last token, when WantLogits.</summary>
        public float[] Logits;

        public AppendItem(int parent, int[] tokens, Cache cache = null, bool wantLogits = false)
        {
            Parent = parent; Tokens = tokens; Cache = cache; WantLogits = wantLogits;
        }

        public static int ItemNode(int i) { return Native.CLADE_ITEM_NODE(i); }
    }

    /// <summary>A shared-cache tree of a model. Keeps the model alive. A tree and its caches are
    /// used by one thread at a time (clade.h: Threads).</summary>
    public sealed partial class Tree : IDisposable
    {
        public const int Root = 0;
        readonly TreeHandle h;
        public Model Model { get; private set; }
        internal readonly int NVocab;
        // The abort callback: C holds an id into a static table, never a managed
        // pointer, so a callback left on a freed tree can never reach freed memory.
        static readonly Native.clade_abort_fn abortThunk = AbortThunk;
        static readonly Dictionary<long, AbortState> aborts = new Dictionary<long, AbortState>();
        static long nextAbort;
        internal sealed class AbortState { public Func<bool> Fn; public Exception Error; }
        internal AbortState abort;
        long abortId;
        int users = 1; // this tree and its caches not yet disposed (the abort entry's life)

        public Tree(Model model, KvType kvType = KvType.F16, int prefillChunk = 0, ulong kvBudget = 0,
                    TreeFlags flags = TreeFlags.None)
        {
            Check.NotNull(model, "model");
            var p = new Native.clade_tree_params();
            Native.clade_tree_params_init(ref p);
            p.kv_type = kvType;
            p.prefill_chunk = prefillChunk;
            p.kv_budget = kvBudget;
            p.flags = (uint)flags;
            CladeException.Check(Native.clade_tree_create(model.Handle, ref p, out h));
            Model = model;
            NVocab = model.NVocab;
        }

        public TreeHandle Handle { get { return Check.Live(h, "Tree"); } }
        public bool IsDisposed { get { return h.IsClosed; } }

        public void Dispose()
        {
            if (h.IsClosed) return;
            h.Dispose();
            Unuse();
        }

        internal void Use() { lock (aborts) users++; }

        internal void Unuse()
        {
            lock (aborts)
            {
                if (--users == 0 && abortId != 0) { aborts.Remove(abortId); abortId = 0; }
            }
        }

        /// <summary>A node of tokens under parent (clade_tree_append); the caller holds a reference.</summary>
        public int Append(int parent, int[] tokens)
        {
            Check.Tokens(tokens, "tokens");
            int node;
            ResetAbort();
            Stopped(Native.clade_tree_append(Handle, parent, tokens, Check.Len(tokens), null, out node));
            return node;
        }

        /// <summary>Append, with the logits of the node's last token.</summary>
        public int Append(int parent, int[] tokens, out float[] logits)
        {
            Check.Tokens(tokens, "tokens");
            var l = new float[NVocab];
            int node;
            ResetAbort();
            Stopped(Native.clade_tree_append(Handle, parent, tokens, Check.Len(tokens), l, out node));
            logits = l;
            return node;
        }

        /// <summary>clade_tree_append_batch: every item at once, atomically.</summary>
        public void AppendBatch(IList<AppendItem> items)
        {
            Check.NotNull(items, "items");
            var arr = new Native.clade_append_item[Math.Max(items.Count, 1)];
            var caches = new List<CacheHandle>();
            using (var pins = new Pins())
            {
                try
                {
                    for (int i = 0; i < items.Count; i++)
                    {
                        var it = items[i];
                        if (it == null) throw new ArgumentNullException("items", "item " + i + " is null");
                        if (it.Tokens == null) throw new ArgumentNullException("items", "item " + i + " has null Tokens");
                        Native.clade_append_item_init(ref arr[i]);
                        arr[i].parent = it.Parent;
                        arr[i].tokens = pins.Pin(it.Tokens);
                        arr[i].n_tokens = Check.Len(it.Tokens);
                        if (it.Cache != null)
                        {
                            var ch = it.Cache.Handle;
                            bool ok = false;
                            ch.DangerousAddRef(ref ok);
                            caches.Add(ch);
                            arr[i].cache = ch.DangerousGetHandle();
                        }
                        if (it.WantLogits)
                        {
                            it.Logits = new float[NVocab];
                            arr[i].logits = pins.Pin(it.Logits);
                        }
                    }
                    ResetAbort();
                    Stopped(Native.clade_tree_append_batch(Handle, arr, Check.Size(items.Count)));
                }
                finally
                {
                    foreach (var c in caches) c.DangerousRelease();
                }
            }
            for (int i = 0; i < items.Count; i++)
            {
                items[i].Node = arr[i].node;
                items[i].Seq = arr[i].seq;
            }
        }

        /// <summary>Drop the caller's reference to node.</summary>
        public void Release(int node) { CladeException.Check(Native.clade_tree_release(Handle, node)); }

        /// <summary>clade_tree_append_prefix: reuse the deepest matching path, evaluate the rest.</summary>
        public int AppendPrefix(int[] tokens, out int reused)
        {
            float[] unused;
            return AppendPrefix(tokens, out reused, out unused, false);
        }

        public int AppendPrefix(int[] tokens, out int reused, out float[] logits)
        {
            return AppendPrefix(tokens, out reused, out logits, true);
        }

        int AppendPrefix(int[] tokens, out int reused, out float[] logits, bool want)
        {
            Check.Tokens(tokens, "tokens");
            var l = want ? new float[NVocab] : null;
            int node; UIntPtr r;
            ResetAbort();
            Stopped(Native.clade_tree_append_prefix(Handle, tokens, Check.Len(tokens), l, out node, out r));
            reused = (int)r;
            logits = l;
            return node;
        }

        /// <summary>Evict cached nodes until KvUsed &lt;= bytes; returns the bytes freed.</summary>
        public ulong Trim(ulong bytes = 0)
        {
            ulong freed;
            CladeException.Check(Native.clade_tree_trim(Handle, bytes, out freed));
            return freed;
        }

        /// <summary>clade_tree_save: the path root..node, tokens and KV, to a file.</summary>
        public void Save(int node, string path)
        {
            Check.NotNull(path, "path");
            CladeException.Check(Native.clade_tree_save(Handle, node, Utf8.Z(path, "path")));
        }

        /// <summary>clade_tree_load: a saved file as a node (the caller's reference).</summary>
        public int Load(string path, out int nTokens, out int nReused)
        {
            Check.NotNull(path, "path");
            int node; UIntPtr n, r;
            CladeException.Check(Native.clade_tree_load(Handle, Utf8.Z(path, "path"), out node, out n, out r));
            nTokens = (int)n; nReused = (int)r;
            return node;
        }

        public int Load(string path) { int a, b; return Load(path, out a, out b); }

        public NodeInfo NodeInfo(int node)
        {
            var i = Native.OutInit<Native.clade_node_info>();
            CladeException.Check(Native.clade_tree_node_info(Handle, node, ref i));
            return new NodeInfo {
                Parent = i.parent, Length = i.length, PathLength = i.path_length,
                Children = i.n_children, Refs = i.n_refs,
            };
        }

        public int[] NodeTokens(int node)
        {
            var buf = new int[64];
            while (true)
            {
                UIntPtr n;
                var st = CladeException.Check(Native.clade_tree_node_tokens(Handle, node, buf, Check.Len(buf), out n),
                    Status.BufferSmall);
                if (st == Status.Ok) { Array.Resize(ref buf, (int)n); return buf; }
                buf = new int[(int)n];
            }
        }

        public int[] Children(int node)
        {
            var buf = new int[16];
            while (true)
            {
                UIntPtr n;
                var st = CladeException.Check(Native.clade_tree_children(Handle, node, buf, Check.Len(buf), out n),
                    Status.BufferSmall);
                if (st == Status.Ok) { Array.Resize(ref buf, (int)n); return buf; }
                buf = new int[(int)n];
            }
        }

        public ulong KvBytes { get { return (ulong)Native.clade_tree_kv_bytes(Handle); } }
        public ulong KvUsed { get { return Native.clade_tree_kv_used(Handle); } }
        public void SetKvBudget(ulong bytes) { CladeException.Check(Native.clade_tree_set_kv_budget(Handle, bytes)); }

        /// <summary>clade_tree_set_abort: fn returns true to stop a long call (it then throws
        /// CladeException Status.Stopped; an exception fn throws stops it too and is rethrown
        /// to the caller). null removes it. It runs on the calling thread, between layers.</summary>
        public void SetAbort(Func<bool> fn)
        {
            var handle = Handle;
            lock (aborts)
            {
                if (fn == null)
                {
                    CladeException.Check(Native.clade_tree_set_abort(handle, null, IntPtr.Zero));
                    if (abortId != 0) { aborts.Remove(abortId); abortId = 0; }
                    abort = null;
                    return;
                }
                if (abortId == 0)
                {
                    abortId = ++nextAbort;
                    abort = new AbortState();
                    aborts[abortId] = abort;
                }
                abort.Fn = fn;
                CladeException.Check(Native.clade_tree_set_abort(handle, abortThunk, new IntPtr(abortId)));
            }
        }

        [MonoPInvokeCallback(typeof(Native.clade_abort_fn))]
        static int AbortThunk(IntPtr user)
        {
            AbortState s;
            lock (aborts)
                if (!aborts.TryGetValue(user.ToInt64(), out s)) return 0;
            if (s.Error != null) return 1;
            try { return s.Fn() ? 1 : 0; }
            catch (Exception e) { s.Error = e; return 1; }
        }

        /// <summary>Forgets an exception of the abort callback left by an earlier call.</summary>
        internal void ResetAbort()
        {
            var a = abort;
            if (a != null) a.Error = null;
        }

        /// <summary>Checks a call that the abort callback may stop: its exception comes back.</summary>
        internal void Stopped(Status st)
        {
            var a = abort;
            if (a != null && a.Error != null)
            {
                var e = a.Error;
                a.Error = null;
                ExceptionDispatchInfo.Capture(e).Throw();
            }
            CladeException.Check(st);
        }
    }

    /// <summary>Unique caches of sequences of a tree, and decode steps. Keeps the tree alive.</summary>
    public sealed class Cache : IDisposable
    {
        readonly CacheHandle h;
        public Tree Tree { get; private set; }
        readonly Dictionary<int, int> queued = new Dictionary<int, int>();
        bool disposed;

        public Cache(Tree tree, int maxSeqs = 64, int maxTokens = 1024, KvType kvType = KvType.Default,
                     Attention attention = Attention.Auto)
        {
            Check.NotNull(tree, "tree");
            var p = new Native.clade_cache_params();
            Native.clade_cache_params_init(ref p);
            p.max_seqs = maxSeqs;
            p.max_tokens = maxTokens;
            p.kv_type = kvType;
            p.attention = attention;
            CladeException.Check(Native.clade_cache_create(tree.Handle, ref p, out h));
            Tree = tree;
            tree.Use();
        }

        public CacheHandle Handle { get { return Check.Live(h, "Cache"); } }
        public bool IsDisposed { get { return h.IsClosed; } }

        public void Dispose()
        {
            if (disposed) return;
            disposed = true;
            h.Dispose();
            Tree.Unuse();
        }

        /// <summary>A sequence under node with its own first tokens (queued for the next step).</summary>
        public int Add(int node, int[] tokens = null, bool isPrivate = false)
        {
            int seq;
            int n = tokens == null ? 0 : tokens.Length;
            CladeException.Check(Native.clade_cache_add(Handle, node, tokens, Check.Size(n),
                isPrivate ? Native.CLADE_SEQ_PRIVATE : 0, out seq));
            queued[seq] = n;
            return seq;
        }

        public void Remove(int seq)
        {
            CladeException.Check(Native.clade_cache_remove(Handle, seq));
            queued.Remove(seq);
        }

        public void Truncate(int seq, int length) { CladeException.Check(Native.clade_cache_truncate(Handle, seq, length)); }

        /// <summary>Unique tokens evaluated so far (clade_cache_seq_length).</summary>
        public int Length(int seq)
        {
            int n;
            CladeException.Check(Native.clade_cache_seq_length(Handle, seq, out n));
            return n;
        }

        public ulong KvBytes { get { return (ulong)Native.clade_cache_kv_bytes(Handle); } }

        public int Fork(int seq)
        {
            int o;
            CladeException.Check(Native.clade_cache_fork(Handle, seq, out o));
            int q;
            queued[o] = queued.TryGetValue(seq, out q) ? q : 0;
            return o;
        }

        /// <summary>seq's unique tokens become a node (the caller's reference) it attaches to.</summary>
        public int Promote(int seq)
        {
            int node;
            CladeException.Check(Native.clade_cache_promote(Handle, seq, out node));
            return node;
        }

        public void Move(int seq, int node) { CladeException.Check(Native.clade_cache_move(Handle, seq, node)); }

        public int SeqNode(int seq)
        {
            int node;
            CladeException.Check(Native.clade_cache_seq_node(Handle, seq, out node));
            return node;
        }

        public int[] SeqTokens(int seq)
        {
            var buf = new int[64];
            while (true)
            {
                UIntPtr n;
                var st = CladeException.Check(Native.clade_cache_seq_tokens(Handle, seq, buf, Check.Len(buf), out n),
                    Status.BufferSmall);
                if (st == Status.Ok) { Array.Resize(ref buf, (int)n); return buf; }
                buf = new int[(int)n];
            }
        }

        /// <summary>clade_cache_save: seq's whole evaluated history, for Tree.Load.</summary>
        public void Save(int seq, string path)
        {
            Check.NotNull(path, "path");
            CladeException.Check(Native.clade_cache_save(Handle, seq, Utf8.Z(path, "path")));
        }

        /// <summary>One decode step: sequence seqs[i] brings tokens[i] (may be empty). One logits row
        /// per sequence that evaluates any token (queued or new), or with allLogits one per token.</summary>
        public float[][] Decode(int[] seqs, int[][] tokens, bool allLogits = false)
        {
            float[][] rows; int[] argmax;
            Step(seqs, tokens, null, allLogits, false, out rows, out argmax);
            return rows;
        }

        /// <summary>One sequence's step: the logits after its last token.</summary>
        public float[] Decode(int seq, params int[] tokens)
        {
            var rows = Decode(new[] { seq }, new[] { tokens ?? new int[0] });
            if (rows.Length == 0) throw new CladeException(Status.InvalidArg, "sequence " + seq + " evaluated no token");
            return rows[0];
        }

        /// <summary>Decode, returning each row's greedy token (clade_batch.argmax, clade 1.4).</summary>
        public int[] DecodeGreedy(int[] seqs, int[][] tokens, bool allLogits = false)
        {
            float[][] rows; int[] argmax;
            Step(seqs, tokens, null, allLogits, true, out rows, out argmax);
            return argmax;
        }

        /// <summary>clade_decode_tree: parents[i] gives one entry per token of tokens[i]: -1 or the
        /// index of an earlier token of that sequence (null: chains).</summary>
        public float[][] DecodeTree(int[] seqs, int[][] tokens, int[][] parents, bool allLogits = false)
        {
            float[][] rows; int[] argmax;
            Step(seqs, tokens, parents ?? new int[0][], allLogits, false, out rows, out argmax);
            return rows;
        }

        /// <summary>clade_cache_keep: keep [0, from) and from + keep[j], drop the rest.</summary>
        public void Keep(int seq, int from, int[] keep)
        {
            Check.Tokens(keep, "keep");
            CladeException.Check(Native.clade_cache_keep(Handle, seq, from, keep, Check.Len(keep)));
        }

        void Step(int[] seqs, int[][] tokens, int[][] parents, bool allLogits, bool greedy,
                  out float[][] rows, out int[] argmax)
        {
            Check.NotNull(seqs, "seqs");
            Check.NotNull(tokens, "tokens");
            if (seqs.Length != tokens.Length)
                throw new ArgumentException(seqs.Length + " sequences but " + tokens.Length + " token lists", "tokens");
            if (parents != null && parents.Length != 0 && parents.Length != seqs.Length)
                throw new ArgumentException(seqs.Length + " sequences but " + parents.Length + " parent lists", "parents");
            int total = 0, nRows = 0;
            var counts = new int[seqs.Length];
            for (int i = 0; i < seqs.Length; i++)
            {
                if (tokens[i] == null) throw new ArgumentNullException("tokens", "tokens[" + i + "] is null");
                counts[i] = tokens[i].Length;
                total += counts[i];
                int q;
                int m = (queued.TryGetValue(seqs[i], out q) ? q : 0) + counts[i];
                nRows += allLogits ? m : (m > 0 ? 1 : 0);
            }
            var flat = new int[Math.Max(total, 1)];
            int[] flatParents = parents == null ? null : new int[Math.Max(total, 1)];
            for (int i = 0, k = 0; i < seqs.Length; i++)
            {
                int[] ps = parents != null && parents.Length != 0 ? parents[i] : null;
                if (ps != null && ps.Length != counts[i])
                    throw new ArgumentException("sequence " + seqs[i] + " has " + ps.Length + " parents for " +
                                                counts[i] + " new tokens", "parents");
                for (int j = 0; j < counts[i]; j++, k++)
                {
                    flat[k] = tokens[i][j];
                    if (flatParents != null) flatParents[k] = ps != null ? ps[j] : j - 1;
                }
            }
            int nv = Tree.NVocab;
            float[] logits = greedy ? null : new float[Math.Max(nRows, 1) * (long)nv];
            int[] am = greedy ? new int[Math.Max(nRows, 1)] : null;
            var b = new Native.clade_batch();
            Native.clade_batch_init(ref b);
            using (var pins = new Pins())
            {
                b.n_seqs = Check.Size(seqs.Length);
                b.seq_ids = pins.Pin(seqs);
                b.n_tokens = pins.Pin(counts);
                b.tokens = pins.Pin(flat);
                b.all_logits = allLogits ? 1 : 0;
                b.logits = pins.Pin(logits);
                b.argmax = pins.Pin(am);
                b.logits_rows = Check.Size(nRows);
                Tree.ResetAbort();
                Status st = flatParents == null ? Native.clade_decode(Handle, ref b)
                                                : Native.clade_decode_tree(Handle, ref b, flatParents);
                Tree.Stopped(st);
            }
            foreach (var s in seqs) if (queued.ContainsKey(s)) queued[s] = 0;
            argmax = null;
            rows = null;
            if (greedy)
            {
                argmax = new int[nRows];
                Array.Copy(am, argmax, nRows);
                return;
            }
            rows = new float[nRows][];
            for (int r = 0; r < nRows; r++)
            {
                rows[r] = new float[nv];
                Array.Copy(logits, (long)r * nv, rows[r], 0, nv);
            }
        }
    }
}
