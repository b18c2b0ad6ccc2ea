package clade

// Tests of the Go bindings: `go test` in bindings/go.
//
// Environment:
//   CLADE_TEST_MODEL  a GGUF model with a 300-token vocabulary to use as is
//   CLADE_CLI         the clade tool used to write random models otherwise
//                     (default: ../../build/tools/clade/clade)
//   CLADE_VOCAB_DIR   reference vocabularies (default: ../../tests/data/vocab);
//                     the tests that need them fail without them
//   CGO_LDFLAGS       "-L/dir -Wl,-rpath,/dir" to test a libclade.so other than ../../build's

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
)

var tmpDir string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "clade-go-")
	if err != nil {
		panic(err)
	}
	tmpDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func randomModel(t *testing.T, name string, extra ...string) string {
	t.Helper()
	path := filepath.Join(tmpDir, name)
	if _, err := os.Stat(path); err == nil {
		return path
	}
	cli := envOr("CLADE_CLI", "../../build/tools/clade/clade")
	args := append([]string{"model", "random", "-o", path, "--layers", "2", "--dim", "64", "--heads", "4",
		"--kv-heads", "2", "--ff", "128", "--type", "f32", "--seed", "7"}, extra...)
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s model random (set CLADE_CLI): %v\n%s", cli, err, out)
	}
	return path
}

