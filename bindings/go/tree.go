// Tree (clade_tree_*): the shared-cache tree of a model, its nodes, the
// KV budget, the abort callback and AppendBatch.

package clade

/*
#include <stdlib.h>
#include <clade/clade.h>

// Exported from callbacks.go.
extern int32_t cladeGoAbort(uintptr_t handle);

static int32_t clade_go_abort_trampoline(void *user) { return cladeGoAbort((uintptr_t)user); }

// handle 0: remove the callback.
static clade_status clade_go_set_abort(clade_tree *tree, uintptr_t handle) {
	return clade_tree_set_abort(tree, handle ? clade_go_abort_trampoline : NULL, (void *)handle);
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"runtime/cgo"
	"sync"
	"unsafe"
)

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
