package clade

// Go functions called from C: the trampolines in the preambles of clade.go,
// tree.go and generate.go call them. A file with //export may only declare
// C in its preamble.

/*
#include <stddef.h>
#include <stdint.h>
#include <clade/clade.h>
*/
import "C"

import (
	"fmt"
	"math"
	"runtime/cgo"
	"sync"
	"unsafe"
)

// cladeGoAbort runs the abort callback behind a cgo.Handle (Tree.SetAbort).
// It runs on the goroutine that made the C call, which holds the tree's
// mutex. A panic must not unwind through C: it is recovered, stops the call,
// and is raised again once C has returned (Tree.abortable).
//
//export cladeGoAbort
func cladeGoAbort(handle C.uintptr_t) (stop C.int32_t) {
	st := cgo.Handle(handle).Value().(*abortState)
	if st.panicked {
		return 1
	}
	defer func() {
		if r := recover(); r != nil {
			st.panicked, st.value = true, r
			stop = 1
		}
	}()
	if st.f() {
		return 1
	}
	return 0
}

var (
	logMu sync.RWMutex
	logFn func(level int, message string)
)

// cladeGoLog passes a message to the SetLog callback; a panic in it is
// recovered and dropped.
//
//export cladeGoLog
func cladeGoLog(level C.int, message *C.char) {
	logMu.RLock()
	f := logFn
	logMu.RUnlock()
	if f == nil {
		return
	}
	msg := ""
	if message != nil {
		msg = C.GoString(message)
	}
	defer func() { _ = recover() }()
	f(int(level), msg)
}

// SetLog installs f as the process-wide log callback for messages of at
// least minLevel (LogDebug ... LogError); nil turns logging off (the
// default). f is called on the goroutine making the clade call being logged,
// possibly on several at once. As the C API asks, set it before other
// goroutines use clade. C gets a fixed trampoline, never a Go pointer.
func SetLog(f func(level int, message string), minLevel int) {
	logMu.Lock()
	logFn = f
	logMu.Unlock()
	on := C.int(0)
	if f != nil {
		on = 1
	}
	setLog(on, minLevel)
}

// cladeGoGenerate runs a streaming callback behind a cgo.Handle
// (Tree.GenerateFunc), on the goroutine that made the call, which holds the
// tree's mutex. A panic is recovered, stops everything (STOP_ALL) and is
// raised again once C has returned.
//
//export cladeGoGenerate
func cladeGoGenerate(handle C.uintptr_t, seq C.size_t, token C.int32_t, text *C.char, n C.size_t) (ret C.int32_t) {
	st := cgo.Handle(handle).Value().(*generateState)
	if st.panicked {
		return C.int32_t(StopAll)
	}
	defer func() {
		if r := recover(); r != nil {
			st.panicked, st.value = true, r
			ret = C.int32_t(StopAll)
		}
	}()
	piece := ""
	if n > 0 {
		piece = C.GoStringN(text, C.int(n))
	}
	return C.int32_t(st.f(int(seq), Token(token), piece))
}

// cladeGoDraft runs a Go drafter behind a cgo.Handle (SpeculativeParams.Draft
// or DraftTree) once per request, on the goroutine that made the call, which
// holds the tree's mutex. A panic is recovered, fails the call (-1) and is
// raised again once C has returned; so is this package's refusal of an
// answer (draftState.err).
//
//export cladeGoDraft
func cladeGoDraft(handle C.uintptr_t, requests *C.clade_draft_request, n C.size_t) (ret C.int32_t) {
	st := cgo.Handle(handle).Value().(*draftState)
	if st.panicked || st.err != nil {
		return -1
	}
	defer func() {
		if r := recover(); r != nil {
			st.panicked, st.value = true, r
			ret = -1
		}
	}()
	if n == 0 {
		return 0
	}
	// The array's stride is the library's sizeof(clade_draft_request),
	// requests[0].size: the struct may grow (or, from a 1.1 library, end
	// before parents).
	stride := uintptr(requests.size)
	for i := uintptr(0); i < uintptr(n); i++ {
		r := (*C.clade_draft_request)(unsafe.Add(unsafe.Pointer(requests), i*stride))
		history := make([]Token, int(r.n_history))
		if len(history) > 0 {
			copy(history, unsafe.Slice((*Token)(unsafe.Pointer(r.history)), len(history)))
		}
		max := int(r.max_tokens)
		got, parents := st.f(uint64(r.seq), history, max)
		// More than maxTokens: only maxTokens are written, and the library
		// fails the call (n_tokens out of range).
		if k := len(got); k > 0 && max > 0 {
			if k > max {
				k = max
			}
			copy(unsafe.Slice((*Token)(unsafe.Pointer(r.tokens)), max), got[:k])
		}
		if len(got) > math.MaxInt32 {
			r.n_tokens = math.MaxInt32
		} else {
			r.n_tokens = C.int32_t(len(got))
		}
		if parents != nil {
			if st.err = writeParents(r, stride, len(got), parents); st.err != nil {
				return -1
			}
		}
	}
	return 0
}

// treeRequestSize is a request's bytes up to the end of its clade 1.2
// fields (parents, tree_width): a 1.1 library's requests are shorter.
const treeRequestSize = unsafe.Offsetof(C.clade_draft_request{}.tree_width) + 4

// writeParents writes a tree drafter's parents into request r of an array
// of stride stride (the library checks their values).
func writeParents(r *C.clade_draft_request, stride uintptr, nTokens int, parents []int32) error {
	if len(parents) != nTokens {
		return &Error{Status: StatusInvalidArg, Msg: fmt.Sprintf(
			"the drafter gave sequence %d %d parents for %d tokens", uint64(r.seq), len(parents), nTokens)}
	}
	if stride < treeRequestSize { // a 1.1 library: chains only
		for j, p := range parents {
			if p != int32(j-1) {
				return &Error{Status: StatusUnsupported, Msg: "the clade library loaded (" + Version() +
					") has no token trees: the drafter gave a tree"}
			}
		}
		return nil
	}
	if k, max := len(parents), int(r.max_tokens); k > 0 && max > 0 {
		if k > max {
			k = max
		}
		copy(unsafe.Slice((*int32)(unsafe.Pointer(r.parents)), max), parents[:k])
	}
	return nil
}
