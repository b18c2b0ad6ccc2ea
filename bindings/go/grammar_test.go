// Structured output through the Go binding (clade 1.5): a JSON Schema's
// outputs parse and hold the required keys; a bad schema's error names the
// keyword.

package clade

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestGrammarSchema(t *testing.T) {
	m := spmModel(t)
	schema := `{"type":"object","properties":{"name":{"type":"string","maxLength":8},` +
		`"n":{"type":"integer","minimum":1,"maximum":9}},"required":["name","n"],"additionalProperties":false}`
	gp := DefaultGrammarParams()
	gp.Kind = GrammarJSONSchema
	g, err := NewGrammar(m, schema, &gp)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	tree := must(m.NewTree(nil))
	defer tree.Close()
	prompt := must(m.Tokenize("A record:", true, false))
	p := DefaultGenerateParams()
	p.MaxNewTokens, p.Samples, p.Sampler.Temperature, p.Sampler.Seed = 120, 6, 0.9, 4
	p.Grammars = []*Grammar{g}
	res, err := tree.Generate([]Prompt{RootPrompt(prompt)}, &p)
	if err != nil {
		t.Fatal(err)
	}
	finished := 0
	for _, r := range res {
		if r.Finish != FinishStopToken {
			continue
		}
		finished++
		var v map[string]interface{}
		if err := json.Unmarshal([]byte(r.Text), &v); err != nil {
			t.Errorf("not JSON: %q: %v", r.Text, err)
			continue
		}
		if _, ok := v["name"]; !ok || len(v) != 2 {
			t.Errorf("keys: %q", r.Text)
		}
	}
	if finished == 0 {
		t.Errorf("no output finished")
	}

	gp.Kind = GrammarJSONSchema
	if _, err := NewGrammar(m, `{"type":"array","uniqueItems":true}`, &gp); err == nil ||
		!strings.Contains(err.Error(), "uniqueItems") {
		t.Errorf("bad schema: %v", err)
	}
	gp.Kind = GrammarRegex
	r, err := NewGrammar(m, "(yes|no)", &gp)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p.Grammars = []*Grammar{r}
	p.Samples = 2
	res, err = tree.Generate([]Prompt{RootPrompt(prompt)}, &p)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res {
		if x.Text != "yes" && x.Text != "no" {
			t.Errorf("regex: %q", x.Text)
		}
	}
}