func smallModel(t *testing.T) *Model {
	t.Helper()
	path := os.Getenv("CLADE_TEST_MODEL")
	if path == "" {
		path = randomModel(t, "small.gguf", "--vocab", "300")
	}
	m, err := LoadModel(path, &ModelParams{NThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// must returns v or panics with err; every test defers catch(t), which turns
// the panic into t.Fatal (Go cannot pass f()'s two results along with t).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func catch(t *testing.T) {
	if r := recover(); r != nil {
		t.Helper()
		t.Fatalf("unexpected error: %v", r)
	}
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantStatus(t *testing.T, err error, status int) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want a *clade.Error with status %d, got %v", status, err)
	}
	if e.Status != status {
		t.Fatalf("want status %d (%s), got %v", status, StatusString(status), e)
	}
	if e.Msg == "" || !strings.Contains(e.Error(), e.Msg) {
		t.Fatalf("error without a message: %v", e)
	}
}

func argmax(row []float32) Token {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return Token(best)
}

func greedy(t *testing.T, c *Cache, seq SeqID, row []float32, n int) []Token {
	t.Helper()
	var out []Token
	for i := 0; i < n; i++ {
		out = append(out, argmax(row))
		row = must(c.Decode([]Step{{seq, out[len(out)-1:]}}, false))[0]
	}
	return out
}

func equal(a, b []Token) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestVersionAndInfo(t *testing.T) {
	defer catch(t)
	want := fmt.Sprintf("%d.%d.%d", HeaderVersionMajor, HeaderVersionMinor, HeaderVersionPatch)
	if Version() != want || VersionNumber() != HeaderVersionNumber || ABIMajor != HeaderVersionMajor {
		t.Fatalf("version %s %d, header %s %d (ABI %d)", Version(), VersionNumber(), want, HeaderVersionNumber,
			ABIMajor)
	}
	m := smallModel(t)
	i := must(m.Info())
	if i.Architecture != "llama" || i.NLayers != 2 || i.NEmbd != 64 || i.NHeads != 4 || i.NKVHeads != 2 ||
		i.HeadDim != 16 || i.NFF != 128 || i.NVocab != 300 || i.WeightType != 0 || i.NParams == 0 {
		t.Fatalf("info %+v", i)
	}
	if m.NVocab() != 300 {
		t.Fatal(m.NVocab())
	}
}

func TestSharedPrefixEqualsAlone(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	prompt := []Token{5, 17, 42, 99, 3, 250, 11, 64, 7, 123}
	suffixes := [][]Token{{21}, {150, 9}, {299}}
	const n = 8
	tree := must(m.NewTree(&TreeParams{KVType: KVF32}))
	defer tree.Close()
	node, nodeLogits, err := tree.Append(Root, prompt, true)
	ok(t, err)
	if len(nodeLogits) != 300 {
		t.Fatal(len(nodeLogits))
	}
	info := must(tree.NodeInfo(node))
	if info.Parent != 0 || info.Length != len(prompt) || info.PathLength != 0 {
		t.Fatalf("node info %+v", info)
	}
	if !equal(must(tree.NodeTokens(node)), prompt) {
		t.Fatal("node tokens")
	}
	cp := DefaultCacheParams()
	cp.MaxSeqs, cp.MaxTokens = 4, 64

	cache := must(tree.NewCache(&cp))
	var seqs []SeqID
	var steps []Step
	for _, s := range suffixes {
		seq := must(cache.Add(node, s, false))
		seqs = append(seqs, seq)
		steps = append(steps, Step{seq, nil})
	}
	rows := must(cache.Decode(steps, false))
	if len(rows) != 3 {
		t.Fatal(len(rows))
	}
	shared := make([][]Token, 3)
	for i, r := range rows {
		shared[i] = []Token{argmax(r)}
		if l := must(cache.Length(seqs[i])); l != len(suffixes[i]) {
			t.Fatalf("length %d", l)
		}
	}
	for k := 1; k < n; k++ {
		for i := range steps {
			steps[i].Tokens = shared[i][len(shared[i])-1:]
		}
		rows = must(cache.Decode(steps, false))
		for i, r := range rows {
			shared[i] = append(shared[i], argmax(r))
		}
	}
	if cache.KVBytes() <= 0 {
		t.Fatal("kv bytes")
	}
	ok(t, cache.Close())
	ok(t, tree.Release(node))

	for i, suf := range suffixes {
		c := must(tree.NewCache(&cp))
		own := append(append([]Token{}, prompt...), suf...)
		s := must(c.Add(Root, own, false))
		row := must(c.Decode([]Step{{s, nil}}, false))[0]
		if got := greedy(t, c, s, row, n); !equal(got, shared[i]) {
			t.Fatalf("sequence %d: shared %v, alone %v", i, shared[i], got)
		}
		ok(t, c.Close())
	}

	c := must(tree.NewCache(&cp))
	defer c.Close()
	s := must(c.Add(Root, prompt, false))
	row := must(c.Decode([]Step{{s, nil}}, false))[0]
	if argmax(row) != argmax(nodeLogits) {
		t.Fatal("node logits differ from the prompt decoded alone")
	}
	for j := range row {
		d := row[j] - nodeLogits[j]
		lim := 1e-3 * (1 + abs(nodeLogits[j]))
		if d > lim || -d > lim {
			t.Fatalf("logit %d: %v vs %v", j, row[j], nodeLogits[j])
		}
	}
}

func abs(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

func TestGenerateAndSampler(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	prompt := []Token{1, 2, 3, 4, 5, 6}
	out := must(Generate(m, prompt, 6, 3, 0, 0))
	if len(out) != 3 {
		t.Fatal(len(out))
	}
	for _, o := range out {
		if !equal(o, out[0]) || len(o) != 6 {
			t.Fatalf("greedy samples differ: %v", out)
		}
	}
	a := must(Generate(m, prompt, 6, 3, 1, 11))
	b := must(Generate(m, prompt, 6, 3, 1, 11))
	for i := range a {
		if !equal(a[i], b[i]) {
			t.Fatalf("seeded generation not reproducible: %v %v", a, b)
		}
	}
	tree := must(m.NewTree(nil))
	defer tree.Close()
	c := must(tree.NewCache(nil))
	defer c.Close()
	s := must(c.Add(Root, prompt, false))
	row := must(c.Decode([]Step{{s, nil}}, false))[0]
	sp := DefaultSamplerParams()
	sp.Temperature = 0
	g := must(NewSampler(&sp))
	defer g.Close()
	if tok := must(g.Sample(0, row, nil)); tok != argmax(row) {
		t.Fatalf("greedy sampler %d, argmax %d", tok, argmax(row))
	}
	// a forgotten stream starts again from its first draw
	rp := DefaultSamplerParams()
	rp.Temperature, rp.TopK, rp.TopP, rp.MinP, rp.Seed = 1, 0, 1, 0, 5
	r := must(NewSampler(&rp))
	defer r.Close()
	var first, again []Token
	for i := 0; i < 8; i++ {
		first = append(first, must(r.Sample(7, row, nil)))
	}
	if err := r.Forget(7); err != nil {
		t.Fatal(err)
	}
	if err := r.Forget(12345); err != nil { // never sampled: fine
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		again = append(again, must(r.Sample(7, row, nil)))
	}
	if !equal(first, again) {
		t.Fatalf("after Forget: %v, first %v", again, first)
	}
	if got := greedy(t, c, s, row, 6); !equal(got, out[0]) {
		t.Fatalf("generate %v, step by step %v", out[0], got)
	}
}

// DecodeGreedy (clade 1.4): the same steps in two caches, one returning
// the logits rows, the other only each row's argmax token.
func TestDecodeGreedy(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	tree := must(m.NewTree(nil))
	defer tree.Close()
	cp := DefaultCacheParams()
	cp.MaxSeqs, cp.MaxTokens = 2, 32
	c1 := must(tree.NewCache(&cp))
	defer c1.Close()
	c2 := must(tree.NewCache(&cp))
	defer c2.Close()
	a1, b1 := must(c1.Add(Root, []Token{1, 2, 3}, false)), must(c1.Add(Root, []Token{4}, false))
	a2, b2 := must(c2.Add(Root, []Token{1, 2, 3}, false)), must(c2.Add(Root, []Token{4}, false))
	for step := 0; step < 3; step++ {
		tok := []Token{Token(5 + step)}
		all := step == 0
		rows := must(c1.Decode([]Step{{a1, tok}, {b1, []Token{6}}}, all))
		got := must(c2.DecodeGreedy([]Step{{a2, tok}, {b2, []Token{6}}}, all))
		if len(got) != len(rows) || (all && len(got) != 6) || (!all && len(got) != 2) {
			t.Fatalf("step %d: %d tokens for %d rows", step, len(got), len(rows))
		}
		for r, row := range rows {
			if got[r] != argmax(row) {
				t.Fatalf("step %d row %d: greedy %d, argmax of the logits %d", step, r, got[r], argmax(row))
			}
		}
	}
}

func TestTruncateRemoveCacheFull(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	tree := must(m.NewTree(nil))
	defer tree.Close()
	cp := DefaultCacheParams()
	cp.MaxSeqs, cp.MaxTokens = 1, 6
	c := must(tree.NewCache(&cp))
	defer c.Close()
	s := must(c.Add(Root, []Token{1, 2, 3}, false))
	must(c.Decode([]Step{{s, []Token{4, 5}}}, false))
	if l := must(c.Length(s)); l != 5 {
		t.Fatal(l)
	}
	_, err := c.Decode([]Step{{s, []Token{6, 7}}}, false)
	wantStatus(t, err, StatusCacheFull)
	ok(t, c.Truncate(s, 2))
	if rows := must(c.Decode([]Step{{s, []Token{7, 8}}}, true)); len(rows) != 2 {
		t.Fatal(len(rows))
	}
	_, err = c.Add(Root, nil, false)
	wantStatus(t, err, StatusCacheFull)
	ok(t, c.Remove(s))
	_, err = c.Length(s)
	wantStatus(t, err, StatusState)
	// any closing order is fine; a closed handle errs, the others go on
	ok(t, tree.Close())
	ok(t, m.Close())
	_, _, err = tree.Append(Root, []Token{1}, false)
	wantStatus(t, err, StatusState)
	_, err = m.Info()
	wantStatus(t, err, StatusState)
	s = must(c.Add(Root, []Token{1}, false))
	if rows := must(c.Decode([]Step{{s, []Token{2}}}, false)); len(rows) != 1 {
		t.Fatal(len(rows))
	}
	ok(t, c.Close())
	_, err = c.Length(s)
	wantStatus(t, err, StatusState)
}

func TestBadToken(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	bad := Token(m.NVocab() + 5)
	tree := must(m.NewTree(nil))
	defer tree.Close()
	_, _, err := tree.Append(Root, []Token{1, bad}, false)
	wantStatus(t, err, StatusToken)
	c := must(tree.NewCache(nil))
	defer c.Close()
	_, err = c.Add(Root, []Token{bad}, false)
	wantStatus(t, err, StatusToken)
	s := must(c.Add(Root, []Token{1}, false))
	_, err = c.Decode([]Step{{s, []Token{-1}}}, false)
	wantStatus(t, err, StatusToken)
	if l := must(c.Length(s)); l != 0 {
		t.Fatal(l)
	}
	wantStatus(t, tree.Release(Root), StatusState)
}

func TestBadPath(t *testing.T) {
	defer catch(t)
	_, err := LoadModel(filepath.Join(tmpDir, "does-not-exist.gguf"), nil)
	wantStatus(t, err, StatusIO)
	if !strings.Contains(err.Error(), "does-not-exist") {
		t.Fatal(err)
	}
	junk := filepath.Join(tmpDir, "junk.gguf")
	ok(t, os.WriteFile(junk, []byte("this is not a gguf file at all, not at all"), 0o644))
	_, err = LoadModel(junk, nil)
	wantStatus(t, err, StatusFormat)
}

func TestFinalizers(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	for i := 0; i < 20; i++ {
		tree := must(m.NewTree(nil))
		c := must(tree.NewCache(nil))
		must(c.Add(Root, []Token{1, 2}, false))
		ok(t, tree.SetAbort(func() bool { return false }))
		_ = c // dropped without Close: the finalizers free them, in any order
	}
	for i := 0; i < 5; i++ {
		runtime.GC()
	}
}

// assertClose: rows of logits equal to about rel, relative to the row's scale.
func assertClose(t *testing.T, got, want []float32, rel float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("rows of %d and %d logits", len(got), len(want))
	}
	var scale, worst float32 = 1, 0
	for i := range want {
		if a := abs(want[i]); a > scale {
			scale = a
		}
		if d := abs(got[i] - want[i]); d > worst {
			worst = d
		}
	}
	if worst > rel*scale {
		t.Fatalf("logits differ by %g (scale %g)", worst, scale)
	}
}

func one(c *Cache, seq SeqID, tokens ...Token) ([]float32, error) {
	rows, err := c.Decode([]Step{{seq, tokens}}, false)
	if err != nil {
		return nil, err
	}
	return rows[0], nil
}

func equalNodes(a, b []NodeID) bool { return equal(a, b) }

func TestChildren(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	tree := must(m.NewTree(nil))
	defer tree.Close()
	if ch := must(tree.Children(Root)); len(ch) != 0 {
		t.Fatal(ch)
	}
	a, _, err := tree.Append(Root, []Token{1, 2}, false)
	ok(t, err)
	b, _, err := tree.Append(Root, []Token{3}, false)
	ok(t, err)
	c, _, err := tree.Append(a, []Token{4}, false)
	ok(t, err)
	var many []NodeID // past the first buffer
	for i := 0; i < 12; i++ {
		n, _, err := tree.Append(b, []Token{Token(i)}, false)
		ok(t, err)
		many = append(many, n)
	}
	if ch := must(tree.Children(Root)); !equalNodes(ch, []NodeID{a, b}) {
		t.Fatalf("root children %v, want %v", ch, []NodeID{a, b})
	}
	if ch := must(tree.Children(a)); !equalNodes(ch, []NodeID{c}) {
		t.Fatal(ch)
	}
	if ch := must(tree.Children(b)); !equalNodes(ch, many) {
		t.Fatalf("%v, want %v", ch, many)
	}
	if ch := must(tree.Children(c)); len(ch) != 0 {
		t.Fatal(ch)
	}
	for _, n := range many {
		ok(t, tree.Release(n))
	}
	ok(t, tree.Release(b))
	if ch := must(tree.Children(Root)); !equalNodes(ch, []NodeID{a}) {
		t.Fatal(ch)
	}
	if _, err := tree.Children(b); err == nil {
		t.Fatal("children of a released node")
	}
}

func TestFork(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	tree := must(m.NewTree(&TreeParams{KVType: KVF32}))
	defer tree.Close()
	cp := DefaultCacheParams()
	cp.MaxSeqs, cp.MaxTokens = 4, 64
	c := must(tree.NewCache(&cp))
	defer c.Close()
	node, _, err := tree.Append(Root, []Token{5, 6, 7, 8}, false)
	ok(t, err)
	s := must(c.Add(node, []Token{9, 10}, false))
	must(one(c, s, 11))
	f := must(c.Fork(s))
	if f == s || must(c.SeqNode(f)) != node {
		t.Fatalf("fork %d of %d under %d", f, s, must(c.SeqNode(f)))
	}
	if !equal(must(c.SeqTokens(f)), []Token{9, 10, 11}) || !equal(must(c.SeqTokens(s)), []Token{9, 10, 11}) {
		t.Fatal(must(c.SeqTokens(f)), must(c.SeqTokens(s)))
	}
	rows := must(c.Decode([]Step{{s, []Token{12}}, {f, []Token{12}}}, false))
	assertClose(t, rows[0], rows[1], 1e-4)
	// a fork copies the queued tokens too
	q := must(c.Add(node, []Token{13, 14}, false))
	g := must(c.Fork(q))
	rows = must(c.Decode([]Step{{q, nil}, {g, nil}}, false))
	if len(rows) != 2 {
		t.Fatal(len(rows))
	}
	assertClose(t, rows[0], rows[1], 1e-4)
	if !equal(must(c.SeqTokens(g)), []Token{13, 14}) {
		t.Fatal(must(c.SeqTokens(g)))
	}
	ok(t, tree.Release(node))
	cp.MaxSeqs = 1
	full := must(tree.NewCache(&cp))
	defer full.Close()
	_, err = full.Fork(must(full.Add(Root, nil, false)))
	wantStatus(t, err, StatusCacheFull)
}

func TestDecodeTreeAndKeep(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	tree := f32Tree(t, m)
	c := newCache(t, tree, 3, 64)
	node, _, err := tree.Append(Root, []Token{5, 6, 7, 8}, false)
	ok(t, err)
	s := must(c.Add(node, []Token{9, 10}, false))
	must(c.Decode([]Step{{s, nil}}, false))
	a, b := must(c.Fork(s)), must(c.Fork(s))
	// 21 and 30 after the history, 31 under 30, 22 under 21
	rows := must(c.DecodeTree([]TreeStep{{s, []Token{21, 30, 31, 22}, []int32{-1, -1, 1, 0}}}, true))
	if len(rows) != 4 || must(c.Length(s)) != 6 {
		t.Fatal(len(rows), must(c.Length(s)))
	}
	// each branch as the chain decoded alone (b: a chain's parents)
	ra := must(c.Decode([]Step{{a, []Token{30, 31}}}, true))
	rb := must(c.DecodeTree([]TreeStep{{b, []Token{21, 22}, []int32{-1, 0}}}, true))
	for i, want := range [][]float32{rb[0], ra[0], ra[1], rb[1]} {
		assertClose(t, rows[i], want, 1e-4)
	}
	// keep the path 30, 31: as if only it was decoded
	ok(t, c.Keep(s, 2, []int32{1, 2}))
	if must(c.Length(s)) != 4 || !equal(must(c.SeqTokens(s)), must(c.SeqTokens(a))) {
		t.Fatal(must(c.SeqTokens(s)), must(c.SeqTokens(a)))
	}
	rows = must(c.Decode([]Step{{s, []Token{40}}, {a, []Token{40}}}, false))
	assertClose(t, rows[0], rows[1], 1e-4)
	// bad parents (or not one per token) and a bad keep: StatusInvalidArg, nothing changed
	for _, parents := range [][]int32{{0, -1}, {-1, 5}, {-1}} {
		_, err := c.DecodeTree([]TreeStep{{s, []Token{1, 2}, parents}}, false)
		wantStatus(t, err, StatusInvalidArg)
	}
	wantStatus(t, c.Keep(s, 2, []int32{1, 0}), StatusInvalidArg)
	if must(c.Length(s)) != 5 {
		t.Fatal(must(c.Length(s)))
	}
	ok(t, tree.Release(node))
}

func TestPromoteAndMove(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	prompt := []Token{5, 17, 42, 99}
	tree := must(m.NewTree(&TreeParams{KVType: KVF32}))
	defer tree.Close()
	cp := DefaultCacheParams()
	cp.MaxSeqs, cp.MaxTokens = 6, 64
	c := must(tree.NewCache(&cp))
	defer c.Close()
	node, _, err := tree.Append(Root, prompt, false)
	ok(t, err)
	a := must(c.Add(node, []Token{21, 22}, false))
	must(one(c, a, 23))
	b := must(c.Fork(a)) // B shares A's unique tokens, then goes on
	must(one(c, b, 31, 32))
	if l := must(c.Length(b)); l != 5 {
		t.Fatal(l)
	}
	probe := must(c.Fork(b)) // B's next logits before the move
	want := must(one(c, probe, 40))

	unique := must(c.SeqTokens(a))
	if !equal(unique, []Token{21, 22, 23}) {
		t.Fatal(unique)
	}
	p := must(c.Promote(a))
	found := false
	for _, ch := range must(tree.Children(node)) {
		found = found || ch == p
	}
	if !found {
		t.Fatalf("node %d not among the children of %d", p, node)
	}
	if !equal(must(tree.NodeTokens(p)), unique) {
		t.Fatal(must(tree.NodeTokens(p)))
	}
	info := must(tree.NodeInfo(p))
	if info.Parent != node || info.Length != 3 || info.PathLength != len(prompt) {
		t.Fatalf("%+v", info)
	}
	if must(c.SeqNode(a)) != p || must(c.Length(a)) != 0 || len(must(c.SeqTokens(a))) != 0 {
		t.Fatal("promoted sequence")
	}
	// a second sequence under the new node decodes as the promoted one
	d := must(c.Add(p, nil, false))
	rows := must(c.Decode([]Step{{a, []Token{50}}, {d, []Token{50}}}, false))
	assertClose(t, rows[0], rows[1], 1e-4)

	// move B under the new node: its logits stay, its unique part shrinks
	ok(t, c.Move(b, p))
	if must(c.SeqNode(b)) != p || must(c.Length(b)) != 2 || !equal(must(c.SeqTokens(b)), []Token{31, 32}) {
		t.Fatal("moved sequence")
	}
	assertClose(t, must(one(c, b, 40)), want, 1e-4)
	// a node that is not a prefix of the history
	other, _, err := tree.Append(Root, []Token{1, 2, 3}, false)
	ok(t, err)
	wantStatus(t, c.Move(b, other), StatusState)
	for _, n := range []NodeID{other, p, node} {
		ok(t, tree.Release(n))
	}
}

func TestKVBudget(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	tree := must(m.NewTree(nil))
	defer tree.Close()
	cp := DefaultCacheParams()
	cp.MaxSeqs, cp.MaxTokens = 2, 64
	c := must(tree.NewCache(&cp))
	defer c.Close()
	s := must(c.Add(Root, nil, false))
	used := tree.KVUsed()
	budget := used
	if budget == 0 {
		budget = 1
	}
	ok(t, tree.SetKVBudget(budget))
	_, _, err := tree.Append(Root, []Token{1, 2, 3}, false)
	wantStatus(t, err, StatusKVBudget)
	if ch := must(tree.Children(Root)); len(ch) != 0 {
		t.Fatal(ch)
	}
	var long []Token
	for i := 1; i <= 40; i++ {
		long = append(long, Token(i))
	}
	_, err = one(c, s, long...)
	wantStatus(t, err, StatusKVBudget)
	if l := must(c.Length(s)); l != 0 || tree.KVUsed() != used {
		t.Fatalf("length %d, used %d (was %d)", l, tree.KVUsed(), used)
	}
	ok(t, tree.SetKVBudget(0)) // no limit: the same calls succeed
	node, _, err := tree.Append(Root, []Token{1, 2, 3}, false)
	ok(t, err)
	must(one(c, s, long...))
	if tree.KVUsed() <= used {
		t.Fatal(tree.KVUsed(), used)
	}
	ok(t, tree.Release(node))
	// the budget as a tree parameter
	tight := must(m.NewTree(&TreeParams{KVType: KVF16, KVBudget: 1}))
	defer tight.Close()
	_, _, err = tight.Append(Root, []Token{1, 2, 3}, false)
	wantStatus(t, err, StatusKVBudget)
}

func TestAbort(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	tree := must(m.NewTree(nil))
	defer tree.Close()
	c := must(tree.NewCache(nil))
	defer c.Close()
	s := must(c.Add(Root, []Token{1, 2, 3}, false))
	calls := 0
	ok(t, tree.SetAbort(func() bool { calls++; return true }))
	_, err := one(c, s, 4)
	wantStatus(t, err, StatusStopped)
	if calls == 0 {
		t.Fatal("the abort callback was not called")
	}
	if l := must(c.Length(s)); l != 0 { // nothing changed, tokens still queued
		t.Fatal(l)
	}
	_, _, err = tree.Append(Root, []Token{5, 6}, false)
	wantStatus(t, err, StatusStopped)
	if ch := must(tree.Children(Root)); len(ch) != 0 {
		t.Fatal(ch)
	}

	// a panic in the callback stops the call and comes back out of it
	ok(t, tree.SetAbort(func() bool { panic("from the abort callback") }))
	func() {
		defer func() {
			if r := recover(); r != "from the abort callback" {
				t.Fatalf("recovered %v", r)
			}
		}()
		one(c, s, 4)
		t.Fatal("no panic")
	}()
	if l := must(c.Length(s)); l != 0 {
		t.Fatal(l)
	}

	n := calls
	ok(t, tree.SetAbort(func() bool { calls++; return false }))
	must(one(c, s, 4))
	if calls <= n {
		t.Fatal("the abort callback was not called")
	}
	ok(t, tree.SetAbort(nil))
	if l := must(c.Length(s)); l != 4 {
		t.Fatal(l)
	}
	must(one(c, s, 5))

	// the callback stays in effect for a cache that outlives its tree
	ok(t, tree.SetAbort(func() bool { return true }))
	ok(t, tree.Close())
	_, err = one(c, s, 6)
	wantStatus(t, err, StatusStopped)
}

func TestLog(t *testing.T) {
	defer catch(t)
	var mu sync.Mutex
	var got []string
	SetLog(func(level int, msg string) {
		mu.Lock()
		defer mu.Unlock()
		if level < LogInfo {
			t.Errorf("a message below the level: %d %q", level, msg)
		}
		got = append(got, msg)
	}, LogInfo)
	m := smallModel(t)
	SetLog(nil, LogInfo)
	ok(t, m.Close())
	mu.Lock()
	n := len(got)
	mu.Unlock()
	if n == 0 {
		t.Fatal("no log message for a model load")
	}
	smallModel(t).Close()
	if len(got) != n {
		t.Fatal("logged while off")
	}
}

func TestModelClosedFirst(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	tree := must(m.NewTree(&TreeParams{KVType: KVF32}))
	cp := DefaultCacheParams()
	cp.MaxSeqs, cp.MaxTokens = 2, 32
	c := must(tree.NewCache(&cp))
	s := must(c.Add(Root, []Token{1, 2, 3}, false))
	want := must(one(c, s, 4))
	ok(t, c.Truncate(s, 3))
	ok(t, m.Close()) // the tree and cache keep the model's memory alive
	node, _, err := tree.Append(Root, []Token{7, 8}, false)
	ok(t, err)
	assertClose(t, must(one(c, s, 4)), want, 1e-4)
	ok(t, tree.Close()) // the cache keeps the tree's nodes alive
	s2 := must(c.Add(node, []Token{9}, false))
	if rows := must(c.Decode([]Step{{s, []Token{5}}, {s2, nil}}, false)); len(rows) != 2 {
		t.Fatal(len(rows))
	}
	ok(t, c.Close())
}

func TestChatApply(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	found := false
	for _, n := range ChatTemplates() {
		found = found || n == "phi3"
	}
	if !found {
		t.Fatalf("phi3 not in %v", ChatTemplates())
	}
	conv := []ChatMessage{{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}}
	want := "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n" +
		"<|user|>\nBye<|end|>\n<|assistant|>\n"
	if got := must(m.ChatApply(conv, "phi3", true)); got != want {
		t.Fatalf("phi3: got %q, want %q", got, want)
	}
	if got := must(m.ChatApply(conv, "mistral", false)); got != "[INST] Hi[/INST] Hello.</s>[INST] Be brief.\n\nBye[/INST]" {
		t.Fatalf("mistral: got %q", got)
	}
	if got := must(m.ChatApply(nil, "chatml", true)); got != "<|im_start|>assistant\n" {
		t.Fatalf("chatml, no messages: got %q", got)
	}
	status := func(err error) int {
		if e, ok := err.(*Error); ok {
			return e.Status
		}
		return 0
	}
	// the random model has no template; unknown names are unsupported too
	if _, err := m.ChatApply(conv, "", true); status(err) != StatusUnsupported {
		t.Fatalf("model's template: %v", err)
	}
	if _, err := m.ChatTemplateName(); status(err) != StatusUnsupported {
		t.Fatalf("template name: %v", err)
	}
	if _, err := m.ChatApply(conv, "vicuna", true); status(err) != StatusUnsupported {
		t.Fatalf("unknown name: %v", err)
	}
	if _, err := m.ChatApply([]ChatMessage{{"user", "a"}, {"user", "b"}}, "gemma", true); status(err) != StatusInvalidArg {
		t.Fatalf("two user messages: %v", err)
	}
	if _, err := m.ChatApply([]ChatMessage{{"user", "a\x00b"}}, "chatml", true); status(err) != StatusInvalidArg {
		t.Fatalf("NUL: %v", err)
	}
}

func TestTokenizerRoundTrip(t *testing.T) {
	defer catch(t)
	vocab := filepath.Join(envOr("CLADE_VOCAB_DIR", "../../tests/data/vocab"), "ggml-vocab-llama-spm.gguf")
	if _, err := os.Stat(vocab); err != nil {
		t.Fatalf("no reference vocabulary at %s (set CLADE_VOCAB_DIR)", vocab)
	}
	m, err := LoadModel(randomModel(t, "spm.gguf", "--vocab-from", vocab), &ModelParams{NThreads: 1})
	ok(t, err)
	defer m.Close()
	sp := must(m.SpecialTokens())
	for _, text := range []string{"Hello world", "héllo, wörld! 日本語 🙂", "  two  spaces\nand a line", "x = f(y) + 42;"} {
		ids := must(m.Tokenize(text, true, false))
		if sp.AddBOS && ids[0] != sp.BOS {
			t.Fatalf("no BOS: %v", ids)
		}
		if got := must(m.Detokenize(ids, false)); got != text {
			t.Fatalf("%q -> %v -> %q", text, ids, got)
		}
		d := must(m.NewDetokenizer(false, true))
		var buf []byte
		for _, id := range ids {
			buf = append(buf, must(d.Push(id))...)
		}
		buf = append(buf, must(d.Flush())...)
		ok(t, d.Close())
		if string(buf) != text {
			t.Fatalf("stream %q, want %q", buf, text)
		}
	}
	if ids := must(m.Tokenize("", false, false)); len(ids) != 0 {
		t.Fatal(ids)
	}
	_, err = m.Tokenize("ok \xff\xfe", true, false)
	wantStatus(t, err, StatusUTF8)
	// a detokenizer keeps its model alive
	ids := must(m.Tokenize("Hello world", false, false))
	d := must(m.NewDetokenizer(false, true))
	ok(t, m.Close())
	var buf []byte
	for _, id := range ids {
		buf = append(buf, must(d.Push(id))...)
	}
	buf = append(buf, must(d.Flush())...)
	ok(t, d.Close())
	if string(buf) != "Hello world" {
		t.Fatalf("after the model's Close: %q", buf)
	}
}

// ---- batch append ----------------------------------------------------------------

// allNodes lists every live node below the root, through Children.
func allNodes(t *testing.T, tree *Tree) []NodeID {
	t.Helper()
	var out []NodeID
	todo := []NodeID{Root}
	for len(todo) > 0 {
		n := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		kids := must(tree.Children(n))
		out = append(out, kids...)
		todo = append(todo, kids...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// A at the root; B and C under A (item 0); two sequences of a cache under B
// (item 1); every item with logits.
var (
	batchA  = []Token{5, 17, 42, 99, 3, 250, 11}
	batchB  = []Token{64, 7, 123}
	batchC  = []Token{8, 1}
	batchS0 = []Token{21, 150, 9}
	batchS1 = []Token{299}
)

func f32Tree(t *testing.T, m *Model) *Tree {
	t.Helper()
	tree := must(m.NewTree(&TreeParams{KVType: KVF32}))
	t.Cleanup(func() { tree.Close() })
	return tree
}

func newCache(t *testing.T, tree *Tree, maxSeqs, maxTokens int) *Cache {
	t.Helper()
	p := DefaultCacheParams()
	p.MaxSeqs, p.MaxTokens = maxSeqs, maxTokens
	c := must(tree.NewCache(&p))
	t.Cleanup(func() { c.Close() })
	return c
}

func TestAppendBatch(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	tree := f32Tree(t, m)
	c := newCache(t, tree, 4, 64)
	got := must(tree.AppendBatch([]AppendItem{
		{Parent: Root, Tokens: batchA, WantLogits: true},
		{Parent: ItemNode(0), Tokens: batchB, WantLogits: true},
		{Parent: ItemNode(0), Tokens: batchC, WantLogits: true},
		{Parent: ItemNode(1), Tokens: batchS0, Cache: c, WantLogits: true},
		{Parent: ItemNode(1), Tokens: batchS1, Cache: c, WantLogits: true},
	}))
	if len(got) != 5 {
		t.Fatalf("%d results", len(got))
	}
	na, nb, nc := got[0].Node, got[1].Node, got[2].Node
	for _, r := range got[:3] {
		if r.Node <= 0 || r.Seq != -1 {
			t.Fatalf("node item gave %+v", r)
		}
	}
	if na == nb || nb == nc || na == nc {
		t.Fatal(na, nb, nc)
	}
	for _, x := range []struct {
		n, parent NodeID
		toks      []Token
		path      int
	}{{na, Root, batchA, 0}, {nb, na, batchB, len(batchA)}, {nc, na, batchC, len(batchA)}} {
		if toks := must(tree.NodeTokens(x.n)); !equal(toks, x.toks) {
			t.Fatalf("node %d tokens %v, want %v", x.n, toks, x.toks)
		}
		i := must(tree.NodeInfo(x.n))
		if i.Parent != x.parent || i.Length != len(x.toks) || i.PathLength != x.path {
			t.Fatalf("node %d: %+v", x.n, i)
		}
	}
	if ch := must(tree.Children(na)); !equalNodes(ch, []NodeID{nb, nc}) {
		t.Fatal(ch)
	}
	want3 := []NodeID{na, nb, nc}
	sort.Slice(want3, func(i, j int) bool { return want3[i] < want3[j] })
	if all := allNodes(t, tree); !equalNodes(all, want3) {
		t.Fatalf("nodes %v, want %v", all, want3)
	}
	s0, s1 := got[3].Seq, got[4].Seq
	for _, r := range got[3:] {
		if r.Node != -1 || r.Seq < 0 {
			t.Fatalf("sequence item gave %+v", r)
		}
	}
	if s0 == s1 {
		t.Fatal(s0)
	}
	for _, x := range []struct {
		s    SeqID
		toks []Token
	}{{s0, batchS0}, {s1, batchS1}} {
		if n := must(c.SeqNode(x.s)); n != nb {
			t.Fatalf("seq %d under %d, want %d", x.s, n, nb)
		}
		if toks := must(c.SeqTokens(x.s)); !equal(toks, x.toks) { // evaluated, not queued
			t.Fatalf("seq %d tokens %v", x.s, toks)
		}
	}
	for _, r := range got {
		if len(r.Logits) != 300 {
			t.Fatalf("%d logits", len(r.Logits))
		}
	}

	// the same, one item at a time with the single-item calls
	t1 := f32Tree(t, m)
	c1 := newCache(t, t1, 4, 64)
	a, la := must2(t1.Append(Root, batchA, true))
	b, lb := must2(t1.Append(a, batchB, true))
	_, lc := must2(t1.Append(a, batchC, true))
	want := [][]float32{la, lb, lc}
	var seqs1 []SeqID
	for _, toks := range [][]Token{batchS0, batchS1} {
		q := must(c1.Add(b, toks, false))
		want = append(want, must(one(c1, q)))
		seqs1 = append(seqs1, q)
	}
	for i := range got {
		assertClose(t, got[i].Logits, want[i], 1e-4)
	}
	// the batch's sequences go on as the one-at-a-time ones
	x := must(c.Decode([]Step{{s0, []Token{33}}, {s1, []Token{44}}}, false))
	y := must(c1.Decode([]Step{{seqs1[0], []Token{33}}, {seqs1[1], []Token{44}}}, false))
	if len(x) != 2 {
		t.Fatalf("%d rows", len(x))
	}
	for i := range x {
		assertClose(t, x[i], y[i], 1e-4)
	}
	for _, n := range []NodeID{na, nb, nc} {
		ok(t, tree.Release(n))
	}
}

func must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		panic(err)
	}
	return a, b
}

func TestAppendBatchAtomic(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	tree := f32Tree(t, m)
	c := newCache(t, tree, 4, 64)
	keep, _ := must2(tree.Append(Root, []Token{1, 2, 3}, false))
	before, used := allNodes(t, tree), tree.KVUsed()
	bad := Token(m.NVocab())
	for _, last := range []AppendItem{
		{Parent: ItemNode(1), Tokens: []Token{4, bad}, Cache: c, WantLogits: true},
		{Parent: ItemNode(0), Tokens: []Token{bad}},
	} {
		_, err := tree.AppendBatch([]AppendItem{
			{Parent: keep, Tokens: batchA, WantLogits: true},
			{Parent: ItemNode(0), Tokens: batchB},
			{Parent: ItemNode(1), Tokens: []Token{7, 8}, Cache: c, WantLogits: true},
			last,
		})
		wantStatus(t, err, StatusToken)
		if all := allNodes(t, tree); !equalNodes(all, before) {
			t.Fatalf("nodes %v after a failed batch, want %v", all, before)
		}
		if u := tree.KVUsed(); u != used {
			t.Fatalf("KV used %d, want %d", u, used)
		}
		if i := must(tree.NodeInfo(keep)); i.NChildren != 0 {
			t.Fatal(i)
		}
	}
	// parents that are no earlier node item
	for _, items := range [][]AppendItem{
		{{Parent: ItemNode(0), Tokens: []Token{1}}},
		{{Parent: keep, Tokens: []Token{1}}, {Parent: ItemNode(5), Tokens: []Token{2}}},
		{{Parent: keep, Tokens: []Token{1}, Cache: c}, {Parent: ItemNode(0), Tokens: []Token{2}}},
	} {
		if _, err := tree.AppendBatch(items); err == nil {
			t.Fatalf("%+v: no error", items)
		}
		if all := allNodes(t, tree); !equalNodes(all, before) {
			t.Fatal(all)
		}
	}
	// a cache of another tree, and a closed cache
	other := f32Tree(t, m)
	foreign := newCache(t, other, 2, 16)
	_, err := tree.AppendBatch([]AppendItem{{Parent: keep, Tokens: []Token{1}, Cache: foreign}})
	wantStatus(t, err, StatusInvalidArg)
	closed := newCache(t, tree, 1, 16)
	closed.Close()
	_, err = tree.AppendBatch([]AppendItem{{Parent: keep, Tokens: []Token{1}, Cache: closed}})
	wantStatus(t, err, StatusState)
	// the failed calls added no sequence: all four slots are free
	four := make([]AppendItem, 4)
	for i := range four {
		four[i] = AppendItem{Parent: keep, Tokens: []Token{9}, Cache: c}
	}
	got := must(tree.AppendBatch(four))
	seen := map[SeqID]bool{}
	for _, r := range got {
		seen[r.Seq] = true
	}
	if len(seen) != 4 {
		t.Fatal(got)
	}
	_, err = c.Add(keep, []Token{1}, false)
	wantStatus(t, err, StatusCacheFull)
	_, err = tree.AppendBatch([]AppendItem{{Parent: keep, Tokens: []Token{1}},
		{Parent: ItemNode(0), Tokens: []Token{2}, Cache: c}})
	wantStatus(t, err, StatusCacheFull)
	if all := allNodes(t, tree); !equalNodes(all, before) {
		t.Fatal(all)
	}
	ok(t, tree.Release(keep))
}

func TestAppendBatchEmpty(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	tree := must(m.NewTree(nil))
	defer tree.Close()
	if got := must(tree.AppendBatch(nil)); len(got) != 0 {
		t.Fatal(got)
	}
	if all := allNodes(t, tree); len(all) != 0 {
		t.Fatal(all)
	}
	// items without logits, an empty node item among them
	got := must(tree.AppendBatch([]AppendItem{{Parent: Root}, {Parent: ItemNode(0), Tokens: []Token{1, 2}}}))
	for _, r := range got {
		if r.Logits != nil || r.Seq != -1 {
			t.Fatalf("%+v", r)
		}
	}
	if i := must(tree.NodeInfo(got[1].Node)); i.Parent != got[0].Node {
		t.Fatal(i)
	}
	if i := must(tree.NodeInfo(got[0].Node)); i.Length != 0 {
		t.Fatal(i)
	}
}

func TestSamplerPenaltiesBiasLogprobsBatch(t *testing.T) {
	defer catch(t)
	ninf := float32(math.Inf(-1))
	row := []float32{1, 3, -2, 3, 0.5, 2, ninf, 2.5}
	// logit bias: token 2 lifted, token 1 banned; greedy
	bp := DefaultSamplerParams()
	bp.Temperature = 0
	bp.LogitBias = []LogitBias{{2, 10}, {1, ninf}}
	b := must(NewSampler(&bp))
	defer b.Close()
	if tok := must(b.Sample(0, row, nil)); tok != 2 {
		t.Fatalf("logit bias: %d", tok)
	}
	// frequency penalty over the history past a 1-token prompt: 3 loses 2
	fp := DefaultSamplerParams()
	fp.Temperature, fp.FrequencyPenalty, fp.PenalizePrompt = 0, 1, false
	f := must(NewSampler(&fp))
	defer f.Close()
	if r := must(f.SampleEx(0, row, []Token{1, 3, 3}, 1, 0)); r.Token != 1 {
		t.Fatalf("frequency penalty: %d", r.Token)
	}
	// log-probabilities against a direct log-softmax, no truncation
	mx, sum := math.Inf(-1), 0.0
	for _, v := range row {
		mx = math.Max(mx, float64(v))
	}
	for _, v := range row {
		sum += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(sum)
	sp := DefaultSamplerParams()
	sp.Temperature, sp.TopK, sp.TopP, sp.MinP, sp.Seed = 1, 0, 1, 0, 3
	s := must(NewSampler(&sp))
	defer s.Close()
	r := must(s.SampleEx(0, row, nil, 0, 3))
	if math.Abs(float64(r.Logprob)-(float64(row[r.Token])-lse)) > 1e-5 || len(r.Top) != 3 || r.Top[0].Token != 1 ||
		r.Top[1].Token != 3 || r.Top[2].Token != 7 {
		t.Fatalf("logprobs: %+v (log-sum-exp %g)", r, lse)
	}
	// a batch equals the same rows one by one
	pp := DefaultSamplerParams()
	pp.Temperature, pp.Seed, pp.PresencePenalty = 1, 8, 0.5
	a := must(NewSampler(&pp))
	defer a.Close()
	o := must(NewSampler(&pp))
	defer o.Close()
	rows := append(append([]float32{}, row...), row...)
	for i := range row {
		rows[len(row)+i] = row[len(row)-1-i]
	}
	streams := []uint64{4, 9}
	hist := [][]Token{{0, 1}, nil}
	for step := 0; step < 5; step++ {
		got := must(a.SampleBatch(rows, len(row), streams, hist, nil, 2))
		for i := range streams {
			want := must(o.SampleEx(streams[i], rows[i*len(row):(i+1)*len(row)], hist[i], 0, 2))
			if got[i].Token != want.Token || got[i].Logprob != want.Logprob || len(got[i].Top) != len(want.Top) {
				t.Fatalf("batch row %d: %+v, one by one %+v", i, got[i], want)
			}
		}
	}
	bad := DefaultSamplerParams()
	bad.LogitBias = []LogitBias{{-1, 1}}
	if _, err := NewSampler(&bad); err == nil {
		t.Fatal("a negative logit-bias token was accepted")
	}
}

// ---- generate (clade_generate) ---------------------------------------------

// spmModel is a random model with the reference SPM tokenizer (stop strings
// need text); the test is skipped without the vocabulary.
func spmModel(t *testing.T) *Model {
	t.Helper()
	vocab := filepath.Join(envOr("CLADE_VOCAB_DIR", "../../tests/data/vocab"), "ggml-vocab-llama-spm.gguf")
	if _, err := os.Stat(vocab); err != nil {
		t.Fatalf("no reference vocabulary at %s (set CLADE_VOCAB_DIR)", vocab)
	}
	m := must(LoadModel(randomModel(t, "spm.gguf", "--vocab-from", vocab), &ModelParams{NThreads: 1}))
	t.Cleanup(func() { m.Close() })
	return m
}

// genSetup: two prompts, the second under the first (one leaf); greedy, 2
// samples, 5 new tokens.
func genSetup(m *Model) ([]Token, []Token, []Prompt, GenerateParams) {
	a := must(m.Tokenize("Once upon a time", true, false))
	b := must(m.Tokenize(" there was", false, false))
	p := DefaultGenerateParams()
	p.MaxNewTokens, p.Samples, p.Sampler.Temperature = 5, 2, 0
	return a, b, []Prompt{RootPrompt(a), {Tokens: b, Parent: 0}}, p
}

func TestGenerateTreeGreedyMatchesSteps(t *testing.T) {
	defer catch(t)
	m := spmModel(t)
	a, b, prompts, params := genSetup(m)
	tree := f32Tree(t, m)
	res := must(tree.Generate(prompts, &params))
	if again := must(tree.Generate(prompts, &params)); !reflect.DeepEqual(res, again) {
		t.Fatalf("not deterministic: %+v vs %+v", res, again)
	}
	// by hand: the prompt nodes, then greedy decode steps
	na, _, err := tree.Append(Root, a, false)
	ok(t, err)
	nb, row, err := tree.Append(na, b, true)
	ok(t, err)
	cp := DefaultCacheParams()
	cp.KVType = KVF32
	c := must(tree.NewCache(&cp))
	s := must(c.Add(nb, nil, false))
	var want []Token
	for len(want) < 5 {
		tok := argmax(row)
		if m.IsEOG(tok) {
			break
		}
		want = append(want, tok)
		row = must(one(c, s, tok))
	}
	ok(t, c.Close())
	ok(t, tree.Release(nb))
	ok(t, tree.Release(na))
	if kids := must(tree.Children(Root)); len(kids) != 0 {
		t.Fatalf("generate left nodes: %v", kids)
	}
	wantFinish := FinishLength
	if len(want) < 5 {
		wantFinish = FinishStopToken
	}
	if len(res) != 2 {
		t.Fatalf("%d results", len(res))
	}
	for _, g := range res {
		if !equal(g.Tokens, want) || g.Prompt != 1 || g.Finish != wantFinish || g.Logprobs != nil {
			t.Fatalf("got %+v, want tokens %v, finish %d", g, want, wantFinish)
		}
	}
}

func TestGenerateStopStringAndStream(t *testing.T) {
	defer catch(t)
	m := spmModel(t)
	_, _, prompts, params := genSetup(m)
	tree := must(m.NewTree(nil))
	defer tree.Close()
	full := must(tree.Generate(prompts, &params))[0]
	runes := []rune(full.Text)
	if len(runes) < 4 {
		t.Fatalf("text too short: %+v", full)
	}
	stop := string(runes[2:4])
	params.StopStrings = []string{"\x01never", stop}
	for _, g := range must(tree.Generate(prompts, &params)) {
		if g.Text != full.Text[:strings.Index(full.Text, stop)] || g.Finish != FinishStopString ||
			!equal(g.Tokens, full.Tokens[:len(g.Tokens)]) {
			t.Fatalf("stop %q: got %+v from %+v", stop, g, full)
		}
	}
	// streaming: the pieces make the text, one final call per sequence
	params.StopStrings = nil
	params.MaxNewTokens, params.Logprobs = 8, true
	params.Sampler = DefaultSamplerParams()
	params.Sampler.Temperature, params.Sampler.Seed = 0.9, 3
	plain := must(tree.Generate(prompts, &params))
	texts, finals := make([]string, 2), make([]int, 2)
	streamed := must(tree.GenerateFunc(prompts, &params, func(seq int, tok Token, piece string) Flow {
		texts[seq] += piece
		if tok < 0 {
			finals[seq]++
		}
		return Continue
	}))
	if !reflect.DeepEqual(streamed, plain) || finals[0] != 1 || finals[1] != 1 {
		t.Fatalf("streamed %+v (finals %v), plain %+v", streamed, finals, plain)
	}
	for i, g := range plain {
		if texts[i] != g.Text || len(g.Logprobs) != len(g.Tokens) {
			t.Fatalf("sequence %d: pieces %q, result %+v", i, texts[i], g)
		}
		for _, lp := range g.Logprobs {
			if lp > 0 {
				t.Fatalf("logprob %g > 0", lp)
			}
		}
	}
	// the channel form
	st := tree.GenerateStream(prompts, &params)
	texts = make([]string, 2)
	for p := range st.Pieces {
		if p.Text == "" {
			t.Fatal("empty piece")
		}
		texts[p.Seq] += p.Text
	}
	got := must(st.Wait())
	if !reflect.DeepEqual(got, plain) || texts[0] != plain[0].Text || texts[1] != plain[1].Text {
		t.Fatalf("channel: %+v, pieces %q", got, texts)
	}
}

func TestGenerateCallbackStopsAndErrors(t *testing.T) {
	defer catch(t)
	m := spmModel(t)
	a, b, prompts, params := genSetup(m)
	params.IgnoreEOG = true
	tree := must(m.NewTree(nil))
	defer tree.Close()
	res := must(tree.GenerateFunc(prompts, &params, func(seq int, _ Token, _ string) Flow {
		if seq == 1 {
			return StopSeq
		}
		return Continue
	}))
	if res[1].Finish != FinishCallback || len(res[1].Tokens) != 1 || res[0].Finish != FinishLength ||
		len(res[0].Tokens) != 5 || res[1].Tokens[0] != res[0].Tokens[0] {
		t.Fatalf("stop one: %+v", res)
	}
	res = must(tree.GenerateFunc(prompts, &params, func(int, Token, string) Flow { return StopAll }))
	if res[0].Finish != FinishCallback || res[1].Finish != FinishCallback {
		t.Fatalf("stop all: %+v", res)
	}
	// stopping a stream early
	long := params
	long.MaxNewTokens = 50
	st := tree.GenerateStream(prompts, &long)
	<-st.Pieces
	st.Stop()
	res = must(st.Wait())
	if res[0].Finish != FinishCallback && res[1].Finish != FinishCallback {
		t.Fatalf("stream stop: %+v", res)
	}
	// a panic stops the call and is raised again after it
	calls := 0
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v", r)
			}
		}()
		tree.GenerateFunc(prompts, &long, func(int, Token, string) Flow {
			calls++
			if calls == 2 {
				panic("boom")
			}
			return Continue
		})
		t.Fatal("no panic")
	}()
	if calls >= 20 {
		t.Fatalf("%d calls after the panic", calls)
	}
	if kids := must(tree.Children(Root)); len(kids) != 0 {
		t.Fatalf("generate left nodes: %v", kids)
	}
	if len(must(tree.Generate(prompts, &params))) != 2 {
		t.Fatal("the tree no longer generates")
	}
	// errors are errors
	nv := Token(m.NVocab())
	_, err := tree.Generate([]Prompt{RootPrompt([]Token{1, nv + 3})}, &params)
	wantStatus(t, err, StatusToken)
	_, err = tree.Generate([]Prompt{RootPrompt(a), {Tokens: nil, Parent: 0}}, &params) // an empty leaf
	wantStatus(t, err, StatusInvalidArg)
	_, err = tree.Generate([]Prompt{RootPrompt(a), {Tokens: b, Parent: 1}}, &params) // not earlier
	wantStatus(t, err, StatusInvalidArg)
	zero := params
	zero.MaxNewTokens = 0
	_, err = tree.Generate(prompts, &zero)
	wantStatus(t, err, StatusInvalidArg)
	_, err = tree.GenerateStream([]Prompt{RootPrompt([]Token{nv + 1})}, &params).Wait()
	wantStatus(t, err, StatusToken)
	small := must(smallModel(t).NewTree(nil))
	defer small.Close()
	withStop := params
	withStop.StopStrings = []string{"x"}
	_, err = small.Generate([]Prompt{RootPrompt([]Token{1, 2})}, &withStop)
	wantStatus(t, err, StatusUnsupported) // no tokenizer: no stop strings
}

