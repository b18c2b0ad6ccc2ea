// Package clade binds the clade C library (include/clade/clade.h): inference
// of Llama-family models for many sequences that share prefixes.
//
// The library is found through pkg-config (cgo_pkgconfig.go: an installed
// clade.pc), or with the build tag clade_checkout through the checkout's
// build/ folder (cgo_checkout.go); to use another build, put its folder
// first with CGO_LDFLAGS="-L/dir -Wl,-rpath,/dir".
//
// Handles (Model, Tree, Cache, Sampler, Detokenizer) own C objects: Close()
// frees them, and a finalizer does so for handles left unreachable. The C
// library defers freeing (sqlite's close_v2): a Tree keeps its model's memory
// alive, a Cache its tree's, until they are closed in turn, so handles may be
// closed in any order (finalizers' included) and closing a Model or a Tree
// leaves the trees and caches made from it working; only the closed handle
// itself refuses further use.
// A Tree and its Caches share one mutex, so they may be used from several
// goroutines (the calls are serialised, as the C API requires).
// Failures are returned as *Error values carrying the status and message;
// the recoverable states (StatusCacheFull, StatusStopped, StatusKVBudget,
// StatusContextFull) mean nothing changed.
//
// Generation in one call: Tree.Generate (clade_generate), with streaming
// through a callback (Tree.GenerateFunc) or a channel (Tree.GenerateStream):
//
//	params := clade.DefaultGenerateParams()
//	params.MaxNewTokens, params.Samples = 32, 4
//	st := tree.GenerateStream([]clade.Prompt{clade.RootPrompt(ids)}, &params)
//	for p := range st.Pieces {
//		fmt.Printf("[%d]%s", p.Seq, p.Text)
//	}
//	results, err := st.Wait()
//
// Speculative decoding (clade 1.1): GenerateParams.Speculative picks a
// drafter (prompt lookup, a draft model or a Go func) and the same calls run
// clade_generate_speculative; greedy output is that of plain decoding, token
// for token. GenerateWithStats returns the call's counters too:
//
//	params.Sampler.Temperature = 0
//	params.Speculative = &clade.SpeculativeParams{Lookup: 3, MaxDraft: 8, Adaptive: true}
//	results, stats, err := tree.GenerateWithStats(prompts, &params, nil)
//
// Token trees (clade 1.2): SpeculativeParams.TreeWidth above 1 drafts a tree
// of alternatives instead of a chain, verified in one step (a Go drafter
// gives parents: SpeculativeParams.DraftTree); Cache.DecodeTree and
// Cache.Keep are the step itself.
//
// Callbacks (Tree.SetAbort, SetLog, GenerateFunc's, SpeculativeParams.Draft
// and DraftTree) are Go funcs called from C. C never sees a Go pointer: it
// gets a runtime/cgo.Handle (abort, generate, draft) or nothing at all (log,
// kept in a package variable), and fixed C trampolines call the exported Go
// functions in callbacks.go.
package clade

