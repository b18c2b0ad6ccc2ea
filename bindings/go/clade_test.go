package clade

// Tests of the Go bindings: `go test` in bindings/go.
//
// Environment:
//   CLADE_TEST_MODEL  a GGUF model with a 300-token vocabulary to use as is
//   CLADE_CLI         the clade tool used to write random models otherwise
//                     (default: ../../build/examples/clade)
//   CLADE_VOCAB_DIR   reference vocabularies (default: ../../../shared/data/vocab);
//                     the tokenizer test is skipped without them
//   CGO_LDFLAGS       "-L/dir -Wl,-rpath,/dir" to test a libclade.so other than ../../build's

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
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
	cli := envOr("CLADE_CLI", "../../build/examples/clade")
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
	if Version() != "0.1.0" || VersionNumber() != 100 {
		t.Fatalf("version %s %d", Version(), VersionNumber())
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
	// a tree with an open cache refuses to close; a closed handle errs
	wantStatus(t, tree.Close(), StatusState)
	wantStatus(t, m.Close(), StatusState)
	ok(t, c.Close())
	ok(t, tree.Close())
	_, _, err = tree.Append(Root, []Token{1}, false)
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
		_ = c // dropped without Close: the finalizers free cache, then tree
	}
	for i := 0; i < 5; i++ {
		runtime.GC()
	}
}

func TestTokenizerRoundTrip(t *testing.T) {
	defer catch(t)
	vocab := filepath.Join(envOr("CLADE_VOCAB_DIR", "../../../shared/data/vocab"), "ggml-vocab-llama-spm.gguf")
	if _, err := os.Stat(vocab); err != nil {
		t.Skipf("no reference vocabulary at %s (set CLADE_VOCAB_DIR)", vocab)
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
}