// ---- speculative decoding (clade_generate_speculative) ---------------------------

// specSetup: two leaves, two greedy samples each, 40 tokens, on the 300-token
// model (its greedy output soon repeats itself, so prompt lookup drafts).
func specSetup() ([][]Token, []Prompt, GenerateParams) {
	pr := [][]Token{{1, 5, 9, 5, 9, 5}, {7, 8, 9}}
	params := DefaultGenerateParams()
	params.MaxNewTokens, params.Samples, params.IgnoreEOG = 40, 2, true
	params.Sampler.Temperature = 0
	return pr, []Prompt{RootPrompt(pr[0]), RootPrompt(pr[1])}, params
}

func specParams(f func(*SpeculativeParams)) *SpeculativeParams {
	s := DefaultSpeculativeParams()
	f(&s)
	return &s
}

func specGenerate(t *testing.T, tree *Tree, prompts []Prompt, params GenerateParams,
	spec *SpeculativeParams) ([]Generation, GenerationStats, error) {
	t.Helper()
	params.Speculative = spec
	return tree.GenerateWithStats(prompts, &params, nil)
}

func checkSame(t *testing.T, want, got []Generation, st GenerationStats) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("speculative output differs:\n got %+v\nwant %+v", got, want)
	}
	var n uint64
	for _, g := range got {
		n += uint64(len(g.Tokens))
	}
	if st.Tokens != n || st.Accepted > st.Drafted || st.SpecSteps > st.Steps {
		t.Fatalf("stats %+v for %d tokens", st, n)
	}
}

