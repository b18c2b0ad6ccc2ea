// The C# binding's test runner: a console program with its own asserts (no
// NUnit). Main runs every test of Tests (TestsModel.cs, TestsTree.cs,
// TestsGenerate.cs), prints "ok"/"FAIL" per test and exits 1 on any failure.
// Environment: CLADE_CLI (the clade CLI, writes random models),
// CLADE_VOCAB_DIR (reference vocabularies); `Runner.exe NAME...` runs only
// the tests whose names contain one of the arguments.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Reflection;
using Clade;

namespace CladeTests
{
    public class AssertFailed : Exception
    {
        public AssertFailed(string m) : base(m) { }
    }

    public static class A
    {
        public static void True(bool c, string what)
        {
            if (!c) throw new AssertFailed(what);
        }

        public static void Eq<T>(T want, T got, string what)
        {
            if (!EqualityComparer<T>.Default.Equals(want, got))
                throw new AssertFailed(what + ": want " + want + ", got " + got);
        }

        public static void Seq<T>(IList<T> want, IList<T> got, string what)
        {
            if (want == null || got == null)
            {
                if (want != got) throw new AssertFailed(what + ": one list is null");
                return;
            }
            if (want.Count != got.Count)
                throw new AssertFailed(what + ": want " + want.Count + " items [" + Join(want) + "], got " +
                                       got.Count + " [" + Join(got) + "]");
            for (int i = 0; i < want.Count; i++)
                if (!EqualityComparer<T>.Default.Equals(want[i], got[i]))
                    throw new AssertFailed(what + ": item " + i + ": want [" + Join(want) + "], got [" + Join(got) + "]");
        }

        public static string Join<T>(IList<T> xs)
        {
            var parts = new string[Math.Min(xs.Count, 40)];
            for (int i = 0; i < parts.Length; i++) parts[i] = Convert.ToString(xs[i]);
            return string.Join(" ", parts) + (xs.Count > 40 ? " ..." : "");
        }

        /// <summary>Rows of logits equal to about rel, relative to the row's scale.</summary>
        public static void Close(float[] want, float[] got, string what, double rel = 1e-4)
        {
            Eq(want.Length, got.Length, what + " length");
            double scale = 1, worst = 0;
            foreach (var x in want) scale = Math.Max(scale, Math.Abs(x));
            for (int i = 0; i < want.Length; i++) worst = Math.Max(worst, Math.Abs(want[i] - got[i]));
            if (worst > rel * scale) throw new AssertFailed(what + ": logits differ by " + worst + " (scale " + scale + ")");
        }

        /// <summary>f must throw an E (not a crash, not another type); returns it.</summary>
        public static E Throws<E>(Action f, string what) where E : Exception
        {
            try { f(); }
            catch (E e) { return e; }
            catch (Exception e) { throw new AssertFailed(what + ": want " + typeof(E).Name + ", got " + e.GetType().Name + ": " + e.Message); }
            throw new AssertFailed(what + ": no " + typeof(E).Name + " thrown");
        }

        /// <summary>f must throw a CladeException of status with a message.</summary>
        public static CladeException Status(Status status, Action f, string what)
        {
            var e = Throws<CladeException>(f, what);
            Eq(status, e.Status, what + " (" + e.Message + ")");
            True(!string.IsNullOrEmpty(e.Message), what + ": an empty message");
            return e;
        }

        public static int Argmax(float[] row)
        {
            int best = 0;
            for (int i = 1; i < row.Length; i++) if (row[i] > row[best]) best = i;
            return best;
        }
    }

    public static class Env
    {
        public static string Tmp;
        public static string Cli = Environment.GetEnvironmentVariable("CLADE_CLI") ?? "";
        public static string VocabDir = Environment.GetEnvironmentVariable("CLADE_VOCAB_DIR") ?? "";
        public static string SpmVocab { get { return Path.Combine(VocabDir, "ggml-vocab-llama-spm.gguf"); } }

        /// <summary>A small random model written by the CLI (cached by name).</summary>
        public static string RandomModel(string name, params string[] extra)
        {
            string path = Path.Combine(Tmp, name);
            if (File.Exists(path)) return path;
            if (!File.Exists(Cli)) throw new AssertFailed("no clade CLI at '" + Cli + "' (set CLADE_CLI)");
            var args = new List<string> { "model", "random", "-o", path, "--layers", "2", "--dim", "64",
                "--heads", "4", "--kv-heads", "2", "--ff", "128", "--type", "f32", "--seed", "7" };
            args.AddRange(extra);
            var psi = new ProcessStartInfo(Cli, Quote(args)) {
                UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true,
            };
            using (var p = Process.Start(psi))
            {
                string err = p.StandardError.ReadToEnd();
                p.StandardOutput.ReadToEnd();
                p.WaitForExit();
                if (p.ExitCode != 0) throw new AssertFailed("clade model random failed: " + err);
            }
            return path;
        }

        public static string Small() { return RandomModel("small.gguf", "--vocab", "300"); }

        public static string Spm()
        {
            if (!File.Exists(SpmVocab)) throw new AssertFailed("no vocabulary at " + SpmVocab + " (set CLADE_VOCAB_DIR)");
            return RandomModel("spm.gguf", "--vocab-from", SpmVocab);
        }

        static string Quote(List<string> args)
        {
            var q = new List<string>();
            foreach (var a in args) q.Add("\"" + a.Replace("\\", "\\\\").Replace("\"", "\\\"") + "\"");
            return string.Join(" ", q);
        }
    }

    public static class Runner
    {
        public static int Main(string[] argv)
        {
            Env.Tmp = Path.Combine(Path.GetTempPath(), "clade-cs-" + Process.GetCurrentProcess().Id);
            Directory.CreateDirectory(Env.Tmp);
            int failed = 0, ran = 0;
            var t0 = DateTime.UtcNow;
            try
            {
                foreach (var m in typeof(Tests).GetMethods(BindingFlags.Public | BindingFlags.Static))
                {
                    if (!m.Name.StartsWith("Test")) continue;
                    if (argv.Length > 0 && Array.FindIndex(argv, a => m.Name.Contains(a)) < 0) continue;
                    ran++;
                    var t = DateTime.UtcNow;
                    try
                    {
                        m.Invoke(null, null);
                        Console.WriteLine("ok   {0} ({1:F2} s)", m.Name, (DateTime.UtcNow - t).TotalSeconds);
                    }
                    catch (TargetInvocationException e)
                    {
                        failed++;
                        Console.WriteLine("FAIL {0}: {1}", m.Name, e.InnerException);
                    }
                    // finalizers of handles a test dropped run here, between tests
                    GC.Collect();
                    GC.WaitForPendingFinalizers();
                }
            }
            finally
            {
                try { Directory.Delete(Env.Tmp, true); } catch (Exception) { }
            }
            Console.WriteLine("{0} tests, {1} failed, {2:F1} s (clade {3})", ran, failed,
                              (DateTime.UtcNow - t0).TotalSeconds, Library.Version);
            return failed > 0 || ran == 0 ? 1 : 0;
        }
    }
}
