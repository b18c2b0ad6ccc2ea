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
extern void cladeGoLog(int level, char *message);

static void clade_go_log_trampoline(clade_log_level level, const char *message, void *user) {
	(void)user;
	cladeGoLog((int)level, (char *)message);
}

static void clade_go_set_log(int on, int min_level) {
	clade_set_log(on ? clade_go_log_trampoline : NULL, NULL, (clade_log_level)min_level);
}
*/
import "C"

import (
	"fmt"
	"runtime"
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

// setLog switches C's log callback (SetLog, in callbacks.go, which may not
// call the preamble's functions itself).
func setLog(on C.int, minLevel int) { C.clade_go_set_log(on, C.int(minLevel)) }