func TestSpeculativeLookupAndDraftModel(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	_, prompts, params := specSetup()
	tree := f32Tree(t, m)
	want, plain, err := tree.GenerateWithStats(prompts, &params, nil)
	ok(t, err)
	if plain.Drafted != 0 || plain.Steps == 0 {
		t.Fatalf("plain stats %+v", plain)
	}
	if d := DefaultSpeculativeParams(); d.MaxDraft != 8 || !d.Adaptive || d.Lookup != 0 || d.TreeWidth != 1 {
		t.Fatalf("defaults %+v", d)
	}
	for _, adaptive := range []bool{true, false} {
		got, st, err := specGenerate(t, tree, prompts, params, specParams(func(s *SpeculativeParams) {
			s.Lookup, s.MaxDraft, s.Adaptive = 3, 4, adaptive
		}))
		ok(t, err)
		checkSame(t, want, got, st)
		if !adaptive && (st.Accepted == 0 || st.Steps >= st.Tokens/2 || st.DraftSteps != 0) {
			t.Fatalf("lookup stats %+v", st)
		}
	}
	// another random model of the same vocabulary as the draft model
	draft := must(LoadModel(randomModel(t, "small-draft.gguf", "--vocab", "300", "--layers", "1", "--seed", "11"),
		&ModelParams{NThreads: 1}))
	defer draft.Close()
	got, st, err := specGenerate(t, tree, prompts, params, specParams(func(s *SpeculativeParams) {
		s.DraftModel, s.MaxDraft, s.Adaptive = draft, 3, false
	}))
	ok(t, err)
	checkSame(t, want, got, st)
	if st.DraftSteps == 0 || st.Drafted == 0 {
		t.Fatalf("draft model stats %+v", st)
	}
	// the target as its own draft model: every draft token is accepted
	got, st, err = specGenerate(t, tree, prompts, params, specParams(func(s *SpeculativeParams) {
		s.DraftModel, s.Adaptive = m, false
	}))
	ok(t, err)
	checkSame(t, want, got, st)
	if st.Accepted != st.Drafted || st.Steps >= st.Tokens {
		t.Fatalf("self-draft stats %+v", st)
	}
	// Generate and GenerateStream take params.Speculative too
	params.Speculative = specParams(func(s *SpeculativeParams) { s.Lookup = 2 })
	checkSame(t, want, must(tree.Generate(prompts, &params)), st)
	stream := tree.GenerateStream(prompts, &params)
	got = must(stream.Wait())
	checkSame(t, want, got, stream.Stats())
	if kids := must(tree.Children(Root)); len(kids) != 0 {
		t.Fatalf("generate left nodes: %v", kids)
	}
}

