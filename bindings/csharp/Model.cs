// The idiomatic layer's model side: Library (version, status names, the
// log callback, chat templates without a model), Model (load, describe,
// tokenizer, chat templates) and Detokenizer (streaming text).
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;

namespace Clade
{
    /// <summary>One message of a conversation (clade_chat_message).</summary>
    public struct ChatMessage
    {
        public string Role, Content;
        public ChatMessage(string role, string content) { Role = role; Content = content; }
    }

    /// <summary>Process-wide calls: version, status names, logging, chat templates.</summary>
    public static class Library
    {
        /// <summary>clade_version_string of the library loaded, e.g. "1.4.0".</summary>
        public static string Version { get { return Utf8.FromC(Native.clade_version_string()); } }
        public static int VersionNumber { get { return Native.clade_version_number(); } }

        public static string StatusString(Status s) { return Utf8.FromC(Native.clade_status_string(s)); }

        // The delegate C holds: static, so it lives as long as the process.
        static readonly Native.clade_log_fn logThunk = LogThunk;
        static volatile Action<LogLevel, string> logHandler;

        /// <summary>clade_set_log: handler gets clade's messages of at least minLevel, on
        /// the thread that logs (possibly several at once); null turns logging off.
        /// An exception the handler throws is dropped (none may unwind into C).</summary>
        public static void SetLog(Action<LogLevel, string> handler, LogLevel minLevel = LogLevel.Info)
        {
            logHandler = handler;
            Native.clade_set_log(handler == null ? null : logThunk, IntPtr.Zero, minLevel);
        }

        [MonoPInvokeCallback(typeof(Native.clade_log_fn))]
        static void LogThunk(LogLevel level, IntPtr message, IntPtr user)
        {
            var h = logHandler;
            if (h == null) return;
            try { h(level, Utf8.FromC(message)); }
            catch (Exception) { }
        }

        /// <summary>The chat template names clade knows (clade_chat_template_list).</summary>
        public static string[] ChatTemplates()
        {
            int n = (int)Native.clade_chat_template_list(null, UIntPtr.Zero);
            var names = new IntPtr[n];
            Native.clade_chat_template_list(names, Check.Size(n));
            var r = new string[n];
            for (int i = 0; i < n; i++) r[i] = Utf8.FromC(names[i]);
            return r;
        }

        /// <summary>clade_chat_apply with no model: a named template (BOS/EOS "&lt;s&gt;", "&lt;/s&gt;").</summary>
        public static string ChatApply(IList<ChatMessage> messages, string template,
                                       bool addAssistantPrompt = true)
        {
            Check.NotNull(template, "template");
            return Model.ChatApply(ModelHandle.Null, messages, template, addAssistantPrompt);
        }
    }

    /// <summary>clade_model_info, copied.</summary>
    public sealed class ModelInfo
    {
        public string Architecture, Name;
        public int Layers, Embd, Heads, KvHeads, HeadDim, FF, Vocab, Ctx;
        public float RopeFreqBase, RopeFreqScale, NormEps;
        public RopeScaling RopeScaling;
        public WeightType WeightType;
        public bool HasQkvBias, TiedOutput, VocabOnly;
        public ulong Params, WeightBytes;
    }

    /// <summary>clade_special_tokens: -1 where the model has none.</summary>
    public sealed class SpecialTokens
    {
        public int Bos, Eos, Eot, Pad, Unk;
        public bool AddBos, AddEos;
    }

    /// <summary>A loaded GGUF model: weights, configuration, tokenizer. Thread-safe; Dispose
    /// gives the handle up (trees, caches and detokenizers made from it keep working).</summary>
    public sealed class Model : IDisposable
    {
        readonly ModelHandle h;
        /// <summary>The path it was loaded from.</summary>
        public string Path { get; private set; }
        /// <summary>n_vocab, read at load.</summary>
        public int NVocab { get; private set; }

        /// <summary>clade_model_load. nThreads 0: every core.</summary>
        public Model(string path, int nThreads = 0, bool vocabOnly = false, bool useMmap = true,
                     Backend backend = Backend.Cpu)
        {
            Check.NotNull(path, "path");
            var p = new Native.clade_model_params();
            Native.clade_model_params_init(ref p);
            p.n_threads = nThreads;
            p.vocab_only = vocabOnly ? 1 : 0;
            p.use_mmap = useMmap ? 1 : 0;
            p.backend = backend;
            CladeException.Check(Native.clade_model_load(Utf8.Z(path, "path"), ref p, out h));
            Path = path;
            NVocab = Info().Vocab;
        }

