// The SafeHandle of each clade handle (model, tree, cache, sampler,
// detokenizer, generation), CladeException (a clade_status and
// clade_last_error's message), and the small helpers of the binding:
// UTF-8 strings to and from C, pinned arrays, and the attribute Unity's
// IL2CPP looks for on callbacks called from C.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Text;

namespace Clade
{
    /// <summary>Base of the handles: owns one pointer, freed once (Dispose or the finalizer).
    /// clade's *_free calls are deferred (a tree keeps its model alive, a cache
    /// its tree, a detokenizer its model), so handles may be freed in any order.</summary>
    public abstract class CladeHandle : SafeHandle
    {
        protected CladeHandle() : base(IntPtr.Zero, true) { }
        public override bool IsInvalid { get { return handle == IntPtr.Zero; } }
    }

    public sealed class ModelHandle : CladeHandle
    {
        /// <summary>A NULL model (for clade_chat_apply with a template name); never freed.</summary>
        public static readonly ModelHandle Null = new ModelHandle();
        protected override bool ReleaseHandle() { Native.clade_model_free(handle); return true; }
    }

    public sealed class TreeHandle : CladeHandle
    {
        protected override bool ReleaseHandle() { Native.clade_tree_free(handle); return true; }
    }

    public sealed class CacheHandle : CladeHandle
    {
        protected override bool ReleaseHandle() { Native.clade_cache_free(handle); return true; }
    }

    public sealed class SamplerHandle : CladeHandle
    {
        protected override bool ReleaseHandle() { Native.clade_sampler_free(handle); return true; }
    }

    public sealed class DetokenizerHandle : CladeHandle
    {
        protected override bool ReleaseHandle() { Native.clade_detokenizer_free(handle); return true; }
    }

    public sealed class GenerationHandle : CladeHandle
    {
        protected override bool ReleaseHandle() { Native.clade_generation_free(handle); return true; }
    }

    /// <summary>A clade call failed: Status is its clade_status, Message clade's own text
    /// (clade_last_error) or the binding's when the binding refused the call first.</summary>
    public class CladeException : Exception
    {
        public Status Status { get; private set; }

        public CladeException(Status status, string message)
            : base(string.IsNullOrEmpty(message) ? Utf8.FromC(Native.clade_status_string(status)) : message)
        {
            Status = status;
        }

        public CladeException(Status status, string message, Exception inner)
            : base(message, inner)
        {
            Status = status;
        }

        /// <summary>The exception of status, with the calling thread's clade_last_error.</summary>
        public static CladeException FromStatus(Status status)
        {
            string msg = Utf8.FromC(Native.clade_last_error());
            string name = Utf8.FromC(Native.clade_status_string(status));
            return new CladeException(status, msg.Length > 0 ? name + ": " + msg : name);
        }

        /// <summary>Throws unless status is Ok or one of allowed; returns it.</summary>
        public static Status Check(Status status, params Status[] allowed)
        {
            if (status == Status.Ok) return status;
            foreach (var a in allowed)
                if (a == status) return status;
            throw FromStatus(status);
        }
    }

    /// <summary>UTF-8 between .NET strings and C's bytes.</summary>
    public static class Utf8
    {
        static readonly UTF8Encoding strict = new UTF8Encoding(false, true);

        /// <summary>NUL-terminated UTF-8 of s (null stays null). A NUL inside s is refused.</summary>
        public static byte[] Z(string s, string what = "string")
        {
            if (s == null) return null;
            if (s.IndexOf('\0') >= 0)
                throw new CladeException(Status.InvalidArg, what + " holds a NUL character");
            byte[] b;
            try { b = strict.GetBytes(s); }
            catch (EncoderFallbackException e)
            {
                throw new CladeException(Status.Utf8, what + " is not valid UTF-16 (a lone surrogate)", e);
            }
            var z = new byte[b.Length + 1];
            Buffer.BlockCopy(b, 0, z, 0, b.Length);
            return z;
        }

        /// <summary>UTF-8 of s without a terminator.</summary>
        public static byte[] Bytes(string s, string what = "text")
        {
            if (s == null) throw new ArgumentNullException(what);
            try { return strict.GetBytes(s); }
            catch (EncoderFallbackException e)
            {
                throw new CladeException(Status.Utf8, what + " is not valid UTF-16 (a lone surrogate)", e);
            }
        }

        /// <summary>A NUL-terminated C string ("" for NULL).</summary>
        public static string FromC(IntPtr p)
        {
            if (p == IntPtr.Zero) return "";
            int n = 0;
            while (Marshal.ReadByte(p, n) != 0) n++;
            return FromC(p, n);
        }

        /// <summary>n bytes at p as text (invalid bytes become U+FFFD).</summary>
        public static string FromC(IntPtr p, long n)
        {
            if (p == IntPtr.Zero || n <= 0) return "";
            if (n > int.MaxValue) throw new CladeException(Status.InvalidArg, "text over 2 GiB");
            var b = new byte[n];
            Marshal.Copy(p, b, 0, (int)n);
            return Encoding.UTF8.GetString(b);
        }

        /// <summary>n bytes at p.</summary>
        public static byte[] BytesFromC(IntPtr p, long n)
        {
            var b = new byte[n > 0 ? n : 0];
            if (p != IntPtr.Zero && n > 0) Marshal.Copy(p, b, 0, (int)n);
            return b;
        }
    }

    /// <summary>Arrays pinned for the length of a call (a using block).</summary>
    internal sealed class Pins : IDisposable
    {
        readonly List<GCHandle> handles = new List<GCHandle>();

        /// <summary>The array's address (IntPtr.Zero for null), pinned until Dispose.</summary>
        public IntPtr Pin(object array)
        {
            if (array == null) return IntPtr.Zero;
            var h = GCHandle.Alloc(array, GCHandleType.Pinned);
            handles.Add(h);
            return h.AddrOfPinnedObject();
        }

        public void Dispose()
        {
            foreach (var h in handles) h.Free();
            handles.Clear();
        }
    }

    /// <summary>Marks the static methods C calls back (Unity's IL2CPP needs it; Mono ignores it).</summary>
    [AttributeUsage(AttributeTargets.Method)]
    internal sealed class MonoPInvokeCallbackAttribute : Attribute
    {
        public MonoPInvokeCallbackAttribute(Type type) { }
    }

    internal static class Check
    {
        public static T NotNull<T>(T x, string name) where T : class
        {
            if (x == null) throw new ArgumentNullException(name);
            return x;
        }

        /// <summary>The handle of a binding object, or ObjectDisposedException.</summary>
        public static H Live<H>(H h, string what) where H : SafeHandle
        {
            if (h == null || h.IsClosed || h.IsInvalid)
                throw new ObjectDisposedException(what, what + " was disposed");
            return h;
        }

        public static UIntPtr Size(long n) { return (UIntPtr)(ulong)n; }
        public static UIntPtr Len(Array a) { return (UIntPtr)(ulong)(a == null ? 0 : a.Length); }

        public static int[] Tokens(int[] t, string name)
        {
            if (t == null) throw new ArgumentNullException(name);
            return t;
        }
    }
}