func TestSpeculativeFuncDrafter(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	pr, prompts, params := specSetup()
	tree := f32Tree(t, m)
	want := must(tree.Generate(prompts, &params))
	// a fixed guess: (almost) never accepted, the output is the same
	seqs := map[uint64]bool{}
	got, st, err := specGenerate(t, tree, prompts, params, specParams(func(s *SpeculativeParams) {
		s.MaxDraft, s.Adaptive = 4, false
		s.Draft = func(seq uint64, history []Token, maxTokens int) []Token {
			seqs[seq] = true
			if maxTokens < 1 || maxTokens > 4 {
				panic(fmt.Sprintf("maxTokens %d", maxTokens))
			}
			return []Token{3, 4, 5, 6}[:maxTokens]
		}
	}))
	ok(t, err)
	checkSame(t, want, got, st)
	if len(seqs) != 4 || st.DraftSteps != 0 || st.Drafted == 0 {
		t.Fatalf("fixed drafter: seqs %v, stats %+v", seqs, st)
	}
	// an oracle: the plain output's continuation; all accepted
	oracle := specParams(func(s *SpeculativeParams) {
		s.Adaptive = false
		s.Draft = func(seq uint64, history []Token, maxTokens int) []Token {
			p := pr[seq/2]
			if !reflect.DeepEqual(history[:len(p)], p) {
				panic(fmt.Sprintf("sequence %d: history %v", seq, history))
			}
			out := want[seq].Tokens[len(history)-len(p):]
			if len(out) > maxTokens {
				out = out[:maxTokens]
			}
			return out
		}
	})
	got, st, err = specGenerate(t, tree, prompts, params, oracle)
	ok(t, err)
	checkSame(t, want, got, st)
	if st.Accepted == 0 || st.Accepted != st.Drafted || st.Steps >= st.Tokens/4 {
		t.Fatalf("oracle stats %+v", st)
	}
}