        /// <summary>The SafeHandle, for Native calls. ObjectDisposedException once disposed.</summary>
        public ModelHandle Handle { get { return Check.Live(h, "Model"); } }
        public bool IsDisposed { get { return h.IsClosed; } }
        public void Dispose() { h.Dispose(); }

        public ModelInfo Info()
        {
            var i = Native.OutInit<Native.clade_model_info>();
            CladeException.Check(Native.clade_model_describe(Handle, ref i));
            var r = new ModelInfo();
            unsafe
            {
                r.Architecture = Utf8.FromC((IntPtr)i.architecture);
                r.Name = Utf8.FromC((IntPtr)i.name);
            }
            r.Layers = i.n_layers; r.Embd = i.n_embd; r.Heads = i.n_heads; r.KvHeads = i.n_kv_heads;
            r.HeadDim = i.head_dim; r.FF = i.n_ff; r.Vocab = i.n_vocab; r.Ctx = i.n_ctx;
            r.RopeFreqBase = i.rope_freq_base; r.RopeFreqScale = i.rope_freq_scale;
            r.RopeScaling = i.rope_scaling; r.NormEps = i.norm_eps; r.WeightType = i.weight_type;
            r.HasQkvBias = i.has_qkv_bias != 0; r.TiedOutput = i.tied_output != 0;
            r.VocabOnly = i.vocab_only != 0; r.Params = i.n_params; r.WeightBytes = i.weight_bytes;
            return r;
        }

        public SpecialTokens SpecialTokens()
        {
            var s = Native.OutInit<Native.clade_special_tokens>();
            CladeException.Check(Native.clade_model_special_tokens(Handle, ref s));
            return new SpecialTokens {
                Bos = s.bos, Eos = s.eos, Eot = s.eot, Pad = s.pad, Unk = s.unk,
                AddBos = s.add_bos != 0, AddEos = s.add_eos != 0,
            };
        }

        public bool IsEog(int token) { return Native.clade_token_is_eog(Handle, token) != 0; }

        /// <summary>clade_tokenize of text's UTF-8.</summary>
        public int[] Tokenize(string text, bool addSpecial = true, bool parseSpecial = false)
        {
            return Tokenize(Utf8.Bytes(text, "text"), addSpecial, parseSpecial);
        }

        /// <summary>clade_tokenize of raw bytes (not valid UTF-8: CladeException Status.Utf8).</summary>
        public int[] Tokenize(byte[] utf8, bool addSpecial = true, bool parseSpecial = false)
        {
            Check.NotNull(utf8, "utf8");
            uint flags = (addSpecial ? Native.CLADE_TOKENIZE_ADD_SPECIAL : 0) |
                         (parseSpecial ? Native.CLADE_TOKENIZE_PARSE_SPECIAL : 0);
            var buf = new int[utf8.Length + 8];
            while (true)
            {
                UIntPtr n;
                var st = CladeException.Check(Native.clade_tokenize(Handle, utf8, Check.Len(utf8), flags,
                    buf, Check.Len(buf), out n), Status.BufferSmall);
                if (st == Status.Ok) { Array.Resize(ref buf, (int)n); return buf; }
                buf = new int[(int)n];
            }
        }

        /// <summary>clade_detokenize: the bytes of tokens.</summary>
        public byte[] DetokenizeBytes(int[] tokens, bool special = false)
        {
            Check.Tokens(tokens, "tokens");
            var buf = new byte[tokens.Length * 8 + 16];
            while (true)
            {
                UIntPtr n;
                var st = CladeException.Check(Native.clade_detokenize(Handle, tokens, Check.Len(tokens),
                    special ? 1 : 0, buf, Check.Len(buf), out n), Status.BufferSmall);
                if (st == Status.Ok) { Array.Resize(ref buf, (int)n); return buf; }
                buf = new byte[(int)n];
            }
        }

        /// <summary>clade_detokenize as text (bytes that are not UTF-8 become U+FFFD).</summary>
        public string Detokenize(int[] tokens, bool special = false)
        {
            var b = DetokenizeBytes(tokens, special);
            return System.Text.Encoding.UTF8.GetString(b);
        }

        /// <summary>clade_token_to_piece: one token's bytes, as in the middle of a text.</summary>
        public byte[] TokenToPiece(int token, bool special = false)
        {
            var buf = new byte[32];
            while (true)
            {
                UIntPtr n;
                var st = CladeException.Check(Native.clade_token_to_piece(Handle, token, special ? 1 : 0,
                    buf, Check.Len(buf), out n), Status.BufferSmall);
                if (st == Status.Ok) { Array.Resize(ref buf, (int)n); return buf; }
                buf = new byte[(int)n];
            }
        }

