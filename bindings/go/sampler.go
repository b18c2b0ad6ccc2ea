// Sampler (clade_sampler_*): token sampling from logits, one stream or
// a batch, with results and log-probabilities.

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