func TestSpeculativeDrafterErrors(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	_, prompts, params := specSetup()
	tree := f32Tree(t, m)
	want := must(tree.Generate(prompts, &params))
	usable := func() {
		t.Helper()
		if kids := must(tree.Children(Root)); len(kids) != 0 {
			t.Fatalf("generate left nodes: %v", kids)
		}
		got, st, err := specGenerate(t, tree, prompts, params, specParams(func(s *SpeculativeParams) { s.Lookup = 2 }))
		ok(t, err)
		checkSame(t, want, got, st)
	}
	nv := Token(m.NVocab())
	other := must(LoadModel(randomModel(t, "spec-vocab.gguf", "--vocab", "301"), &ModelParams{NThreads: 1}))
	defer other.Close()
	for i, c := range []struct {
		spec   *SpeculativeParams
		status int
	}{
		{specParams(func(s *SpeculativeParams) {
			s.Draft, s.Adaptive = func(uint64, []Token, int) []Token { return []Token{nv} }, false
		}), StatusToken},
		{specParams(func(s *SpeculativeParams) {
			s.Draft, s.Adaptive = func(uint64, []Token, int) []Token { return []Token{1, -5} }, false
		}), StatusToken},
		{specParams(func(s *SpeculativeParams) {
			s.Draft, s.Adaptive = func(_ uint64, _ []Token, max int) []Token { return make([]Token, max+1) }, false
		}), StatusInvalidArg},
		{specParams(func(s *SpeculativeParams) { s.Lookup, s.MaxDraft = 2, 0 }), StatusInvalidArg},
		{specParams(func(s *SpeculativeParams) { s.Lookup = 65 }), StatusInvalidArg},
		{specParams(func(s *SpeculativeParams) {}), StatusInvalidArg}, // no drafter
		{specParams(func(s *SpeculativeParams) { s.Lookup, s.DraftModel = 2, m }), StatusInvalidArg},
		{specParams(func(s *SpeculativeParams) { s.DraftModel = other }), StatusInvalidArg}, // another vocabulary
		{&SpeculativeParams{Lookup: 2}, StatusInvalidArg},                                   // MaxDraft 0
	} {
		_, _, err := specGenerate(t, tree, prompts, params, c.spec)
		if err == nil {
			t.Fatalf("case %d: no error", i)
		}
		wantStatus(t, err, c.status)
		usable()
	}
	closed := must(LoadModel(randomModel(t, "small-draft.gguf", "--vocab", "300", "--layers", "1", "--seed", "11"),
		&ModelParams{NThreads: 1}))
	closed.Close()
	_, _, err := specGenerate(t, tree, prompts, params, specParams(func(s *SpeculativeParams) { s.DraftModel = closed }))
	wantStatus(t, err, StatusState)
	// a panic stops the call and is raised again after it
	calls := 0
	func() {
		defer func() {
			if r := recover(); r != "drafter boom" {
				t.Fatalf("recovered %v", r)
			}
		}()
		specGenerate(t, tree, prompts, params, specParams(func(s *SpeculativeParams) {
			s.Adaptive = false // (adaptive may measure that drafting does not pay, and not call it)
			s.Draft = func(uint64, []Token, int) []Token {
				calls++
				if calls == 3 {
					panic("drafter boom")
				}
				return nil
			}
		}))
		t.Fatal("no panic")
	}()
	if calls != 3 {
		t.Fatalf("%d drafter calls", calls)
	}
	usable()
}

