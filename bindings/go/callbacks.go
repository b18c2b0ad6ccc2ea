package clade

// Go functions called from C: the trampolines in clade.go's preamble call
// them. A file with //export may only declare C in its preamble.

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"runtime/cgo"
	"sync"
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