        /// <summary>clade_chat_apply: template null is the model's own (recognized) template.</summary>
        public string ChatApply(IList<ChatMessage> messages, string template = null,
                                bool addAssistantPrompt = true)
        {
            return ChatApply(Handle, messages, template, addAssistantPrompt);
        }

        internal static string ChatApply(ModelHandle model, IList<ChatMessage> messages, string template,
                                         bool addAssistantPrompt)
        {
            Check.NotNull(messages, "messages");
            var arr = new Native.clade_chat_message[Math.Max(messages.Count, 1)];
            using (var pins = new Pins())
            {
                for (int i = 0; i < messages.Count; i++)
                {
                    if (messages[i].Role == null || messages[i].Content == null)
                        throw new ArgumentNullException("messages", "message " + i + " has a null role or content");
                    arr[i].role = pins.Pin(Utf8.Z(messages[i].Role, "message " + i + "'s role"));
                    arr[i].content = pins.Pin(Utf8.Z(messages[i].Content, "message " + i + "'s content"));
                }
                byte[] name = Utf8.Z(template, "template");
                int guess = 256;
                foreach (var m in messages) guess += 3 * (m.Role.Length + m.Content.Length) + 64;
                var buf = new byte[guess];
                while (true)
                {
                    UIntPtr n;
                    var st = CladeException.Check(Native.clade_chat_apply(model, name, arr, Check.Size(messages.Count),
                        addAssistantPrompt ? 1 : 0, buf, Check.Len(buf), out n), Status.BufferSmall);
                    if (st == Status.Ok) return System.Text.Encoding.UTF8.GetString(buf, 0, (int)n);
                    buf = new byte[(int)n];
                }
            }
        }

        /// <summary>clade_chat_template_name: the family recognized from the model's template.</summary>
        public string ChatTemplateName()
        {
            IntPtr name;
            CladeException.Check(Native.clade_chat_template_name(Handle, out name));
            return Utf8.FromC(name);
        }

        /// <summary>Tree.Generate on a tree of its own (made and disposed for the call).</summary>
        public GenerationResult Generate(IList<Prompt> prompts, GenerateParams p = null,
                                         PieceCallback callback = null, KvType kvType = KvType.F16)
        {
            using (var tree = new Tree(this, kvType))
                return tree.Generate(prompts, p, callback);
        }

        /// <summary>A streaming detokenizer of this model.</summary>
        public Detokenizer NewDetokenizer(bool special = false, bool firstInText = true)
        {
            return new Detokenizer(this, special, firstInText);
        }

        /// <summary>The text of tokens piece by piece, as a detokenizer releases it.</summary>
        public IEnumerable<string> Stream(IEnumerable<int> tokens, bool special = false, bool firstInText = true)
        {
            Check.NotNull(tokens, "tokens");
            using (var d = new Detokenizer(this, special, firstInText))
            {
                foreach (var t in tokens)
                {
                    var s = d.Push(t);
                    if (s.Length > 0) yield return s;
                }
                var rest = d.Flush();
                if (rest.Length > 0) yield return rest;
            }
        }
    }

    /// <summary>clade_detokenizer: push tokens, get the complete UTF-8 text so far. Keeps the
    /// model alive. One thread at a time.</summary>
    public sealed class Detokenizer : IDisposable
    {
        readonly DetokenizerHandle h;

        public Detokenizer(Model model, bool special = false, bool firstInText = true)
        {
            Check.NotNull(model, "model");
            CladeException.Check(Native.clade_detokenizer_create(model.Handle, special ? 1 : 0,
                firstInText ? 1 : 0, out h));
        }

        public DetokenizerHandle Handle { get { return Check.Live(h, "Detokenizer"); } }
        public void Dispose() { h.Dispose(); }

        /// <summary>The bytes token completes (clade_detokenizer_push).</summary>
        public byte[] PushBytes(int token)
        {
            IntPtr p; UIntPtr n;
            CladeException.Check(Native.clade_detokenizer_push(Handle, token, out p, out n));
            return Utf8.BytesFromC(p, (long)n);
        }

        /// <summary>What is left (clade_detokenizer_flush).</summary>
        public byte[] FlushBytes()
        {
            IntPtr p; UIntPtr n;
            CladeException.Check(Native.clade_detokenizer_flush(Handle, out p, out n));
            return Utf8.BytesFromC(p, (long)n);
        }

        public string Push(int token) { return System.Text.Encoding.UTF8.GetString(PushBytes(token)); }
        public string Flush() { return System.Text.Encoding.UTF8.GetString(FlushBytes()); }
    }
}