// ---- token trees (clade 1.2) ----------------------------------------------------------------

func TestSpeculativeTreeWidth(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	_, prompts, params := specSetup()
	tree := f32Tree(t, m)
	want := must(tree.Generate(prompts, &params))
	draft := must(LoadModel(randomModel(t, "small-draft.gguf", "--vocab", "300", "--layers", "1", "--seed", "11"),
		&ModelParams{NThreads: 1}))
	defer draft.Close()
	for _, adaptive := range []bool{true, false} {
		for _, width := range []int{2, 3} {
			// (the random draft model's drafts are hardly ever accepted)
			for i, set := range []func(s *SpeculativeParams){
				func(s *SpeculativeParams) { s.Lookup = 3 },
				func(s *SpeculativeParams) { s.DraftModel = m },
				func(s *SpeculativeParams) { s.DraftModel = draft },
			} {
				got, st, err := specGenerate(t, tree, prompts, params, specParams(func(s *SpeculativeParams) {
					set(s)
					s.MaxDraft, s.Adaptive, s.TreeWidth = 6, adaptive, width
				}))
				ok(t, err)
				checkSame(t, want, got, st)
				if i < 2 && !adaptive && st.Accepted == 0 {
					t.Fatalf("drafter %d, width %d: stats %+v", i, width, st)
				}
			}
		}
	}
	// TreeWidth 0 (a literal written for clade 1.1): chains
	got, st, err := specGenerate(t, tree, prompts, params, &SpeculativeParams{Lookup: 3, MaxDraft: 8})
	ok(t, err)
	checkSame(t, want, got, st)
	if kids := must(tree.Children(Root)); len(kids) != 0 {
		t.Fatalf("generate left nodes: %v", kids)
	}
}

