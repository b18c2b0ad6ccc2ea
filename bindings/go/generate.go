// Generation in one call (clade_generate, clade_generate_speculative):
// prompts, parameters, speculative drafters, streaming by callback or
// channel; and the simple Generate over Tree, Cache and Sampler.

package clade

/*
#include <stdlib.h>
#include <clade/clade.h>

// Exported from callbacks.go.
extern int32_t cladeGoGenerate(uintptr_t handle, size_t seq, int32_t token, char *text, size_t len);
extern int32_t cladeGoDraft(uintptr_t handle, clade_draft_request *requests, size_t n_requests);

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
	// Grammars (clade 1.5): Grammars[i] constrains the sequences under
	// prompt i (nil or missing: unconstrained). Keep them open during the
	// call.
	Grammars []*Grammar
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
	if len(gp.Grammars) > 0 {
		ga, ng, err := grammarArray(gp.Grammars, alloc)
		if err != nil {
			return nil, stats, err
		}
		p.grammars, p.n_grammars = (**C.clade_grammar)(unsafe.Pointer(ga)), ng
		defer runtime.KeepAlive(gp.Grammars)
	}
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