/*
#include <stdlib.h>
#include <clade/clade.h>

// Exported from callbacks.go.
extern int32_t cladeGoAbort(uintptr_t handle);
extern void cladeGoLog(int level, char *message);
extern int32_t cladeGoGenerate(uintptr_t handle, size_t seq, int32_t token, char *text, size_t len);
extern int32_t cladeGoDraft(uintptr_t handle, clade_draft_request *requests, size_t n_requests);

static int32_t clade_go_abort_trampoline(void *user) { return cladeGoAbort((uintptr_t)user); }

// handle 0: remove the callback.
static clade_status clade_go_set_abort(clade_tree *tree, uintptr_t handle) {
	return clade_tree_set_abort(tree, handle ? clade_go_abort_trampoline : NULL, (void *)handle);
}

static void clade_go_log_trampoline(clade_log_level level, const char *message, void *user) {
	(void)user;
	cladeGoLog((int)level, (char *)message);
}

static int32_t clade_go_generate_trampoline(void *user, size_t seq, clade_token token,
                                            const char *text, size_t len) {
	return cladeGoGenerate((uintptr_t)user, seq, token, (char *)text, len);
}

// handle 0: no streaming.
static void clade_go_set_generate_callback(clade_generate_params *p, uintptr_t handle) {
	p->callback = handle ? clade_go_generate_trampoline : NULL;
	p->user = (void *)handle;
}

static int32_t clade_go_draft_trampoline(void *user, clade_draft_request *requests, size_t n_requests) {
	return cladeGoDraft((uintptr_t)user, requests, n_requests);
}

// handle 0: no drafter of the caller's.
static void clade_go_set_draft(clade_speculative_params *p, uintptr_t handle) {
	p->draft = handle ? clade_go_draft_trampoline : NULL;
	p->user = (void *)handle;
}

static void clade_go_set_log(int on, int min_level) {
	clade_set_log(on ? clade_go_log_trampoline : NULL, NULL, (clade_log_level)min_level);
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"runtime/cgo"
	"strings"
	"sync"
	"unsafe"
)

// Token, NodeID and SeqID mirror clade_token, clade_node_id, clade_seq_id.
type (
	Token  = int32
	NodeID = int32
	SeqID  = int32
)

// Root is the root node of every tree.
const Root NodeID = 0

// Status codes (clade_status); their numbers are fixed by the C ABI.
const (
	StatusOK          = int(C.CLADE_OK)
	StatusCacheFull   = int(C.CLADE_CACHE_FULL)
	StatusStopped     = int(C.CLADE_STOPPED)
	StatusBufferSmall = int(C.CLADE_BUFFER_SMALL)
	StatusKVBudget    = int(C.CLADE_KV_BUDGET)
	StatusContextFull = int(C.CLADE_CONTEXT_FULL)
	StatusInvalidArg  = int(C.CLADE_E_INVALID_ARG)
	StatusNoMem       = int(C.CLADE_E_NOMEM)
	StatusIO          = int(C.CLADE_E_IO)
	StatusFormat      = int(C.CLADE_E_FORMAT)
	StatusUnsupported = int(C.CLADE_E_UNSUPPORTED)
	StatusToken       = int(C.CLADE_E_TOKEN)
	StatusState       = int(C.CLADE_E_STATE)
	StatusBackend     = int(C.CLADE_E_BACKEND)
	StatusUTF8        = int(C.CLADE_E_UTF8)
	StatusMismatch    = int(C.CLADE_E_MISMATCH) // a saved session of another model, backend or KV type
	StatusInternal    = int(C.CLADE_E_INTERNAL)
)

// KV element types (clade_kv_type).
const (
	KVF32  = int(C.CLADE_KV_F32)
	KVF16  = int(C.CLADE_KV_F16)
	KVBF16 = int(C.CLADE_KV_BF16)
)

// Attention modes (clade_attention).
const (
	AttentionAuto   = int(C.CLADE_ATTENTION_AUTO)
	AttentionShared = int(C.CLADE_ATTENTION_SHARED)
	AttentionFlat   = int(C.CLADE_ATTENTION_FLAT)
	AttentionNone   = int(C.CLADE_ATTENTION_NONE)
)

// Backends (clade_backend).
const (
	BackendCPU  = int(C.CLADE_BACKEND_CPU)
	BackendCUDA = int(C.CLADE_BACKEND_CUDA)
)

// Log levels (clade_log_level).
const (
	LogDebug = int(C.CLADE_LOG_DEBUG)
	LogInfo  = int(C.CLADE_LOG_INFO)
	LogWarn  = int(C.CLADE_LOG_WARN)
	LogError = int(C.CLADE_LOG_ERROR)
)

// TreeAllowLongContext is the TreeParams.Flags bit that accepts positions at
// or past the model's n_ctx (without it: StatusContextFull).
const TreeAllowLongContext = uint32(C.CLADE_TREE_ALLOW_LONG_CONTEXT)

// TreePrefixCache is the TreeParams.Flags bit that keeps released nodes
// cached for AppendPrefix, evicted least recently used when the KV budget
// needs room (clade 1.3).
const TreePrefixCache = uint32(C.CLADE_TREE_PREFIX_CACHE)

// The version of the header this package was built with; the library's
// soname is libclade.so.ABIMajor.
const (
	HeaderVersionMajor  = int(C.CLADE_VERSION_MAJOR)
	HeaderVersionMinor  = int(C.CLADE_VERSION_MINOR)
	HeaderVersionPatch  = int(C.CLADE_VERSION_PATCH)
	HeaderVersionNumber = int(C.CLADE_VERSION_NUMBER)
	ABIMajor            = int(C.CLADE_ABI_MAJOR)
)

// Version is the run-time library version, e.g. "1.0.0".
func Version() string { return C.GoString(C.clade_version_string()) }

// VersionNumber is CLADE_VERSION_NUMBER of the linked library.
func VersionNumber() int { return int(C.clade_version_number()) }

// StatusString is the static English name of a status.
func StatusString(status int) string {
	return C.GoString(C.clade_status_string(C.clade_status(status)))
}

// Error is a failed call: its clade_status and the clade_last_error message.
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("clade: %s (%d): %s", StatusString(e.Status), e.Status, e.Msg)
}

// call runs f on one locked OS thread, so that clade_last_error (per thread)
// describes f's failure. BUFFER_SMALL passes through as a status when
// allowSmall is set.
func call(allowSmall bool, f func() C.clade_status) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	st := int(f())
	if st == StatusOK || (allowSmall && st == StatusBufferSmall) {
		return st, nil
	}
	msg := C.GoString(C.clade_last_error())
	if msg == "" {
		msg = StatusString(st)
	}
	return st, &Error{Status: st, Msg: msg}
}

func check(f func() C.clade_status) error {
	_, err := call(false, f)
	return err
}

func closedErr(what string) error {
	return &Error{Status: StatusState, Msg: what + " is closed"}
}

func tokPtr(t []Token) *C.clade_token {
	if len(t) == 0 {
		return nil
	}
	return (*C.clade_token)(unsafe.Pointer(&t[0]))
}

// ---- model -------------------------------------------------------------------

// ModelParams are the loading options (clade_model_params).
type ModelParams struct {
	Backend   int
	NThreads  int // 0: all cores
	VocabOnly bool
	NoMmap    bool
}

// ModelInfo is clade_model_info.
type ModelInfo struct {
	Architecture  string
	Name          string
	NLayers       int
	NEmbd         int
	NHeads        int
	NKVHeads      int
	HeadDim       int
	NFF           int
	NVocab        int
	NCtx          int
	RopeFreqBase  float32
	RopeFreqScale float32
	RopeScaling   int
	NormEps       float32
	WeightType    int
	HasQKVBias    bool
	TiedOutput    bool
	VocabOnly     bool
	NParams       uint64
	WeightBytes   uint64
}

// SpecialTokens: -1 where the model has none.
type SpecialTokens struct {
	BOS, EOS, EOT, PAD, UNK Token
	AddBOS, AddEOS          bool
}

// Model is a loaded model; safe to use from many goroutines at once.
type Model struct {
	p      *C.clade_model
	nVocab int
	mu     sync.Mutex
}

// LoadModel loads a GGUF file; params may be nil for the defaults.
func LoadModel(path string, params *ModelParams) (*Model, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var p C.clade_model_params
	C.clade_model_params_init(&p)
	if params != nil {
		p.backend = C.clade_backend(params.Backend)
		p.n_threads = C.int32_t(params.NThreads)
		if params.VocabOnly {
			p.vocab_only = 1
		}
		if params.NoMmap {
			p.use_mmap = 0
		}
	}
	var out *C.clade_model
	if err := check(func() C.clade_status { return C.clade_model_load(cpath, &p, &out) }); err != nil {
		return nil, err
	}
	m := &Model{p: out}
	runtime.SetFinalizer(m, (*Model).Close)
	info, err := m.Info()
	if err != nil {
		m.Close()
		return nil, err
	}
	m.nVocab = info.NVocab
	return m, nil
}

// Close gives up the model handle. Its memory goes once the trees and
// detokenizers made from it are closed too (they keep working until then).
// Closing twice is a no-op.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p == nil {
		return nil
	}
	C.clade_model_free(m.p)
	m.p = nil
	runtime.SetFinalizer(m, nil)
	return nil
}

func (m *Model) ptr() (*C.clade_model, error) {
	if m == nil || m.p == nil {
		return nil, closedErr("model")
	}
	return m.p, nil
}

// NVocab is the vocabulary size.
func (m *Model) NVocab() int { return m.nVocab }

// Info describes the model.
func (m *Model) Info() (ModelInfo, error) {
	p, err := m.ptr()
	if err != nil {
		return ModelInfo{}, err
	}
	var i C.clade_model_info
	i.size = C.size_t(unsafe.Sizeof(i))
	if err := check(func() C.clade_status { return C.clade_model_describe(p, &i) }); err != nil {
		return ModelInfo{}, err
	}
	runtime.KeepAlive(m)
	return ModelInfo{
		Architecture:  C.GoString(&i.architecture[0]),
		Name:          C.GoString(&i.name[0]),
		NLayers:       int(i.n_layers),
		NEmbd:         int(i.n_embd),
		NHeads:        int(i.n_heads),
		NKVHeads:      int(i.n_kv_heads),
		HeadDim:       int(i.head_dim),
		NFF:           int(i.n_ff),
		NVocab:        int(i.n_vocab),
		NCtx:          int(i.n_ctx),
		RopeFreqBase:  float32(i.rope_freq_base),
		RopeFreqScale: float32(i.rope_freq_scale),
		RopeScaling:   int(i.rope_scaling),
		NormEps:       float32(i.norm_eps),
		WeightType:    int(i.weight_type),
		HasQKVBias:    i.has_qkv_bias != 0,
		TiedOutput:    i.tied_output != 0,
		VocabOnly:     i.vocab_only != 0,
		NParams:       uint64(i.n_params),
		WeightBytes:   uint64(i.weight_bytes),
	}, nil
}

// SpecialTokens gives the BOS/EOS/... tokens.
func (m *Model) SpecialTokens() (SpecialTokens, error) {
	p, err := m.ptr()
	if err != nil {
		return SpecialTokens{}, err
	}
	var s C.clade_special_tokens
	s.size = C.size_t(unsafe.Sizeof(s))
	if err := check(func() C.clade_status { return C.clade_model_special_tokens(p, &s) }); err != nil {
		return SpecialTokens{}, err
	}
	runtime.KeepAlive(m)
	return SpecialTokens{BOS: Token(s.bos), EOS: Token(s.eos), EOT: Token(s.eot), PAD: Token(s.pad),
		UNK: Token(s.unk), AddBOS: s.add_bos != 0, AddEOS: s.add_eos != 0}, nil
}

// IsEOG reports whether a token ends a generation.
func (m *Model) IsEOG(t Token) bool {
	p, err := m.ptr()
	if err != nil {
		return false
	}
	r := C.clade_token_is_eog(p, C.clade_token(t)) != 0
	runtime.KeepAlive(m)
	return r
}

// Tokenize encodes text (which must be valid UTF-8).
func (m *Model) Tokenize(text string, addSpecial, parseSpecial bool) ([]Token, error) {
	p, err := m.ptr()
	if err != nil {
		return nil, err
	}
	var flags C.uint32_t
	if addSpecial {
		flags |= C.CLADE_TOKENIZE_ADD_SPECIAL
	}
	if parseSpecial {
		flags |= C.CLADE_TOKENIZE_PARSE_SPECIAL
	}
	ctext := C.CString(text)
	defer C.free(unsafe.Pointer(ctext))
	buf := make([]Token, len(text)+8)
	for {
		var n C.size_t
		st, err := call(true, func() C.clade_status {
			return C.clade_tokenize(p, ctext, C.size_t(len(text)), flags, tokPtr(buf), C.size_t(len(buf)), &n)
		})
		if err != nil {
			return nil, err
		}
		if st == StatusOK {
			runtime.KeepAlive(m)
			return buf[:n], nil
		}
		buf = make([]Token, int(n))
	}
}

// DetokenizeBytes decodes tokens into bytes.
func (m *Model) DetokenizeBytes(tokens []Token, special bool) ([]byte, error) {
	p, err := m.ptr()
	if err != nil {
		return nil, err
	}
	var sp C.int32_t
	if special {
		sp = 1
	}
	buf := make([]byte, 16*len(tokens)+16)
	for {
		var n C.size_t
		st, err := call(true, func() C.clade_status {
			return C.clade_detokenize(p, tokPtr(tokens), C.size_t(len(tokens)), sp,
				(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n)
		})
		if err != nil {
			return nil, err
		}
		if st == StatusOK {
			runtime.KeepAlive(m)
			return buf[:n], nil
		}
		buf = make([]byte, int(n)+1)
	}
}

// Detokenize decodes tokens into text.
func (m *Model) Detokenize(tokens []Token, special bool) (string, error) {
	b, err := m.DetokenizeBytes(tokens, special)
	return string(b), err
}

// ChatMessage is one message of a conversation for Model.ChatApply: Role
// ("system", "user", "assistant", ...) and Content.
type ChatMessage struct {
	Role    string
	Content string
}

// ChatTemplates lists the names of the chat templates clade formats
// (clade_chat_template_list).
func ChatTemplates() []string {
	n := int(C.clade_chat_template_list(nil, 0))
	if n == 0 {
		return nil
	}
	arr := (*[1 << 16]*C.char)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	defer C.free(unsafe.Pointer(arr))
	C.clade_chat_template_list(&arr[0], C.size_t(n))
	names := make([]string, n)
	for i := range names {
		names[i] = C.GoString(arr[i])
	}
	return names
}

// ChatApply formats a conversation with a chat template
// (clade_chat_apply): template is a name of ChatTemplates(), or "" for the
// model's own (StatusUnsupported when it has none or it is not
// recognized). The text has no leading BOS: tokenize it with addSpecial
// and parseSpecial set.
func (m *Model) ChatApply(messages []ChatMessage, template string, addAssistantPrompt bool) (string, error) {
	p, err := m.ptr()
	if err != nil {
		return "", err
	}
	n := len(messages)
	size := 256
	for i, msg := range messages {
		if strings.IndexByte(msg.Role, 0) >= 0 || strings.IndexByte(msg.Content, 0) >= 0 {
			return "", &Error{Status: StatusInvalidArg, Msg: fmt.Sprintf("messages[%d] contains a NUL byte", i)}
		}
		size += len(msg.Role) + len(msg.Content)
	}
	if strings.IndexByte(template, 0) >= 0 {
		return "", &Error{Status: StatusInvalidArg, Msg: "template contains a NUL byte"}
	}
	// The array and its strings live in C memory (no Go pointer reaches C).
	var msgs *[1 << 24]C.clade_chat_message
	if n > 0 {
		msgs = (*[1 << 24]C.clade_chat_message)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(C.clade_chat_message{}))))
		defer C.free(unsafe.Pointer(msgs))
		for i, msg := range messages {
			msgs[i].role = C.CString(msg.Role)
			msgs[i].content = C.CString(msg.Content)
			defer C.free(unsafe.Pointer(msgs[i].role))
			defer C.free(unsafe.Pointer(msgs[i].content))
		}
	}
	var first *C.clade_chat_message
	if n > 0 {
		first = &msgs[0]
	}
	var name *C.char
	if template != "" {
		name = C.CString(template)
		defer C.free(unsafe.Pointer(name))
	}
	var add C.int32_t
	if addAssistantPrompt {
		add = 1
	}
	buf := make([]byte, size)
	for {
		var got C.size_t
		st, err := call(true, func() C.clade_status {
			return C.clade_chat_apply(p, name, first, C.size_t(n), add,
				(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &got)
		})
		if err != nil {
			return "", err
		}
		if st == StatusOK {
			runtime.KeepAlive(m)
			return string(buf[:got]), nil
		}
		buf = make([]byte, int(got)+1)
	}
}

// ChatTemplateName gives the family recognized from the model's chat
// template (a name of ChatTemplates()); StatusUnsupported when none is.
func (m *Model) ChatTemplateName() (string, error) {
	p, err := m.ptr()
	if err != nil {
		return "", err
	}
	var name *C.char
	if err := check(func() C.clade_status { return C.clade_chat_template_name(p, &name) }); err != nil {
		return "", err
	}
	runtime.KeepAlive(m)
	return C.GoString(name), nil
}

// TokenToPiece gives the bytes of one token.
func (m *Model) TokenToPiece(t Token, special bool) ([]byte, error) {
	p, err := m.ptr()
	if err != nil {
		return nil, err
	}
	var sp C.int32_t
	if special {
		sp = 1
	}
	buf := make([]byte, 64)
	for {
		var n C.size_t
		st, err := call(true, func() C.clade_status {
			return C.clade_token_to_piece(p, C.clade_token(t), sp, (*C.char)(unsafe.Pointer(&buf[0])),
				C.size_t(len(buf)), &n)
		})
		if err != nil {
			return nil, err
		}
		if st == StatusOK {
			runtime.KeepAlive(m)
			return buf[:n], nil
		}
		buf = make([]byte, int(n)+1)
	}
}

// ---- streaming detokenizer -----------------------------------------------------

// Detokenizer turns a stream of tokens into complete UTF-8 pieces. It keeps
// the model's memory alive: the Model may be closed first.
type Detokenizer struct {
	p  *C.clade_detokenizer
	mu sync.Mutex
}

// NewDetokenizer makes a streaming detokenizer (see clade_detokenizer_create).
func (m *Model) NewDetokenizer(special, firstInText bool) (*Detokenizer, error) {
	p, err := m.ptr()
	if err != nil {
		return nil, err
	}
	var sp, fi C.int32_t
	if special {
		sp = 1
	}
	if firstInText {
		fi = 1
	}
	var out *C.clade_detokenizer
	if err := check(func() C.clade_status { return C.clade_detokenizer_create(p, sp, fi, &out) }); err != nil {
		return nil, err
	}
	d := &Detokenizer{p: out}
	runtime.SetFinalizer(d, (*Detokenizer).Close)
	return d, nil
}

func (d *Detokenizer) run(f func(text **C.char, n *C.size_t) C.clade_status) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.p == nil {
		return nil, closedErr("detokenizer")
	}
	var text *C.char
	var n C.size_t
	if err := check(func() C.clade_status { return f(&text, &n) }); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	return C.GoBytes(unsafe.Pointer(text), C.int(n)), nil
}

// Push feeds one token and returns the bytes now complete.
func (d *Detokenizer) Push(t Token) ([]byte, error) {
	return d.run(func(text **C.char, n *C.size_t) C.clade_status {
		return C.clade_detokenizer_push(d.p, C.clade_token(t), text, n)
	})
}

// Flush returns whatever is left.
func (d *Detokenizer) Flush() ([]byte, error) {
	return d.run(func(text **C.char, n *C.size_t) C.clade_status {
		return C.clade_detokenizer_flush(d.p, text, n)
	})
}

// Close frees the detokenizer. Closing twice is a no-op.
func (d *Detokenizer) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.p != nil {
		C.clade_detokenizer_free(d.p)
		d.p = nil
		runtime.SetFinalizer(d, nil)
	}
	return nil
}

// ---- tree ----------------------------------------------------------------------

// TreeParams are clade_tree_params.
type TreeParams struct {
	KVType       int    // KVF32, KVF16 (the default), KVBF16
	PrefillChunk int    // 0: the library's default
	Flags        uint32 // TreeAllowLongContext
	KVBudget     uint64 // bytes of KV the tree and its caches may hold; 0: no limit
}

// DefaultTreeParams are the library's defaults.
func DefaultTreeParams() TreeParams {
	var p C.clade_tree_params
	C.clade_tree_params_init(&p)
	return TreeParams{KVType: int(p.kv_type), PrefillChunk: int(p.prefill_chunk), Flags: uint32(p.flags),
		KVBudget: uint64(p.kv_budget)}
}

// NodeInfo is clade_node_info (Parent is -1 for the root).
type NodeInfo struct {
	Parent     NodeID
	Length     int
	PathLength int
	NChildren  int
	NRefs      int
}

// abortState is what the abort callback's cgo.Handle refers to. It is only
// touched by the goroutine holding the tree's mutex (C calls back on the
// goroutine that made the call).
type abortState struct {
	f        func() bool
	panicked bool
	value    interface{} // the recovered panic, re-raised after the C call
}

// Tree is the shared-cache tree of a model. Node 0 (Root) is the root. It
// keeps the model's memory alive: the Model may be closed first.
type Tree struct {
	p      *C.clade_tree
	nVocab int
	open   int // caches not yet closed (under mu)
	// The installed abort callback. C holds abortH as its user pointer; it is
	// deleted when replaced, or once the tree and all its caches are closed
	// (C keeps the tree, and caches keep calling the callback, until then).
	abort  *abortState
	abortH cgo.Handle
	mu     sync.Mutex
}

// NewTree creates an empty tree; params may be nil for the defaults.
func (m *Model) NewTree(params *TreeParams) (*Tree, error) {
	mp, err := m.ptr()
	if err != nil {
		return nil, err
	}
	var p C.clade_tree_params
	C.clade_tree_params_init(&p)
	if params != nil {
		p.kv_type = C.clade_kv_type(params.KVType)
		p.prefill_chunk = C.int32_t(params.PrefillChunk)
		p.flags = C.uint32_t(params.Flags)
		p.kv_budget = C.uint64_t(params.KVBudget)
	}
	var out *C.clade_tree
	if err := check(func() C.clade_status { return C.clade_tree_create(mp, &p, &out) }); err != nil {
		return nil, err
	}
	runtime.KeepAlive(m)
	t := &Tree{p: out, nVocab: m.nVocab}
	runtime.SetFinalizer(t, (*Tree).Close)
	return t, nil
}

// Close gives up the tree handle. Its nodes go once the caches made from it
// are closed too (they keep working, abort callback included, until then).
// Closing twice is a no-op.
func (t *Tree) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.p == nil {
		return nil
	}
	C.clade_tree_free(t.p)
	t.p = nil
	t.dropAbortIfDone()
	runtime.SetFinalizer(t, nil)
	return nil
}

// dropAbortIfDone deletes the abort handle once no C object can call it.
// Called with mu held.
func (t *Tree) dropAbortIfDone() {
	if t.p == nil && t.open == 0 && t.abortH != 0 {
		t.abortH.Delete()
		t.abortH, t.abort = 0, nil
	}
}

// locked runs f with the tree's mutex held and its handle checked.
func (t *Tree) locked(f func(p *C.clade_tree) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.p == nil {
		return closedErr("tree")
	}
	return f(t.p)
}

// abortable runs f, a call that may invoke the abort callback, with the
// mutex held (f checks its own handle); a panic of the callback is raised
// again here, after the C call and with the mutex released.
func (t *Tree) abortable(f func() error) error {
	t.mu.Lock()
	err := f()
	var value interface{}
	panicked := false
	if a := t.abort; a != nil && a.panicked {
		panicked, value = true, a.value
		a.panicked, a.value = false, nil
	}
	t.mu.Unlock()
	if panicked {
		panic(value)
	}
	return err
}

// Append adds a node of tokens under parent, evaluated now, and returns its
// id. The caller holds a reference: Release it. With wantLogits, the logits
// of the node's last token come back too. StatusStopped: the abort callback
// stopped it; StatusKVBudget: past the budget (nothing changed either way).
func (t *Tree) Append(parent NodeID, tokens []Token, wantLogits bool) (NodeID, []float32, error) {
	var logits []float32
	var lp *C.float
	if wantLogits {
		logits = make([]float32, t.nVocab)
		lp = (*C.float)(unsafe.Pointer(&logits[0]))
	}
	var out C.clade_node_id
	err := t.abortable(func() error {
		if t.p == nil {
			return closedErr("tree")
		}
		return check(func() C.clade_status {
			return C.clade_tree_append(t.p, C.clade_node_id(parent), tokPtr(tokens), C.size_t(len(tokens)), lp, &out)
		})
	})
	if err != nil {
		return 0, nil, err
	}
	return NodeID(out), logits, nil
}

// AppendPrefix evaluates a whole prompt reusing the deepest path of the tree
// that equals its beginning (a node it leaves halfway is split); only the
// rest is evaluated, as a new node the caller holds. It returns the node,
// the tokens reused and the logits of the last token (clade 1.3).
func (t *Tree) AppendPrefix(tokens []Token) (NodeID, int, []float32, error) {
	logits := make([]float32, t.nVocab)
	lp := (*C.float)(unsafe.Pointer(&logits[0]))
	var out C.clade_node_id
	var reused C.size_t
	err := t.abortable(func() error {
		if t.p == nil {
			return closedErr("tree")
		}
		return check(func() C.clade_status {
			return C.clade_tree_append_prefix(t.p, tokPtr(tokens), C.size_t(len(tokens)), lp, &out, &reused)
		})
	})
	if err != nil {
		return 0, 0, nil, err
	}
	return NodeID(out), int(reused), logits, nil
}

// Trim evicts cached nodes, least recently used first, until the tree and
// its caches hold at most bytes of KV; it returns the bytes freed.
func (t *Tree) Trim(bytes uint64) (uint64, error) {
	var freed C.uint64_t
	err := t.locked(func(p *C.clade_tree) error {
		return check(func() C.clade_status { return C.clade_tree_trim(p, C.uint64_t(bytes), &freed) })
	})
	return uint64(freed), err
}

// Save writes the path root .. node (tokens and KV) to a file (a temporary
// file, then renamed).
func (t *Tree) Save(node NodeID, path string) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	return t.locked(func(p *C.clade_tree) error {
		return check(func() C.clade_status { return C.clade_tree_save(p, C.clade_node_id(node), cpath) })
	})
}

// Load puts a saved path back, matched against what the tree holds,
// evaluating nothing. It returns the node (the caller's), the file's tokens
// and the tokens the tree held already; StatusMismatch for a file of
// another model, backend or KV type.
func (t *Tree) Load(path string) (NodeID, int, int, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var out C.clade_node_id
	var n, reused C.size_t
	err := t.locked(func(p *C.clade_tree) error {
		return check(func() C.clade_status { return C.clade_tree_load(p, cpath, &out, &n, &reused) })
	})
	return NodeID(out), int(n), int(reused), err
}

// Release drops the caller's reference to a node.
func (t *Tree) Release(node NodeID) error {
	return t.locked(func(p *C.clade_tree) error {
		return check(func() C.clade_status { return C.clade_tree_release(p, C.clade_node_id(node)) })
	})
}

// NodeInfo describes a node.
func (t *Tree) NodeInfo(node NodeID) (NodeInfo, error) {
	var i C.clade_node_info
	i.size = C.size_t(unsafe.Sizeof(i))
	err := t.locked(func(p *C.clade_tree) error {
		return check(func() C.clade_status { return C.clade_tree_node_info(p, C.clade_node_id(node), &i) })
	})
	if err != nil {
		return NodeInfo{}, err
	}
	return NodeInfo{Parent: NodeID(i.parent), Length: int(i.length), PathLength: int(i.path_length),
		NChildren: int(i.n_children), NRefs: int(i.n_refs)}, nil
}

// NodeTokens copies a node's tokens.
func (t *Tree) NodeTokens(node NodeID) ([]Token, error) {
	var buf []Token
	for {
		var n C.size_t
		var st int
		err := t.locked(func(p *C.clade_tree) error {
			var err error
			st, err = call(true, func() C.clade_status {
				return C.clade_tree_node_tokens(p, C.clade_node_id(node), tokPtr(buf), C.size_t(len(buf)), &n)
			})
			return err
		})
		if err != nil {
			return nil, err
		}
		if st == StatusOK {
			return buf[:n], nil
		}
		buf = make([]Token, int(n))
	}
}

// Children lists the live children of a node, oldest first.
func (t *Tree) Children(node NodeID) ([]NodeID, error) {
	buf := make([]NodeID, 8)
	for {
		var n C.size_t
		var st int
		err := t.locked(func(p *C.clade_tree) error {
			var err error
			st, err = call(true, func() C.clade_status {
				return C.clade_tree_children(p, C.clade_node_id(node), (*C.clade_node_id)(unsafe.Pointer(&buf[0])),
					C.size_t(len(buf)), &n)
			})
			return err
		})
		if err != nil {
			return nil, err
		}
		if st == StatusOK {
			return buf[:n], nil
		}
		buf = make([]NodeID, max1(int(n)))
	}
}

// KVBytes is the KV memory held by the tree's live nodes.
func (t *Tree) KVBytes() int {
	var n C.size_t
	_ = t.locked(func(p *C.clade_tree) error { n = C.clade_tree_kv_bytes(p); return nil })
	return int(n)
}

// SetKVBudget sets the bytes of KV the tree's nodes and all its caches may
// hold together (KVUsed); 0: no limit. A call that would grow past it fails
// with StatusKVBudget and changes nothing. Lowering it frees nothing.
func (t *Tree) SetKVBudget(bytes uint64) error {
	return t.locked(func(p *C.clade_tree) error {
		return check(func() C.clade_status { return C.clade_tree_set_kv_budget(p, C.uint64_t(bytes)) })
	})
}

// KVUsed is the KV memory held by the tree's nodes and all its caches
// (allocated capacity: what the budget counts).
func (t *Tree) KVUsed() uint64 {
	var n C.uint64_t
	_ = t.locked(func(p *C.clade_tree) error { n = C.clade_tree_kv_used(p); return nil })
	return uint64(n)
}

// SetAbort installs f as the abort callback of the tree and its caches (nil
// removes it). It is called between layers of Append and Cache.Decode, on
// their goroutine; returning true stops the call, which fails with
// StatusStopped and changes nothing. A panic in f stops the call too and is
// raised again by it. f must not use this tree or its caches (their mutex
// is held). The callback keeps whatever f refers to reachable until it is
// replaced or the tree and its caches are all closed.
func (t *Tree) SetAbort(f func() bool) error {
	return t.locked(func(p *C.clade_tree) error {
		var st *abortState
		var h cgo.Handle
		if f != nil {
			st = &abortState{f: f}
			h = cgo.NewHandle(st)
		}
		err := check(func() C.clade_status { return C.clade_go_set_abort(p, C.uintptr_t(h)) })
		if err != nil {
			if h != 0 {
				h.Delete()
			}
			return err
		}
		if t.abortH != 0 {
			t.abortH.Delete() // C no longer holds it
		}
		t.abort, t.abortH = st, h
		return nil
	})
}

// ---- batch append ----------------------------------------------------------------

// ItemNode is the parent that is the node made by the earlier item i (>= 0)
// of the same AppendBatch call: CLADE_ITEM_NODE(i).
func ItemNode(i int) NodeID { return NodeID(-2 - int32(i)) }

// AppendItem is one item of Tree.AppendBatch: a new tree node (Cache nil), or
// a new sequence of Cache under Parent with Tokens as its first own tokens,
// evaluated by the call. Parent is an existing node or ItemNode(i) for an
// earlier node item i. WantLogits: the logits of the item's last token come
// back (needs Tokens).
type AppendItem struct {
	Parent     NodeID
	Tokens     []Token
	Cache      *Cache
	WantLogits bool
}

// AppendResult is what AppendBatch gives for one item: the new node of a
// node item (Seq is -1) or the new sequence of a sequence item (Node is -1),
// and its logits (nil unless WantLogits).
type AppendResult struct {
	Node   NodeID
	Seq    SeqID
	Logits []float32
}

// AppendBatch evaluates many items at once (clade_tree_append_batch): new
// nodes, and new sequences of this tree's caches with their first tokens, in
// forward passes packed over all the items. It returns one AppendResult per
// item, in order. The caller holds a reference to each new node (Release
// it); a new sequence's tokens are evaluated, not queued. The logits and KV
// are those of appending the items one at a time, to rounding.
//
// Atomic: on any error (a bad parent, a token outside the vocabulary,
// StatusCacheFull, StatusKVBudget, StatusContextFull, StatusStopped) no node
// and no sequence was added. A cache of another tree is StatusInvalidArg
// (checked here, since only this tree's mutex is held, and again by C). A
// panic in the abort callback is raised again here.
func (t *Tree) AppendBatch(items []AppendItem) ([]AppendResult, error) {
	n := len(items)
	nv := t.nVocab
	nTok, nRows := 0, 0
	for i, it := range items {
		nTok += len(it.Tokens)
		if it.WantLogits {
			nRows++
		}
		if it.Cache != nil && it.Cache.tree != t {
			return nil, &Error{Status: StatusInvalidArg,
				Msg: fmt.Sprintf("AppendBatch item %d: the cache belongs to another tree", i)}
		}
	}
	// The items hold pointers, so they and everything they point to live in
	// C memory (cgo: no Go pointer to Go pointers); Go 1.19 has no Pinner.
	alloc := func(n int, elem uintptr) (unsafe.Pointer, int) {
		if n == 0 {
			n = 1
		}
		return C.malloc(C.size_t(uintptr(n) * elem)), n
	}
	stride := unsafe.Sizeof(C.clade_append_item{})
	pa, na := alloc(n, stride)
	pt, nt := alloc(nTok, unsafe.Sizeof(C.clade_token(0)))
	pl, nl := alloc(nRows*nv, unsafe.Sizeof(C.float(0)))
	defer C.free(pa)
	defer C.free(pt)
	defer C.free(pl)
	if pa == nil || pt == nil || pl == nil {
		return nil, &Error{Status: StatusNoMem, Msg: "AppendBatch: out of memory"}
	}
	arr := unsafe.Slice((*C.clade_append_item)(pa), na)
	toks := unsafe.Slice((*C.clade_token)(pt), nt)
	logits := unsafe.Slice((*C.float)(pl), nl)
	row := make([]int, n) // the item's logits row, or -1
	k, r := 0, 0
	for i, it := range items {
		c := &arr[i]
		C.clade_append_item_init(c)
		c.size = C.size_t(stride) // the array's stride
		c.parent = C.clade_node_id(it.Parent)
		if len(it.Tokens) > 0 {
			c.tokens = &toks[k]
			for _, tok := range it.Tokens {
				toks[k] = C.clade_token(tok)
				k++
			}
		}
		c.n_tokens = C.size_t(len(it.Tokens))
		row[i] = -1
		if it.WantLogits {
			row[i] = r
			c.logits = &logits[r*nv]
			r++
		}
	}
	err := t.abortable(func() error {
		if t.p == nil {
			return closedErr("tree")
		}
		// The caches' handles, read under the mutex they share with t.
		for i, it := range items {
			if it.Cache != nil {
				if it.Cache.p == nil {
					return &Error{Status: StatusState, Msg: fmt.Sprintf("AppendBatch item %d: cache is closed", i)}
				}
				arr[i].cache = it.Cache.p
			}
		}
		return check(func() C.clade_status { return C.clade_tree_append_batch(t.p, &arr[0], C.size_t(n)) })
	})
	if err != nil {
		return nil, err
	}
	out := make([]AppendResult, n)
	for i, it := range items {
		out[i] = AppendResult{Node: NodeID(arr[i].node), Seq: SeqID(arr[i].seq)}
		if it.Cache != nil {
			out[i].Node = -1
			it.Cache.queued[out[i].Seq] = 0 // evaluated by this call
		} else {
			out[i].Seq = -1
		}
		if row[i] >= 0 {
			l := make([]float32, nv)
			for j := range l {
				l[j] = float32(logits[row[i]*nv+j])
			}
			out[i].Logits = l
		}
	}
	return out, nil
}

// ---- cache ---------------------------------------------------------------------

// CacheParams are clade_cache_params.
type CacheParams struct {
	MaxSeqs   int
	MaxTokens int
	KVType    int // -1: the tree's
	Attention int
}

// DefaultCacheParams are the library's defaults.
func DefaultCacheParams() CacheParams {
	var p C.clade_cache_params
	C.clade_cache_params_init(&p)
	return CacheParams{MaxSeqs: int(p.max_seqs), MaxTokens: int(p.max_tokens), KVType: -1,
		Attention: int(p.attention)}
}

// Cache holds the unique caches of a tree's sequences and runs decode steps.
// It keeps the tree's nodes alive: the Tree may be closed first.
type Cache struct {
	p      *C.clade_cache
	tree   *Tree         // for its mutex and abort callback, never its handle
	queued map[SeqID]int // tokens queued by Add and Fork, evaluated by the next Decode
}

// NewCache creates a cache; params may be nil for the defaults.
func (t *Tree) NewCache(params *CacheParams) (*Cache, error) {
	var p C.clade_cache_params
	C.clade_cache_params_init(&p)
	if params != nil {
		p.max_seqs = C.int32_t(params.MaxSeqs)
		p.max_tokens = C.int32_t(params.MaxTokens)
		if params.KVType >= 0 {
			p.kv_type = C.clade_kv_type(params.KVType)
		}
		p.attention = C.clade_attention(params.Attention)
	}
	var out *C.clade_cache
	err := t.locked(func(tp *C.clade_tree) error {
		if err := check(func() C.clade_status { return C.clade_cache_create(tp, &p, &out) }); err != nil {
			return err
		}
		t.open++
		return nil
	})
	if err != nil {
		return nil, err
	}
	c := &Cache{p: out, tree: t, queued: map[SeqID]int{}}
	runtime.SetFinalizer(c, (*Cache).Close)
	return c, nil
}

// Close frees the cache and releases its sequences' nodes. Closing twice is
// a no-op.
func (c *Cache) Close() error {
	c.tree.mu.Lock()
	defer c.tree.mu.Unlock()
	if c.p != nil {
		C.clade_cache_free(c.p)
		c.p = nil
		c.tree.open--
		c.tree.dropAbortIfDone()
		runtime.SetFinalizer(c, nil)
	}
	return nil
}

func (c *Cache) locked(f func(p *C.clade_cache) error) error {
	c.tree.mu.Lock()
	defer c.tree.mu.Unlock()
	if c.p == nil {
		return closedErr("cache")
	}
	return f(c.p)
}

// Add attaches a new sequence to node, with its own first tokens (queued
// and evaluated by the next Decode). private copies the path's KV into the
// sequence (the flat baseline). No free slot: *Error with StatusCacheFull.
func (c *Cache) Add(node NodeID, tokens []Token, private bool) (SeqID, error) {
	var flags C.uint32_t
	if private {
		flags = C.CLADE_SEQ_PRIVATE
	}
	var out C.clade_seq_id
	err := c.locked(func(p *C.clade_cache) error {
		return check(func() C.clade_status {
			return C.clade_cache_add(p, C.clade_node_id(node), tokPtr(tokens), C.size_t(len(tokens)), flags, &out)
		})
	})
	if err != nil {
		return 0, err
	}
	c.queued[SeqID(out)] = len(tokens)
	return SeqID(out), nil
}

// Remove drops a sequence and releases its node.
func (c *Cache) Remove(seq SeqID) error {
	err := c.locked(func(p *C.clade_cache) error {
		return check(func() C.clade_status { return C.clade_cache_remove(p, C.clade_seq_id(seq)) })
	})
	if err == nil {
		delete(c.queued, seq)
	}
	return err
}

// Truncate cuts a sequence's unique tokens back to length.
func (c *Cache) Truncate(seq SeqID, length int) error {
	return c.locked(func(p *C.clade_cache) error {
		return check(func() C.clade_status { return C.clade_cache_truncate(p, C.clade_seq_id(seq), C.int32_t(length)) })
	})
}

// Length is the number of unique tokens evaluated so far.
func (c *Cache) Length(seq SeqID) (int, error) {
	var n C.int32_t
	err := c.locked(func(p *C.clade_cache) error {
		return check(func() C.clade_status { return C.clade_cache_seq_length(p, C.clade_seq_id(seq), &n) })
	})
	return int(n), err
}

// KVBytes is the KV memory allocated by the cache.
func (c *Cache) KVBytes() int {
	var n C.size_t
	_ = c.locked(func(p *C.clade_cache) error { n = C.clade_cache_kv_bytes(p); return nil })
	return int(n)
}

// Fork makes a new sequence under seq's node with a copy of seq's unique KV,
// tokens and queued tokens (nothing is evaluated). No free slot: *Error with
// StatusCacheFull.
func (c *Cache) Fork(seq SeqID) (SeqID, error) {
	var out C.clade_seq_id
	err := c.locked(func(p *C.clade_cache) error {
		return check(func() C.clade_status { return C.clade_cache_fork(p, C.clade_seq_id(seq), &out) })
	})
	if err != nil {
		return 0, err
	}
	c.queued[SeqID(out)] = c.queued[seq]
	return SeqID(out), nil
}

// Promote turns seq's unique tokens into a new tree node under its node
// (their KV moves, nothing is evaluated) and attaches seq to it. The caller
// holds a reference to the node: Release it on the tree.
// Save writes seq's whole evaluated history (tokens and KV) to a file, for
// Tree.Load.
func (c *Cache) Save(seq SeqID, path string) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	return c.locked(func(p *C.clade_cache) error {
		return check(func() C.clade_status { return C.clade_cache_save(p, C.clade_seq_id(seq), cpath) })
	})
}

func (c *Cache) Promote(seq SeqID) (NodeID, error) {
	var out C.clade_node_id
	err := c.locked(func(p *C.clade_cache) error {
		return check(func() C.clade_status { return C.clade_cache_promote(p, C.clade_seq_id(seq), &out) })
	})
	return NodeID(out), err
}

// Move attaches seq to node, whose path tokens must be a prefix of seq's
// history (else StatusState). Positions stay the same, so the next logits
// are as before, to rounding.
func (c *Cache) Move(seq SeqID, node NodeID) error {
	return c.locked(func(p *C.clade_cache) error {
		return check(func() C.clade_status { return C.clade_cache_move(p, C.clade_seq_id(seq), C.clade_node_id(node)) })
	})
}

// SeqNode is the node seq is attached to.
func (c *Cache) SeqNode(seq SeqID) (NodeID, error) {
	var out C.clade_node_id
	err := c.locked(func(p *C.clade_cache) error {
		return check(func() C.clade_status { return C.clade_cache_seq_node(p, C.clade_seq_id(seq), &out) })
	})
	return NodeID(out), err
}

// SeqTokens copies seq's evaluated unique tokens (not the queued ones).
func (c *Cache) SeqTokens(seq SeqID) ([]Token, error) {
	var buf []Token
	for {
		var n C.size_t
		var st int
		err := c.locked(func(p *C.clade_cache) error {
			var err error
			st, err = call(true, func() C.clade_status {
				return C.clade_cache_seq_tokens(p, C.clade_seq_id(seq), tokPtr(buf), C.size_t(len(buf)), &n)
			})
			return err
		})
		if err != nil {
			return nil, err
		}
		if st == StatusOK {
			return buf[:n], nil
		}
		buf = make([]Token, int(n))
	}
}

// Step is one sequence's part of a decode step.
type Step struct {
	Seq    SeqID
	Tokens []Token
}

// Decode runs one step. It returns the logits rows in the order of steps:
// one per sequence that evaluates any token (queued or new), or with
// allLogits one per evaluated token. *Error with StatusCacheFull (no room),
// StatusKVBudget, StatusContextFull or StatusStopped (the abort callback):
// nothing changed. A panic in the abort callback is raised again here.
func (c *Cache) Decode(steps []Step, allLogits bool) ([][]float32, error) {
	rows, _, err := c.decode(steps, nil, allLogits, false)
	return rows, err
}

// DecodeGreedy is Decode returning each row's greedy token instead of the
// row (clade_batch.argmax, clade 1.4): its highest logit, the lowest id
// among equal ones, -1 for a row with none above -inf. Found where the
// logits are: on the GPU only the tokens come back. A library older than
// 1.4 refuses it (StatusUnsupported).
func (c *Cache) DecodeGreedy(steps []Step, allLogits bool) ([]Token, error) {
	_, tokens, err := c.decode(steps, nil, allLogits, true)
	return tokens, err
}

// TreeStep is one sequence's part of a DecodeTree step: its new tokens and
// one parent per token, -1 (it follows the history and queued tokens) or
// the index of an earlier new token of the sequence.
type TreeStep struct {
	Seq     SeqID
	Tokens  []Token
	Parents []int32
}

// DecodeTree is Decode where each sequence's new tokens form a tree
// (clade_decode_tree, clade 1.2): each token sees the history and its
// ancestors only; allLogits gives one row per token. The tokens take the
// sequence's next slots in order: Keep then keeps one path. Bad parents, or
// a tree of more than 64 tokens: *Error with StatusInvalidArg, nothing
// changed.
func (c *Cache) DecodeTree(steps []TreeStep, allLogits bool) ([][]float32, error) {
	plain := make([]Step, len(steps))
	parents := []int32{}
	for i, s := range steps {
		if len(s.Parents) != len(s.Tokens) {
			return nil, &Error{Status: StatusInvalidArg, Msg: fmt.Sprintf(
				"DecodeTree: sequence %d has %d parents for %d tokens", s.Seq, len(s.Parents), len(s.Tokens))}
		}
		plain[i] = Step{Seq: s.Seq, Tokens: s.Tokens}
		parents = append(parents, s.Parents...)
	}
	rows, _, err := c.decode(plain, parents, allLogits, false)
	return rows, err
}

// Keep keeps seq's unique tokens [0, from) and those at from + keep[i]
// (keep strictly increasing), moved down in that order, and drops the rest
// (clade_cache_keep, clade 1.2). After a DecodeTree step of a sequence of
// length L, Keep(seq, L, path) with the batch indices of one root-to-node
// path leaves it as if only that path had been decoded.
func (c *Cache) Keep(seq SeqID, from int, keep []int32) error {
	var kp *C.int32_t
	if len(keep) > 0 {
		kp = (*C.int32_t)(unsafe.Pointer(&keep[0]))
	}
	return c.locked(func(p *C.clade_cache) error {
		return check(func() C.clade_status {
			return C.clade_cache_keep(p, C.clade_seq_id(seq), C.int32_t(from), kp, C.size_t(len(keep)))
		})
	})
}

// decode is clade_decode, or clade_decode_tree with parents (not nil): the
// logits rows, or with greedy the rows' argmax tokens.
func (c *Cache) decode(steps []Step, parents []int32, allLogits, greedy bool) ([][]float32, []Token, error) {
	nv := c.tree.nVocab
	nTok, rows := 0, 0
	for _, s := range steps {
		nTok += len(s.Tokens)
		m := c.queued[s.Seq] + len(s.Tokens)
		if allLogits {
			rows += m
		} else if m > 0 {
			rows++
		}
	}
	// The batch and its arrays live in C memory: cgo forbids handing C a Go
	// struct that holds Go pointers.
	size := func(n, elem int) C.size_t {
		if n == 0 {
			n = 1
		}
		return C.size_t(n * elem)
	}
	b := (*C.clade_batch)(C.malloc(C.size_t(unsafe.Sizeof(C.clade_batch{}))))
	seqs := (*[1 << 28]C.clade_seq_id)(C.malloc(size(len(steps), 4)))
	counts := (*[1 << 28]C.int32_t)(C.malloc(size(len(steps), 4)))
	toks := (*[1 << 28]C.clade_token)(C.malloc(size(nTok, 4)))
	nLogits := rows * nv
	if greedy {
		nLogits = 0
	}
	logits := (*[1 << 30]C.float)(C.malloc(size(nLogits, 4)))
	argmax := (*[1 << 28]C.clade_token)(C.malloc(size(rows, 4)))
	defer C.free(unsafe.Pointer(argmax))
	defer C.free(unsafe.Pointer(b))
	defer C.free(unsafe.Pointer(seqs))
	defer C.free(unsafe.Pointer(counts))
	defer C.free(unsafe.Pointer(toks))
	defer C.free(unsafe.Pointer(logits))
	k := 0
	for i, s := range steps {
		seqs[i] = C.clade_seq_id(s.Seq)
		counts[i] = C.int32_t(len(s.Tokens))
		for _, t := range s.Tokens {
			toks[k] = C.clade_token(t)
			k++
		}
	}
	var par *C.int32_t
	if parents != nil {
		pa := (*[1 << 28]C.int32_t)(C.malloc(size(len(parents), 4)))
		defer C.free(unsafe.Pointer(pa))
		for i, x := range parents {
			pa[i] = C.int32_t(x)
		}
		par = &pa[0]
	}
	C.clade_batch_init(b)
	b.n_seqs = C.size_t(len(steps))
	b.seq_ids = &seqs[0]
	b.n_tokens = &counts[0]
	b.tokens = &toks[0]
	if allLogits {
		b.all_logits = 1
	}
	if greedy {
		// (the whole struct of the header this was built with: an older
		// library refuses the field instead of ignoring it)
		b.size = C.size_t(unsafe.Sizeof(C.clade_batch{}))
		b.argmax = &argmax[0]
	} else {
		b.logits = &logits[0]
	}
	b.logits_rows = C.size_t(rows)
	err := c.tree.abortable(func() error {
		if c.p == nil {
			return closedErr("cache")
		}
		return check(func() C.clade_status {
			if par != nil {
				return C.clade_decode_tree(c.p, b, par)
			}
			return C.clade_decode(c.p, b)
		})
	})
	if err != nil {
		return nil, nil, err
	}
	for _, s := range steps {
		c.queued[s.Seq] = 0
	}
	if greedy {
		tokens := make([]Token, rows)
		for r := range tokens {
			tokens[r] = Token(argmax[r])
		}
		return nil, tokens, nil
	}
	out := make([][]float32, rows)
	for r := range out {
		out[r] = make([]float32, nv)
		for j := 0; j < nv; j++ {
			out[r][j] = float32(logits[r*nv+j])
		}
	}
	return out, nil, nil
}

// setLog switches C's log callback (SetLog, in callbacks.go, which may not
// call the preamble's functions itself).
func setLog(on C.int, minLevel int) { C.clade_go_set_log(on, C.int(minLevel)) }

// ---- sampler -------------------------------------------------------------------

// SamplerParams are clade_sampler_params.
type SamplerParams struct {
	Temperature   float32 // 0: greedy
	TopK          int
	TopP          float32
	MinP          float32
	RepeatPenalty float32
	Seed          uint64
	// Subtracted once (presence) and per occurrence (frequency) for each
	// token of the counted history; 0: off.
	PresencePenalty  float32
	FrequencyPenalty float32
	// Added to the logits first; copied at creation.
	LogitBias []LogitBias
	// Whether a history's first nPrompt tokens count for the penalties.
	PenalizePrompt bool
}

// LogitBias is one (token, bias) pair of SamplerParams.LogitBias.
type LogitBias struct {
	Token Token
	Bias  float32
}

// SampleResult is a drawn token, its log-probability in the distribution
// drawn from, and the most likely alternatives asked for (most likely
// first).
type SampleResult struct {
	Token   Token
	Logprob float32
	Top     []TokenLogprob
}

// TokenLogprob is one alternative of a SampleResult.
type TokenLogprob struct {
	Token   Token
	Logprob float32
}

// DefaultSamplerParams are the library's defaults.
func DefaultSamplerParams() SamplerParams {
	var p C.clade_sampler_params
	C.clade_sampler_params_init(&p)
	return SamplerParams{Temperature: float32(p.temperature), TopK: int(p.top_k), TopP: float32(p.top_p),
		MinP: float32(p.min_p), RepeatPenalty: float32(p.repeat_penalty), Seed: uint64(p.seed),
		PresencePenalty: float32(p.presence_penalty), FrequencyPenalty: float32(p.frequency_penalty),
		PenalizePrompt: p.penalize_prompt != 0}
}

// Sampler holds sampling settings and per-stream random state.
type Sampler struct {
	p  *C.clade_sampler
	mu sync.Mutex
}

// NewSampler creates a sampler; params may be nil for the defaults.
func NewSampler(params *SamplerParams) (*Sampler, error) {
	var p C.clade_sampler_params
	C.clade_sampler_params_init(&p)
	if params != nil {
		p.temperature = C.float(params.Temperature)
		p.top_k = C.int32_t(params.TopK)
		p.top_p = C.float(params.TopP)
		p.min_p = C.float(params.MinP)
		p.repeat_penalty = C.float(params.RepeatPenalty)
		p.seed = C.uint64_t(params.Seed)
		p.presence_penalty = C.float(params.PresencePenalty)
		p.frequency_penalty = C.float(params.FrequencyPenalty)
		p.penalize_prompt = 0
		if params.PenalizePrompt {
			p.penalize_prompt = 1
		}
		if n := len(params.LogitBias); n > 0 {
			// C memory: the params struct handed to C may not point into Go's
			b := (*[1 << 26]C.clade_logit_bias)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(C.clade_logit_bias{}))))
			defer C.free(unsafe.Pointer(b))
			for i, e := range params.LogitBias {
				b[i].token = C.clade_token(e.Token)
				b[i].bias = C.float(e.Bias)
			}
			p.logit_bias = &b[0]
			p.n_logit_bias = C.size_t(n)
		}
	}
	var out *C.clade_sampler
	if err := check(func() C.clade_status { return C.clade_sampler_create(&p, &out) }); err != nil {
		return nil, err
	}
	s := &Sampler{p: out}
	runtime.SetFinalizer(s, (*Sampler).Close)
	return s, nil
}

// Close frees the sampler. Closing twice is a no-op.
func (s *Sampler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		C.clade_sampler_free(s.p)
		s.p = nil
		runtime.SetFinalizer(s, nil)
	}
	return nil
}

// Sample draws a token from one row of logits for a stream; history feeds
// the repetition penalty.
func (s *Sampler) Sample(stream uint64, logits []float32, history []Token) (Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return 0, closedErr("sampler")
	}
	if len(logits) == 0 {
		return 0, &Error{Status: StatusInvalidArg, Msg: "sample: no logits"}
	}
	var out C.clade_token
	err := check(func() C.clade_status {
		return C.clade_sample(s.p, C.uint64_t(stream), (*C.float)(unsafe.Pointer(&logits[0])),
			C.int32_t(len(logits)), tokPtr(history), C.size_t(len(history)), &out)
	})
	return Token(out), err
}

// sampleResults allocates n results in C memory, each with room for top
// alternatives; free with C.free on the returned pointers.
func sampleResults(n, top int) (*[1 << 24]C.clade_sample_result, *[1 << 28]C.clade_token, *[1 << 28]C.float) {
	res := (*[1 << 24]C.clade_sample_result)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.clade_sample_result{}))))
	var tt *[1 << 28]C.clade_token
	var tl *[1 << 28]C.float
	if top > 0 {
		tt = (*[1 << 28]C.clade_token)(C.malloc(C.size_t(n*top) * 4))
		tl = (*[1 << 28]C.float)(C.malloc(C.size_t(n*top) * 4))
	}
	for i := 0; i < n; i++ {
		r := &res[i]
		r.size = C.size_t(unsafe.Sizeof(C.clade_sample_result{}))
		if top > 0 {
			r.top_tokens = &tt[i*top]
			r.top_logprobs = &tl[i*top]
			r.top_capacity = C.size_t(top)
		}
	}
	return res, tt, tl
}

func freeResults(res *[1 << 24]C.clade_sample_result, tt *[1 << 28]C.clade_token, tl *[1 << 28]C.float) {
	C.free(unsafe.Pointer(res))
	if tt != nil {
		C.free(unsafe.Pointer(tt))
		C.free(unsafe.Pointer(tl))
	}
}

func unpackResult(r *C.clade_sample_result, tt *[1 << 28]C.clade_token, tl *[1 << 28]C.float, at int) SampleResult {
	out := SampleResult{Token: Token(r.token), Logprob: float32(r.logprob)}
	for i := 0; i < int(r.n_top); i++ {
		out.Top = append(out.Top, TokenLogprob{Token(tt[at+i]), float32(tl[at+i])})
	}
	return out
}

// SampleEx samples like Sample and gives the drawn token's log-probability
// and up to top alternatives; nPrompt is how many leading history tokens
// are the prompt (for PenalizePrompt false).
func (s *Sampler) SampleEx(stream uint64, logits []float32, history []Token, nPrompt, top int) (SampleResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return SampleResult{}, closedErr("sampler")
	}
	if len(logits) == 0 {
		return SampleResult{}, &Error{Status: StatusInvalidArg, Msg: "sample: no logits"}
	}
	res, tt, tl := sampleResults(1, top)
	defer freeResults(res, tt, tl)
	err := check(func() C.clade_status {
		return C.clade_sample_ex(s.p, C.uint64_t(stream), (*C.float)(unsafe.Pointer(&logits[0])),
			C.int32_t(len(logits)), tokPtr(history), C.size_t(len(history)), C.size_t(nPrompt), &res[0])
	})
	if err != nil {
		return SampleResult{}, err
	}
	return unpackResult(&res[0], tt, tl, 0), nil
}

// SampleBatch samples len(streams) rows of nVocab logits in one call: row
// r on streams[r] with histories[r] (histories nil: none) and nPrompts[r]
// (nil: 0), each as SampleEx would.
func (s *Sampler) SampleBatch(logits []float32, nVocab int, streams []uint64, histories [][]Token, nPrompts []int,
	top int) ([]SampleResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return nil, closedErr("sampler")
	}
	rows := len(streams)
	if rows == 0 {
		return nil, nil
	}
	if nVocab <= 0 || len(logits) != rows*nVocab || (histories != nil && len(histories) != rows) ||
		(nPrompts != nil && len(nPrompts) != rows) {
		return nil, &Error{Status: StatusInvalidArg, Msg: "sample batch: rows, streams and histories disagree"}
	}
	res, tt, tl := sampleResults(rows, top)
	defer freeResults(res, tt, tl)
	// the history pointers live in C memory (C may not be handed Go
	// pointers to Go pointers), the histories themselves copied there too
	var hp *[1 << 24]*C.clade_token
	var nh, np *[1 << 24]C.size_t
	if histories != nil {
		hp = (*[1 << 24]*C.clade_token)(C.calloc(C.size_t(rows), C.size_t(unsafe.Sizeof(uintptr(0)))))
		nh = (*[1 << 24]C.size_t)(C.calloc(C.size_t(rows), C.size_t(unsafe.Sizeof(C.size_t(0)))))
		defer C.free(unsafe.Pointer(hp))
		defer C.free(unsafe.Pointer(nh))
		for r, h := range histories {
			if len(h) > 0 {
				c := (*[1 << 28]C.clade_token)(C.malloc(C.size_t(len(h)) * 4))
				defer C.free(unsafe.Pointer(c))
				for i, t := range h {
					c[i] = C.clade_token(t)
				}
				hp[r] = &c[0]
			}
			nh[r] = C.size_t(len(h))
		}
	}
	if nPrompts != nil {
		np = (*[1 << 24]C.size_t)(C.calloc(C.size_t(rows), C.size_t(unsafe.Sizeof(C.size_t(0)))))
		defer C.free(unsafe.Pointer(np))
		for r, n := range nPrompts {
			np[r] = C.size_t(n)
		}
	}
	var hpp **C.clade_token
	var nhp, npp *C.size_t
	if hp != nil {
		hpp, nhp = &hp[0], &nh[0]
	}
	if np != nil {
		npp = &np[0]
	}
	err := check(func() C.clade_status {
		return C.clade_sample_batch(s.p, C.size_t(rows), (*C.float)(unsafe.Pointer(&logits[0])), C.int32_t(nVocab),
			(*C.uint64_t)(unsafe.Pointer(&streams[0])), hpp, nhp, npp, &res[0])
	})
	if err != nil {
		return nil, err
	}
	out := make([]SampleResult, rows)
	for r := 0; r < rows; r++ {
		out[r] = unpackResult(&res[r], tt, tl, r*top)
	}
	return out, nil
}

// Forget drops a finished stream's random state; sampling it again starts
// afresh.
func (s *Sampler) Forget(stream uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return closedErr("sampler")
	}
	return check(func() C.clade_status { return C.clade_sampler_forget(s.p, C.uint64_t(stream)) })
}

// ---- generation (clade_generate) ---------------------------------------------

// NoParent is the Prompt.Parent of a prompt under the call's root node.
const NoParent = -1

// Prompt is one prompt of Tree.Generate: tokens under Parent, the index of
// an earlier prompt of the same slice (a tree of prompts: a shared prefix is
// evaluated once) or NoParent. A leaf prompt needs at least one token.
type Prompt struct {
	Tokens []Token
	Parent int
}

// RootPrompt is a prompt under the call's root node.
func RootPrompt(tokens []Token) Prompt { return Prompt{Tokens: tokens, Parent: NoParent} }

// GenerateParams are clade_generate_params; DefaultGenerateParams gives the
// library's defaults.
type GenerateParams struct {
	MaxNewTokens int  // per sequence, >= 1
	Samples      int  // sequences under each leaf prompt
	IgnoreEOG    bool // the model's end-of-generation tokens do not stop
	MaxLive      int  // sequences decoded at once (0: all)
	StopTokens   []Token
	StopStrings  []string // matched on the text across tokens, cut from it
	Sampler      SamplerParams
	Logprobs     bool // keep each output token's log-probability
	Special      bool // control tokens render as their text
	Attention    int
	Root         NodeID // the node prompts with NoParent go under
	FirstStream  uint64 // sequence i draws on stream FirstStream + i
	// Speculative, if not nil, drafts tokens ahead and verifies them
	// (clade_generate_speculative); nil: plain decoding (clade_generate).
	Speculative *SpeculativeParams
}

// SpeculativeParams are clade_speculative_params: exactly one drafter of
// Draft, DraftModel and Lookup, and how much it drafts. Start from
// DefaultSpeculativeParams (MaxDraft 0 is out of range).
type SpeculativeParams struct {
	// Draft is a drafter of the caller's: called for each live sequence
	// each step, on the goroutine running the call (with the tree's mutex
	// held: it must not use the tree or its caches). history is the
	// sequence's prompt path then its output so far (a copy); the returned
	// tokens (at most maxTokens; none: no draft) continue after its last
	// token. A token outside the vocabulary fails the call with
	// StatusToken, more than maxTokens with StatusInvalidArg; a panic stops
	// the call and is raised again after it. Either way the tree is as
	// before the call.
	Draft func(seq uint64, history []Token, maxTokens int) []Token
	// DraftTree is Draft drafting a tree (clade 1.2; with TreeWidth above
	// 1): it returns the tokens and their parents, parents[j] -1 (token j
	// follows the history) or the index of an earlier token, at most
	// TreeWidth children each, one parent per token (nil: a chain). Bad
	// parents fail the call with StatusInvalidArg. Set Draft or DraftTree,
	// not both.
	DraftTree func(seq uint64, history []Token, maxTokens int) (tokens []Token, parents []int32)
	// DraftModel is a draft model with the tree's vocabulary (a smaller
	// one); it samples with the call's sampler settings.
	DraftModel *Model
	// Lookup > 0 is prompt lookup: the longest n-gram (at most Lookup
	// tokens, <= 64) ending a sequence's history found earlier in it; the
	// tokens that followed it are the draft.
	Lookup int
	// MaxDraft is the most draft tokens per sequence per step (1..64).
	MaxDraft int
	// Adaptive: draft lengths, and drafting on or off, follow the measured
	// acceptance and step times; false: always MaxDraft.
	Adaptive bool
	// TreeWidth is the most children per draft token (1..8; clade 1.2); 1
	// or 0 (the zero value, as in literals written for clade 1.1): chains.
	// Above 1 the drafter proposes a tree of alternatives (at most MaxDraft
	// tokens, 63 at most), verified in one step: the draft model's next
	// likeliest tokens, prompt lookup's continuations of several earlier
	// occurrences, or DraftTree's parents.
	TreeWidth int
}

// DefaultSpeculativeParams are the library's defaults (no drafter yet:
// set one of Draft, DraftModel, Lookup).
func DefaultSpeculativeParams() SpeculativeParams {
	var p C.clade_speculative_params
	C.clade_speculative_params_init(&p)
	return SpeculativeParams{Lookup: int(p.lookup_ngram), MaxDraft: int(p.max_draft), Adaptive: p.adaptive != 0,
		TreeWidth: int(p.tree_width)}
}

// GenerationStats are the counters of one generation
// (clade_generation_stats).
type GenerationStats struct {
	Steps         uint64  // target decode steps
	SpecSteps     uint64  // of them, steps that verified drafts
	Tokens        uint64  // output tokens
	Drafted       uint64  // draft tokens proposed
	Accepted      uint64  // draft tokens accepted
	DraftSteps    uint64  // draft model decode steps
	TargetSeconds float64 // time in target decode steps
	DraftSeconds  float64 // time drafting (draft model, lookup, Draft)
}

// draftState is what a Go drafter's cgo.Handle refers to.
type draftState struct {
	f        func(seq uint64, history []Token, maxTokens int) ([]Token, []int32)
	panicked bool
	value    interface{}
	err      error // this package's refusal of an answer of f, returned after the call
}

// DefaultGenerateParams are the library's defaults.
func DefaultGenerateParams() GenerateParams {
	var p C.clade_generate_params
	C.clade_generate_params_init(&p)
	return GenerateParams{MaxNewTokens: int(p.max_new_tokens), Samples: int(p.n_samples),
		Sampler: DefaultSamplerParams(), Attention: int(p.attention), Root: NodeID(p.root)}
}

// Finish reasons (clade_finish_reason).
const (
	FinishNone       = int(C.CLADE_FINISH_NONE)
	FinishStopToken  = int(C.CLADE_FINISH_STOP_TOKEN)
	FinishStopString = int(C.CLADE_FINISH_STOP_STRING)
	FinishLength     = int(C.CLADE_FINISH_LENGTH)
	FinishCallback   = int(C.CLADE_FINISH_CALLBACK)
	FinishAborted    = int(C.CLADE_FINISH_ABORTED)
)

// Generation is one generated sequence.
type Generation struct {
	Text     string
	Tokens   []Token
	Finish   int       // FinishStopToken, FinishStopString, FinishLength, ...
	Prompt   int       // the index of its leaf prompt
	Logprobs []float32 // one per token with GenerateParams.Logprobs, else nil
}

// Flow is what a streaming callback returns.
type Flow int

const (
	Continue = Flow(C.CLADE_GENERATE_CONTINUE)
	StopSeq  = Flow(C.CLADE_GENERATE_STOP_SEQ) // finish this sequence
	StopAll  = Flow(C.CLADE_GENERATE_STOP_ALL) // finish every sequence
)

// generateState is what a streaming callback's cgo.Handle refers to.
type generateState struct {
	f        func(seq int, token Token, piece string) Flow
	panicked bool
	value    interface{}
}

// Generate runs prompts to finished texts in one call (clade_generate):
// params.Samples sequences under each leaf prompt, numbered leaf by leaf in
// prompt order. params nil: the defaults. The results come back also when
// the abort callback stopped the call (FinishAborted).
func (t *Tree) Generate(prompts []Prompt, params *GenerateParams) ([]Generation, error) {
	return t.GenerateFunc(prompts, params, nil)
}

// GenerateFunc is Generate with streaming: f(seq, token, piece) for each
// token of sequence seq and the text it releases (often empty), then once
// with token -1 and the rest of the text at the sequence's end (its result
// ignored); a sequence's pieces make its text. StopSeq or StopAll stops
// that sequence or all (the results still come back). A panic in f stops
// the call and is raised again after it. f runs with the tree's mutex
// held: it must not use the tree or its caches.
func (t *Tree) GenerateFunc(prompts []Prompt, params *GenerateParams,
	f func(seq int, token Token, piece string) Flow) ([]Generation, error) {
	res, _, err := t.GenerateWithStats(prompts, params, f)
	return res, err
}

// GenerateWithStats is GenerateFunc (f may be nil: no streaming) that also
// returns the call's counters: steps, tokens, and with params.Speculative
// the draft tokens proposed and accepted.
func (t *Tree) GenerateWithStats(prompts []Prompt, params *GenerateParams,
	f func(seq int, token Token, piece string) Flow) ([]Generation, GenerationStats, error) {
	var stats GenerationStats
	gp := DefaultGenerateParams()
	if params != nil {
		gp = *params
	}
	// C memory throughout: what C reads may not hold Go pointers.
	var allocs []unsafe.Pointer
	defer func() {
		for _, a := range allocs {
			C.free(a)
		}
	}()
	alloc := func(n uintptr) unsafe.Pointer {
		p := C.calloc(1, C.size_t(n+1))
		allocs = append(allocs, p)
		return p
	}
	np := len(prompts)
	cp := (*[1 << 26]C.clade_prompt)(alloc(uintptr(max1(np)) * unsafe.Sizeof(C.clade_prompt{})))
	for i, pr := range prompts {
		if pr.Parent != NoParent && (pr.Parent < 0 || pr.Parent >= i) {
			return nil, stats, &Error{Status: StatusInvalidArg,
				Msg: fmt.Sprintf("prompt %d: parent %d is not an earlier prompt", i, pr.Parent)}
		}
		cp[i].parent = C.int32_t(pr.Parent)
		cp[i].n_tokens = C.size_t(len(pr.Tokens))
		if len(pr.Tokens) > 0 {
			tk := (*[1 << 28]C.clade_token)(alloc(uintptr(len(pr.Tokens)) * 4))
			for j, x := range pr.Tokens {
				tk[j] = C.clade_token(x)
			}
			cp[i].tokens = &tk[0]
		}
	}
	sp := (*C.clade_sampler_params)(alloc(unsafe.Sizeof(C.clade_sampler_params{})))
	C.clade_sampler_params_init(sp)
	s := gp.Sampler
	sp.temperature, sp.top_k, sp.top_p, sp.min_p = C.float(s.Temperature), C.int32_t(s.TopK), C.float(s.TopP), C.float(s.MinP)
	sp.repeat_penalty, sp.seed = C.float(s.RepeatPenalty), C.uint64_t(s.Seed)
	sp.presence_penalty, sp.frequency_penalty = C.float(s.PresencePenalty), C.float(s.FrequencyPenalty)
	sp.penalize_prompt = 0
	if s.PenalizePrompt {
		sp.penalize_prompt = 1
	}
	if n := len(s.LogitBias); n > 0 {
		b := (*[1 << 26]C.clade_logit_bias)(alloc(uintptr(n) * unsafe.Sizeof(C.clade_logit_bias{})))
		for i, e := range s.LogitBias {
			b[i].token, b[i].bias = C.clade_token(e.Token), C.float(e.Bias)
		}
		sp.logit_bias, sp.n_logit_bias = &b[0], C.size_t(n)
	}
	p := (*C.clade_generate_params)(alloc(unsafe.Sizeof(C.clade_generate_params{})))
	C.clade_generate_params_init(p)
	p.max_new_tokens, p.n_samples, p.max_live = C.int32_t(gp.MaxNewTokens), C.int32_t(gp.Samples), C.int32_t(gp.MaxLive)
	p.ignore_eog, p.logprobs, p.special = cbool(gp.IgnoreEOG), cbool(gp.Logprobs), cbool(gp.Special)
	if n := len(gp.StopTokens); n > 0 {
		st := (*[1 << 28]C.clade_token)(alloc(uintptr(n) * 4))
		for i, x := range gp.StopTokens {
			st[i] = C.clade_token(x)
		}
		p.stop_tokens, p.n_stop_tokens = &st[0], C.size_t(n)
	}
	if n := len(gp.StopStrings); n > 0 {
		ss := (*[1 << 26]*C.char)(alloc(uintptr(n) * unsafe.Sizeof((*C.char)(nil))))
		for i, x := range gp.StopStrings {
			if strings.IndexByte(x, 0) >= 0 {
				return nil, stats, &Error{Status: StatusInvalidArg, Msg: "a stop string contains a NUL byte"}
			}
			ss[i] = C.CString(x)
			allocs = append(allocs, unsafe.Pointer(ss[i]))
		}
		p.stop_strings, p.n_stop_strings = &ss[0], C.size_t(n)
	}
	p.sampler = sp
	p.attention = C.clade_attention(gp.Attention)
	p.root = C.clade_node_id(gp.Root)
	p.first_stream = C.uint64_t(gp.FirstStream)
	var state *generateState
	if f != nil {
		state = &generateState{f: f}
		h := cgo.NewHandle(state)
		defer h.Delete()
		C.clade_go_set_generate_callback(p, C.uintptr_t(h))
	}
	var spec *C.clade_speculative_params
	var draft *draftState
	if sg := gp.Speculative; sg != nil {
		spec = (*C.clade_speculative_params)(alloc(unsafe.Sizeof(C.clade_speculative_params{})))
		C.clade_speculative_params_init(spec)
		if sg.Draft != nil && sg.DraftTree != nil {
			return nil, stats, &Error{Status: StatusInvalidArg, Msg: "SpeculativeParams: set Draft or DraftTree, not both"}
		}
		if f := sg.Draft; f != nil {
			draft = &draftState{f: func(seq uint64, history []Token, maxTokens int) ([]Token, []int32) {
				return f(seq, history, maxTokens), nil
			}}
		} else if sg.DraftTree != nil {
			draft = &draftState{f: sg.DraftTree}
		}
		if draft != nil {
			h := cgo.NewHandle(draft)
			defer h.Delete()
			C.clade_go_set_draft(spec, C.uintptr_t(h))
		}
		if sg.DraftModel != nil {
			mp, err := sg.DraftModel.ptr()
			if err != nil {
				return nil, stats, err
			}
			spec.draft_model = mp
			defer runtime.KeepAlive(sg.DraftModel)
		}
		spec.lookup_ngram, spec.max_draft, spec.adaptive = C.int32_t(sg.Lookup), C.int32_t(sg.MaxDraft), cbool(sg.Adaptive)
		if sg.TreeWidth != 0 {
			spec.tree_width = C.int32_t(sg.TreeWidth)
		}
	}
	var out *C.clade_generation
	err := t.abortable(func() error {
		if t.p == nil {
			return closedErr("tree")
		}
		st, err := call(false, func() C.clade_status {
			if spec != nil {
				return C.clade_generate_speculative(t.p, &cp[0], C.size_t(np), p, spec, &out)
			}
			return C.clade_generate(t.p, &cp[0], C.size_t(np), p, &out)
		})
		if st == StatusStopped {
			return nil
		}
		return err
	})
	defer C.clade_generation_free(out)
	if state != nil && state.panicked {
		panic(state.value)
	}
	if draft != nil && draft.panicked {
		panic(draft.value)
	}
	if draft != nil && draft.err != nil {
		return nil, stats, draft.err
	}
	if err != nil {
		return nil, stats, err
	}
	var cs C.clade_generation_stats
	cs.size = C.size_t(unsafe.Sizeof(cs))
	if C.clade_generation_get_stats(out, &cs) == C.CLADE_OK {
		stats = GenerationStats{Steps: uint64(cs.steps), SpecSteps: uint64(cs.spec_steps), Tokens: uint64(cs.tokens),
			Drafted: uint64(cs.drafted), Accepted: uint64(cs.accepted), DraftSteps: uint64(cs.draft_steps),
			TargetSeconds: float64(cs.target_seconds), DraftSeconds: float64(cs.draft_seconds)}
	}
	n := int(C.clade_generation_count(out))
	res := make([]Generation, n)
	for i := 0; i < n; i++ {
		ci := C.size_t(i)
		var ln C.size_t
		if txt := C.clade_generation_text(out, ci, &ln); txt != nil && ln > 0 {
			res[i].Text = C.GoStringN(txt, C.int(ln))
		}
		var nt C.size_t
		tp := C.clade_generation_tokens(out, ci, &nt)
		res[i].Tokens = make([]Token, int(nt))
		if tp != nil {
			toks := unsafe.Slice(tp, int(nt))
			for j := range res[i].Tokens {
				res[i].Tokens[j] = Token(toks[j])
			}
		}
		if gp.Logprobs {
			res[i].Logprobs = make([]float32, len(res[i].Tokens))
			if lp := C.clade_generation_logprobs(out, ci); lp != nil {
				for j, x := range unsafe.Slice(lp, int(nt)) {
					res[i].Logprobs[j] = float32(x)
				}
			}
		}
		res[i].Finish = int(C.clade_generation_finish(out, ci))
		res[i].Prompt = int(C.clade_generation_prompt(out, ci))
	}
	return res, stats, nil
}

func cbool(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

// Piece is one text piece of a Stream: sequence Seq's text grew by Text
// (never empty).
type Piece struct {
	Seq  int
	Text string
}

// Stream is a generation running on its own goroutine (Tree.GenerateStream):
// receive its pieces from Pieces until the channel closes, then Wait for the
// results.
type Stream struct {
	Pieces  <-chan Piece
	stop    chan struct{}
	once    sync.Once
	done    chan struct{}
	results []Generation
	stats   GenerationStats
	err     error
}

// GenerateStream runs Generate on a goroutine of its own and sends each
// sequence's text pieces, in order, on the returned Stream's channel. The
// tree's other calls wait until it ends. Stop ends it early (StopAll).
func (t *Tree) GenerateStream(prompts []Prompt, params *GenerateParams) *Stream {
	ch := make(chan Piece)
	s := &Stream{Pieces: ch, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(ch)
		s.results, s.stats, s.err = t.GenerateWithStats(prompts, params, func(seq int, _ Token, piece string) Flow {
			if piece != "" {
				select {
				case ch <- Piece{Seq: seq, Text: piece}:
				case <-s.stop:
					return StopAll
				}
			}
			select {
			case <-s.stop:
				return StopAll
			default:
				return Continue
			}
		})
	}()
	return s
}

// Stop ends the generation (its sequences finish with FinishCallback) and
// drops the pieces not yet received. Safe to call more than once.
func (s *Stream) Stop() {
	s.once.Do(func() { close(s.stop) })
}

// Wait waits for the generation to end (receiving or dropping the pieces
// left) and returns its results.
func (s *Stream) Wait() ([]Generation, error) {
	for range s.Pieces {
	}
	<-s.done
	return s.results, s.err
}

// Stats are the generation's counters (GenerateWithStats), once Wait has
// returned.
func (s *Stream) Stats() GenerationStats {
	<-s.done
	return s.stats
}

// ---- generate ------------------------------------------------------------------

// Generate produces n tokens for each of samples sequences sharing the
// prompt (one tree node, evaluated once). temperature 0 is greedy.
func Generate(m *Model, prompt []Token, n, samples int, temperature float32, seed uint64) ([][]Token, error) {
	if len(prompt) == 0 {
		return nil, &Error{Status: StatusInvalidArg, Msg: "generate: the prompt is empty"}
	}
	tree, err := m.NewTree(nil)
	if err != nil {
		return nil, err
	}
	defer tree.Close()
	cp := DefaultCacheParams()
	cp.MaxSeqs, cp.MaxTokens = max1(samples), max1(n)
	cache, err := tree.NewCache(&cp)
	if err != nil {
		return nil, err
	}
	defer cache.Close()
	sp := DefaultSamplerParams()
	sp.Temperature, sp.Seed = temperature, seed
	sampler, err := NewSampler(&sp)
	if err != nil {
		return nil, err
	}
	defer sampler.Close()
	node, first, err := tree.Append(Root, prompt, true)
	if err != nil {
		return nil, err
	}
	seqs := make([]SeqID, samples)
	for i := range seqs {
		if seqs[i], err = cache.Add(node, nil, false); err != nil {
			return nil, err
		}
	}
	if err := tree.Release(node); err != nil {
		return nil, err
	}
	out := make([][]Token, samples)
	rows := make([][]float32, samples)
	for i := range rows {
		rows[i] = first
	}
	for step := 0; step < n; step++ {
		batch := make([]Step, samples)
		for i := range out {
			history := append(append([]Token{}, prompt...), out[i]...)
			t, err := sampler.Sample(uint64(i), rows[i], history)
			if err != nil {
				return nil, err
			}
			out[i] = append(out[i], t)
			batch[i] = Step{Seq: seqs[i], Tokens: []Token{t}}
		}
		if step == n-1 {
			break
		}
		if rows, err = cache.Decode(batch, false); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func max1(n int) int {
	if n < 1 {
		return 1
	}
	return n
}
