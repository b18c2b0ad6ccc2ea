// Structured output (clade 1.5): Grammar (clade_grammar, a GBNF grammar, a
// JSON Schema, a regular expression or any JSON value compiled for a
// model's vocabulary) and GenerateParams.Grammars.

package clade

/*
#include <stdlib.h>
#include <clade/clade.h>
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

// Grammar kinds (clade_grammar_kind).
const (
	GrammarGBNF       = int(C.CLADE_GRAMMAR_GBNF)
	GrammarJSONSchema = int(C.CLADE_GRAMMAR_JSON_SCHEMA)
	GrammarRegex      = int(C.CLADE_GRAMMAR_REGEX)
	GrammarJSON       = int(C.CLADE_GRAMMAR_JSON)
)

// GrammarParams are clade_grammar_params; DefaultGrammarParams gives the
// library's defaults (GBNF, jump-forward on).
type GrammarParams struct {
	Kind           int
	Lenient        bool // ignore schema keywords that cannot be enforced
	FreeWhitespace bool // JSON with whitespace between tokens
	JumpForward    bool // append the text the grammar forces without sampling it
}

// DefaultGrammarParams are the library's defaults.
func DefaultGrammarParams() GrammarParams {
	var p C.clade_grammar_params
	C.clade_grammar_params_init(&p)
	return GrammarParams{Kind: int(p.kind), Lenient: p.lenient != 0, FreeWhitespace: p.free_whitespace != 0,
		JumpForward: p.jump_forward != 0}
}

// Grammar is a grammar compiled for a model's vocabulary; read-only, safe
// to share between goroutines and calls.
type Grammar struct {
	p  *C.clade_grammar
	mu sync.Mutex
}

// NewGrammar compiles text for m's vocabulary; params nil: GBNF. A
// grammar that does not compile is StatusInvalidArg naming the keyword or
// position.
func NewGrammar(m *Model, text string, params *GrammarParams) (*Grammar, error) {
	gp := DefaultGrammarParams()
	if params != nil {
		gp = *params
	}
	mp, err := m.ptr()
	if err != nil {
		return nil, err
	}
	var p C.clade_grammar_params
	C.clade_grammar_params_init(&p)
	p.kind = C.clade_grammar_kind(gp.Kind)
	p.lenient, p.free_whitespace, p.jump_forward = cbool(gp.Lenient), cbool(gp.FreeWhitespace), cbool(gp.JumpForward)
	ct := C.CString(text)
	defer C.free(unsafe.Pointer(ct))
	g := &Grammar{}
	if err := check(func() C.clade_status {
		return C.clade_grammar_create(mp, ct, C.size_t(len(text)), &p, &g.p)
	}); err != nil {
		return nil, err
	}
	runtime.KeepAlive(m)
	runtime.SetFinalizer(g, (*Grammar).Close)
	return g, nil
}

// Close frees the grammar (generations that used it are unaffected).
func (g *Grammar) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.p != nil {
		C.clade_grammar_free(g.p)
		g.p = nil
	}
	return nil
}

// grammarArray is params' Grammars as C's array (nil when none), in C
// memory from alloc.
func grammarArray(gs []*Grammar, alloc func(uintptr) unsafe.Pointer) (**C.clade_grammar, C.size_t, error) {
	if len(gs) == 0 {
		return nil, 0, nil
	}
	arr := (*[1 << 26]*C.clade_grammar)(alloc(uintptr(len(gs)) * unsafe.Sizeof((*C.clade_grammar)(nil))))
	for i, g := range gs {
		if g == nil {
			continue
		}
		if g.p == nil {
			return nil, 0, closedErr("a grammar")
		}
		arr[i] = g.p
	}
	return &arr[0], C.size_t(len(gs)), nil
}