func TestSpeculativeTreeDrafter(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	pr, prompts, params := specSetup()
	tree := f32Tree(t, m)
	want := must(tree.Generate(prompts, &params))
	nv := Token(m.NVocab())
	for _, width := range []int{2, 8} {
		// a wrong token, then the right one beside it (two siblings under
		// the pending token) and the right chain under that
		trees := uint64(0)
		got, st, err := specGenerate(t, tree, prompts, params, specParams(func(s *SpeculativeParams) {
			s.Adaptive, s.TreeWidth = false, width
			s.DraftTree = func(seq uint64, history []Token, maxTokens int) ([]Token, []int32) {
				right := want[seq].Tokens[len(history)-len(pr[seq/2]):]
				if len(right) > maxTokens-1 {
					right = right[:maxTokens-1]
				}
				if len(right) == 0 {
					return nil, nil
				}
				trees++
				tokens, parents := []Token{(right[0] + 1) % nv}, []int32{-1}
				for j, x := range right {
					tokens, parents = append(tokens, x), append(parents, int32(j))
				}
				parents[1] = -1
				return tokens, parents
			}
		}))
		ok(t, err)
		checkSame(t, want, got, st)
		// every node but the wrong sibling accepted
		if st.Accepted == 0 || st.Steps >= st.Tokens/4 || st.Drafted-st.Accepted != trees {
			t.Fatalf("width %d: %d trees, stats %+v", width, trees, st)
		}
	}
	// a fixed tree; a chain as parents or nil with TreeWidth 1
	for i, c := range []struct {
		tokens  []Token
		parents []int32
		width   int
	}{{[]Token{3, 4, 5, 6}, []int32{-1, -1, 0, 1}, 2}, {[]Token{3, 4}, []int32{-1, 0}, 1}, {[]Token{3, 4}, nil, 1}} {
		got, st, err := specGenerate(t, tree, prompts, params, specParams(func(s *SpeculativeParams) {
			s.Adaptive, s.TreeWidth = false, c.width
			s.DraftTree = func(_ uint64, _ []Token, maxTokens int) ([]Token, []int32) {
				if maxTokens < len(c.tokens) {
					return nil, nil
				}
				return c.tokens, c.parents
			}
		}))
		ok(t, err)
		checkSame(t, want, got, st)
		if st.Drafted == 0 {
			t.Fatalf("case %d: stats %+v", i, st)
		}
	}
	if kids := must(tree.Children(Root)); len(kids) != 0 {
		t.Fatalf("generate left nodes: %v", kids)
	}
}

func TestSpeculativeTreeDrafterErrors(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	_, prompts, params := specSetup()
	tree := f32Tree(t, m)
	want := must(tree.Generate(prompts, &params))
	for i, c := range []struct {
		tokens  []Token
		parents []int32
		width   int
	}{
		{[]Token{3, 4}, []int32{0, -1}, 2}, // a parent not before its child
		{[]Token{3, 4}, []int32{-1, 7}, 2},
		{[]Token{3, 4}, []int32{-1, -2}, 2},
		{[]Token{3, 4, 5}, []int32{-1, -1, -1}, 2}, // too many children
		{[]Token{3, 4}, []int32{-1, -1}, 1},        // a tree with TreeWidth 1
		{[]Token{3, 4}, []int32{-1}, 2},            // one parent per token
	} {
		_, _, err := specGenerate(t, tree, prompts, params, specParams(func(s *SpeculativeParams) {
			s.Adaptive, s.TreeWidth = false, c.width
			s.DraftTree = func(uint64, []Token, int) ([]Token, []int32) { return c.tokens, c.parents }
		}))
		if err == nil {
			t.Fatalf("case %d: no error", i)
		}
		wantStatus(t, err, StatusInvalidArg)
		if kids := must(tree.Children(Root)); len(kids) != 0 {
			t.Fatalf("case %d: generate left nodes: %v", i, kids)
		}
	}
	for _, set := range []func(s *SpeculativeParams){
		func(s *SpeculativeParams) { s.Lookup, s.TreeWidth = 2, 9 },
		func(s *SpeculativeParams) { s.Lookup, s.TreeWidth = 2, -1 },
		func(s *SpeculativeParams) {
			s.Draft = func(uint64, []Token, int) []Token { return nil }
			s.DraftTree = func(uint64, []Token, int) ([]Token, []int32) { return nil, nil }
		},
	} {
		_, _, err := specGenerate(t, tree, prompts, params, specParams(set))
		wantStatus(t, err, StatusInvalidArg)
	}
	got, st, err := specGenerate(t, tree, prompts, params, specParams(func(s *SpeculativeParams) {
		s.Lookup, s.TreeWidth = 2, 2
	}))
	ok(t, err)
	checkSame(t, want, got, st)
}

// ---- prefix reuse and saved sessions (clade 1.3) ----

func TestPrefixReuseAndSessions(t *testing.T) {
	defer catch(t)
	m := smallModel(t)
	doc := make([]Token, 40)
	for i := range doc {
		doc[i] = Token((7*i + 3) % 300)
	}
	tree := must(m.NewTree(&TreeParams{KVType: KVF32, Flags: TreePrefixCache}))
	defer tree.Close()
	first := append(append([]Token{}, doc...), 5, 6)
	a, reused, _, err := tree.AppendPrefix(first)
	if err != nil || reused != 0 {
		t.Fatalf("first prompt: reused %d, %v", reused, err)
	}
	// another ending after 30 tokens: a split, 30 reused, a fresh tree's logits
	second := append(append([]Token{}, doc[:30]...), 9)
	b, reused, got, err := tree.AppendPrefix(second)
	if err != nil || reused != 30 {
		t.Fatalf("second prompt: reused %d, %v", reused, err)
	}
	_, want, _ := f32Tree(t, m).Append(0, second, true)
	assertClose(t, got, want, 1e-4)
	ok(t, tree.Release(b))
	if freed, err := tree.Trim(0); err != nil || freed == 0 {
		t.Fatalf("trim: %d, %v", freed, err)
	}
	path := filepath.Join(t.TempDir(), "s.clade")
	ok(t, tree.Save(a, path))
	// loaded into another tree, the next step equals a fresh evaluation
	t2 := f32Tree(t, m)
	node, n, reused, err := t2.Load(path)
	if err != nil || n != 42 || reused != 0 {
		t.Fatalf("load: %d tokens, %d reused, %v", n, reused, err)
	}
	c := newCache(t, t2, 2, 16)
	s := must(c.Add(node, nil, false))
	rows := must(c.Decode([]Step{{s, []Token{11}}}, false))
	_, want, _ = f32Tree(t, m).Append(0, append(append([]Token{}, first...), 11), true)
	assertClose(t, rows[0], want, 1e-4)
	// an F16 tree refuses the F32 file; a missing file is StatusIO
	t16 := must(m.NewTree(nil))
	defer t16.Close()
	_, _, _, err = t16.Load(path)
	wantStatus(t, err, StatusMismatch)
	_, _, _, err = t16.Load(path + ".missing")
	wantStatus(t, err, StatusIO)
}
