// Cache (clade_cache_*): the sequences of a tree and their decode steps
// (Decode, DecodeGreedy, DecodeTree, Keep).

package clade

/*
#include <stdlib.h>
#include <clade/clade.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

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
