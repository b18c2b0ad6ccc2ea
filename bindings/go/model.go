// Model (clade_model_*): loading, information, tokenizing, detokenizing,
// chat templates; the streaming Detokenizer.

package clade

/*
#include <stdlib.h>
#include <clade/clade.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// ---- model -------------------------------------------------------------------

// ModelParams are the loading options (clade_model_params).
type ModelParams struct {
	Backend   int
	NThreads  int // 0: all cores
	VocabOnly bool
	NoMmap    bool
}

// ModelInfo is clade_model_info.
type ModelInfo struct {
	Architecture  string
	Name          string
	NLayers       int
	NEmbd         int
	NHeads        int
	NKVHeads      int
	HeadDim       int
	NFF           int
	NVocab        int
	NCtx          int
	RopeFreqBase  float32
	RopeFreqScale float32
	RopeScaling   int
	NormEps       float32
	WeightType    int
	HasQKVBias    bool
	TiedOutput    bool
	VocabOnly     bool
	NParams       uint64
	WeightBytes   uint64
}

// SpecialTokens: -1 where the model has none.
type SpecialTokens struct {
	BOS, EOS, EOT, PAD, UNK Token
	AddBOS, AddEOS          bool
}

// Model is a loaded model; safe to use from many goroutines at once.
type Model struct {
	p      *C.clade_model
	nVocab int
	mu     sync.Mutex
}

// LoadModel loads a GGUF file; params may be nil for the defaults.
func LoadModel(path string, params *ModelParams) (*Model, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var p C.clade_model_params
	C.clade_model_params_init(&p)
	if params != nil {
		p.backend = C.clade_backend(params.Backend)
		p.n_threads = C.int32_t(params.NThreads)
		if params.VocabOnly {
			p.vocab_only = 1
		}
		if params.NoMmap {
			p.use_mmap = 0
		}
	}
	var out *C.clade_model
	if err := check(func() C.clade_status { return C.clade_model_load(cpath, &p, &out) }); err != nil {
		return nil, err
	}
	m := &Model{p: out}
	runtime.SetFinalizer(m, (*Model).Close)
	info, err := m.Info()
	if err != nil {
		m.Close()
		return nil, err
	}
	m.nVocab = info.NVocab
	return m, nil
}

// Close gives up the model handle. Its memory goes once the trees and
// detokenizers made from it are closed too (they keep working until then).
// Closing twice is a no-op.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p == nil {
		return nil
	}
	C.clade_model_free(m.p)
	m.p = nil
	runtime.SetFinalizer(m, nil)
	return nil
}

func (m *Model) ptr() (*C.clade_model, error) {
	if m == nil || m.p == nil {
		return nil, closedErr("model")
	}
	return m.p, nil
}

// NVocab is the vocabulary size.
func (m *Model) NVocab() int { return m.nVocab }

// Info describes the model.
func (m *Model) Info() (ModelInfo, error) {
	p, err := m.ptr()
	if err != nil {
		return ModelInfo{}, err
	}
	var i C.clade_model_info
	i.size = C.size_t(unsafe.Sizeof(i))
	if err := check(func() C.clade_status { return C.clade_model_describe(p, &i) }); err != nil {
		return ModelInfo{}, err
	}
	runtime.KeepAlive(m)
	return ModelInfo{
		Architecture:  C.GoString(&i.architecture[0]),
		Name:          C.GoString(&i.name[0]),
		NLayers:       int(i.n_layers),
		NEmbd:         int(i.n_embd),
		NHeads:        int(i.n_heads),
		NKVHeads:      int(i.n_kv_heads),
		HeadDim:       int(i.head_dim),
		NFF:           int(i.n_ff),
		NVocab:        int(i.n_vocab),
		NCtx:          int(i.n_ctx),
		RopeFreqBase:  float32(i.rope_freq_base),
		RopeFreqScale: float32(i.rope_freq_scale),
		RopeScaling:   int(i.rope_scaling),
		NormEps:       float32(i.norm_eps),
		WeightType:    int(i.weight_type),
		HasQKVBias:    i.has_qkv_bias != 0,
		TiedOutput:    i.tied_output != 0,
		VocabOnly:     i.vocab_only != 0,
		NParams:       uint64(i.n_params),
		WeightBytes:   uint64(i.weight_bytes),
	}, nil
}

// SpecialTokens gives the BOS/EOS/... tokens.
func (m *Model) SpecialTokens() (SpecialTokens, error) {
	p, err := m.ptr()
	if err != nil {
		return SpecialTokens{}, err
	}
	var s C.clade_special_tokens
	s.size = C.size_t(unsafe.Sizeof(s))
	if err := check(func() C.clade_status { return C.clade_model_special_tokens(p, &s) }); err != nil {
		return SpecialTokens{}, err
	}
	runtime.KeepAlive(m)
	return SpecialTokens{BOS: Token(s.bos), EOS: Token(s.eos), EOT: Token(s.eot), PAD: Token(s.pad),
		UNK: Token(s.unk), AddBOS: s.add_bos != 0, AddEOS: s.add_eos != 0}, nil
}

// IsEOG reports whether a token ends a generation.
func (m *Model) IsEOG(t Token) bool {
	p, err := m.ptr()
	if err != nil {
		return false
	}
	r := C.clade_token_is_eog(p, C.clade_token(t)) != 0
	runtime.KeepAlive(m)
	return r
}

// Tokenize encodes text (which must be valid UTF-8).
func (m *Model) Tokenize(text string, addSpecial, parseSpecial bool) ([]Token, error) {
	p, err := m.ptr()
	if err != nil {
		return nil, err
	}
	var flags C.uint32_t
	if addSpecial {
		flags |= C.CLADE_TOKENIZE_ADD_SPECIAL
	}
	if parseSpecial {
		flags |= C.CLADE_TOKENIZE_PARSE_SPECIAL
	}
	ctext := C.CString(text)
	defer C.free(unsafe.Pointer(ctext))
	buf := make([]Token, len(text)+8)
	for {
		var n C.size_t
		st, err := call(true, func() C.clade_status {
			return C.clade_tokenize(p, ctext, C.size_t(len(text)), flags, tokPtr(buf), C.size_t(len(buf)), &n)
		})
		if err != nil {
			return nil, err
		}
		if st == StatusOK {
			runtime.KeepAlive(m)
			return buf[:n], nil
		}
		buf = make([]Token, int(n))
	}
}

// DetokenizeBytes decodes tokens into bytes.
func (m *Model) DetokenizeBytes(tokens []Token, special bool) ([]byte, error) {
	p, err := m.ptr()
	if err != nil {
		return nil, err
	}
	var sp C.int32_t
	if special {
		sp = 1
	}
	buf := make([]byte, 16*len(tokens)+16)
	for {
		var n C.size_t
		st, err := call(true, func() C.clade_status {
			return C.clade_detokenize(p, tokPtr(tokens), C.size_t(len(tokens)), sp,
				(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n)
		})
		if err != nil {
			return nil, err
		}
		if st == StatusOK {
			runtime.KeepAlive(m)
			return buf[:n], nil
		}
		buf = make([]byte, int(n)+1)
	}
}

// Detokenize decodes tokens into text.
func (m *Model) Detokenize(tokens []Token, special bool) (string, error) {
	b, err := m.DetokenizeBytes(tokens, special)
	return string(b), err
}

// ChatMessage is one message of a conversation for Model.ChatApply: Role
// ("system", "user", "assistant", ...) and Content.
type ChatMessage struct {
	Role    string
	Content string
}

// ChatTemplates lists the names of the chat templates clade formats
// (clade_chat_template_list).
func ChatTemplates() []string {
	n := int(C.clade_chat_template_list(nil, 0))
	if n == 0 {
		return nil
	}
	arr := (*[1 << 16]*C.char)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	defer C.free(unsafe.Pointer(arr))
	C.clade_chat_template_list(&arr[0], C.size_t(n))
	names := make([]string, n)
	for i := range names {
		names[i] = C.GoString(arr[i])
	}
	return names
}

// ChatApply formats a conversation with a chat template
// (clade_chat_apply): template is a name of ChatTemplates(), or "" for the
// model's own (StatusUnsupported when it has none or it is not
// recognized). The text has no leading BOS: tokenize it with addSpecial
// and parseSpecial set.
func (m *Model) ChatApply(messages []ChatMessage, template string, addAssistantPrompt bool) (string, error) {
	p, err := m.ptr()
	if err != nil {
		return "", err
	}
	n := len(messages)
	size := 256
	for i, msg := range messages {
		if strings.IndexByte(msg.Role, 0) >= 0 || strings.IndexByte(msg.Content, 0) >= 0 {
			return "", &Error{Status: StatusInvalidArg, Msg: fmt.Sprintf("messages[%d] contains a NUL byte", i)}
		}
		size += len(msg.Role) + len(msg.Content)
	}
	if strings.IndexByte(template, 0) >= 0 {
		return "", &Error{Status: StatusInvalidArg, Msg: "template contains a NUL byte"}
	}
	// The array and its strings live in C memory (no Go pointer reaches C).
	var msgs *[1 << 24]C.clade_chat_message
	if n > 0 {
		msgs = (*[1 << 24]C.clade_chat_message)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(C.clade_chat_message{}))))
		defer C.free(unsafe.Pointer(msgs))
		for i, msg := range messages {
			msgs[i].role = C.CString(msg.Role)
			msgs[i].content = C.CString(msg.Content)
			defer C.free(unsafe.Pointer(msgs[i].role))
			defer C.free(unsafe.Pointer(msgs[i].content))
		}
	}
	var first *C.clade_chat_message
	if n > 0 {
		first = &msgs[0]
	}
	var name *C.char
	if template != "" {
		name = C.CString(template)
		defer C.free(unsafe.Pointer(name))
	}
	var add C.int32_t
	if addAssistantPrompt {
		add = 1
	}
	buf := make([]byte, size)
	for {
		var got C.size_t
		st, err := call(true, func() C.clade_status {
			return C.clade_chat_apply(p, name, first, C.size_t(n), add,
				(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &got)
		})
		if err != nil {
			return "", err
		}
		if st == StatusOK {
			runtime.KeepAlive(m)
			return string(buf[:got]), nil
		}
		buf = make([]byte, int(got)+1)
	}
}

// ChatTemplateName gives the family recognized from the model's chat
// template (a name of ChatTemplates()); StatusUnsupported when none is.
func (m *Model) ChatTemplateName() (string, error) {
	p, err := m.ptr()
	if err != nil {
		return "", err
	}
	var name *C.char
	if err := check(func() C.clade_status { return C.clade_chat_template_name(p, &name) }); err != nil {
		return "", err
	}
	runtime.KeepAlive(m)
	return C.GoString(name), nil
}

// TokenToPiece gives the bytes of one token.
func (m *Model) TokenToPiece(t Token, special bool) ([]byte, error) {
	p, err := m.ptr()
	if err != nil {
		return nil, err
	}
	var sp C.int32_t
	if special {
		sp = 1
	}
	buf := make([]byte, 64)
	for {
		var n C.size_t
		st, err := call(true, func() C.clade_status {
			return C.clade_token_to_piece(p, C.clade_token(t), sp, (*C.char)(unsafe.Pointer(&buf[0])),
				C.size_t(len(buf)), &n)
		})
		if err != nil {
			return nil, err
		}
		if st == StatusOK {
			runtime.KeepAlive(m)
			return buf[:n], nil
		}
		buf = make([]byte, int(n)+1)
	}
}

// ---- streaming detokenizer -----------------------------------------------------

// Detokenizer turns a stream of tokens into complete UTF-8 pieces. It keeps
// the model's memory alive: the Model may be closed first.
type Detokenizer struct {
	p  *C.clade_detokenizer
	mu sync.Mutex
}

// NewDetokenizer makes a streaming detokenizer (see clade_detokenizer_create).
func (m *Model) NewDetokenizer(special, firstInText bool) (*Detokenizer, error) {
	p, err := m.ptr()
	if err != nil {
		return nil, err
	}
	var sp, fi C.int32_t
	if special {
		sp = 1
	}
	if firstInText {
		fi = 1
	}
	var out *C.clade_detokenizer
	if err := check(func() C.clade_status { return C.clade_detokenizer_create(p, sp, fi, &out) }); err != nil {
		return nil, err
	}
	d := &Detokenizer{p: out}
	runtime.SetFinalizer(d, (*Detokenizer).Close)
	return d, nil
}

func (d *Detokenizer) run(f func(text **C.char, n *C.size_t) C.clade_status) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.p == nil {
		return nil, closedErr("detokenizer")
	}
	var text *C.char
	var n C.size_t
	if err := check(func() C.clade_status { return f(&text, &n) }); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	return C.GoBytes(unsafe.Pointer(text), C.int(n)), nil
}

// Push feeds one token and returns the bytes now complete.
func (d *Detokenizer) Push(t Token) ([]byte, error) {
	return d.run(func(text **C.char, n *C.size_t) C.clade_status {
		return C.clade_detokenizer_push(d.p, C.clade_token(t), text, n)
	})
}

// Flush returns whatever is left.
func (d *Detokenizer) Flush() ([]byte, error) {
	return d.run(func(text **C.char, n *C.size_t) C.clade_status {
		return C.clade_detokenizer_flush(d.p, text, n)
	})
}

// Close frees the detokenizer. Closing twice is a no-op.
func (d *Detokenizer) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.p != nil {
		C.clade_detokenizer_free(d.p)
		d.p = nil
		runtime.SetFinalizer(d, nil)
	}
	return nil
}
