// GenerationStream: Tree.GenerateStream's enumerable of text pieces. A
// producer thread runs Tree.Generate with a callback that hands each piece
// to the consumer through a small bounded queue; leaving the foreach early
// (Dispose) makes the callback answer StopAll and waits for the thread.
using System;
using System.Collections;
using System.Collections.Generic;
using System.Runtime.ExceptionServices;
using System.Threading;

namespace Clade
{
    /// <summary>One streamed piece: sequence Seq's next text (Token -1: its final piece).</summary>
    public struct Piece
    {
        public int Seq, Token;
        public string Text;
        public Piece(int seq, int token, string text) { Seq = seq; Token = token; Text = text; }
        public override string ToString() { return Text; }
    }

    /// <summary>The pieces of a generation as they come (IEnumerable&lt;Piece&gt;; Texts() gives them
    /// as IEnumerable&lt;string&gt;). Enumerate it once. clade_generate runs on a thread of its
    /// own, at most a few pieces ahead of the consumer; the tree must not be used meanwhile.
    /// After the last piece Results holds the GenerationResult. Dispose (or leaving a
    /// foreach early) stops the generation.</summary>
    public sealed class GenerationStream : IEnumerable<Piece>, IDisposable
    {
        const int Capacity = 16;

        // Everything the producer thread touches: it never holds the stream itself, so an
        // abandoned stream is collected and its finalizer stops the thread.
        sealed class Shared
        {
            public readonly object Gate = new object();
            public readonly Queue<Piece> Queue = new Queue<Piece>();
            public bool Closing, Done;
            public Exception Error;
            public GenerationResult Results;

            public Flow Put(int seq, int token, string piece)
            {
                lock (Gate)
                {
                    while (!Closing && Queue.Count >= Capacity) Monitor.Wait(Gate);
                    if (Closing) return Flow.StopAll;
                    if (piece.Length > 0)
                    {
                        Queue.Enqueue(new Piece(seq, token, piece));
                        Monitor.PulseAll(Gate);
                    }
                }
                return Flow.Continue;
            }

            public void Close()
            {
                lock (Gate)
                {
                    Closing = true;
                    Queue.Clear();
                    Monitor.PulseAll(Gate);
                }
            }
        }

        readonly Shared s = new Shared();
        readonly Thread thread;
        bool started;

        internal GenerationStream(Tree tree, IList<Prompt> prompts, GenerateParams p)
        {
            var sh = s;
            var list = new List<Prompt>(prompts);  // the caller may change its list meanwhile
            thread = new Thread(() => {
                GenerationResult r = null;
                Exception err = null;
                try { r = tree.Generate(list, p, sh.Put); }
                catch (Exception e) { err = e; }
                lock (sh.Gate)
                {
                    sh.Results = r;
                    sh.Error = err;
                    sh.Done = true;
                    Monitor.PulseAll(sh.Gate);
                }
            });
            thread.IsBackground = true;
            thread.Name = "clade-generate";
            thread.Start();
        }

        ~GenerationStream() { s.Close(); }

        /// <summary>The results, once the pieces are all enumerated (or after Dispose); else null.</summary>
        public GenerationResult Results { get { lock (s.Gate) return s.Done ? s.Results : null; } }

        /// <summary>Whether the generation was stopped (Dispose before the end, or a StopAll).</summary>
        public bool Stopped { get { var r = Results; return r != null && r.Stopped; } }

        public IEnumerator<Piece> GetEnumerator()
        {
            lock (s.Gate)
            {
                if (started) throw new InvalidOperationException("a GenerationStream is enumerated once");
                started = true;
            }
            return Pieces();
        }

        IEnumerator IEnumerable.GetEnumerator() { return GetEnumerator(); }

        IEnumerator<Piece> Pieces()
        {
            bool finished = false;
            try
            {
                while (true)
                {
                    Piece p;
                    lock (s.Gate)
                    {
                        while (s.Queue.Count == 0 && !s.Done) Monitor.Wait(s.Gate);
                        if (s.Queue.Count == 0) break;
                        p = s.Queue.Dequeue();
                        Monitor.PulseAll(s.Gate);
                    }
                    yield return p;
                }
                finished = true;
                thread.Join();
                Exception e;
                lock (s.Gate) e = s.Error;
                if (e != null) ExceptionDispatchInfo.Capture(e).Throw();
            }
            finally
            {
                if (!finished) Dispose();
            }
        }

        /// <summary>The pieces' text alone, as IEnumerable&lt;string&gt;.</summary>
        public IEnumerable<string> Texts()
        {
            foreach (var p in this) yield return p.Text;
        }

        /// <summary>Stops the generation if it is still running and waits for its thread.</summary>
        public void Dispose()
        {
            s.Close();
            if (thread.ManagedThreadId != Thread.CurrentThread.ManagedThreadId) thread.Join();
            GC.SuppressFinalize(this);
        }
    }
}
