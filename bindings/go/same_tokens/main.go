// Command same_tokens is the Go program of the cross-language check
// (tests/bindings_same_tokens.sh): it loads the model os.Args[1], makes a
// tree and generates greedily (Tree.Generate, clade_generate) from three
// prompts (1..24; [30 31 32] and [40 41] under it), 32 new tokens each with
// end-of-generation ignored, printing each sequence's tokens on a line,
// separated by single spaces.
//
// In bindings/go: go run -tags clade_checkout ./same_tokens MODEL
package main

import (
	"fmt"
	"os"
	"strings"

	"clade.dev/clade"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: same_tokens MODEL")
		os.Exit(2)
	}
	m, err := clade.LoadModel(os.Args[1], nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "same_tokens:", err)
		os.Exit(1)
	}
	defer m.Close()
	tree, err := m.NewTree(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "same_tokens:", err)
		os.Exit(1)
	}
	defer tree.Close()
	p0 := make([]clade.Token, 24)
	for i := range p0 {
		p0[i] = clade.Token(i + 1)
	}
	prompts := []clade.Prompt{clade.RootPrompt(p0), {Tokens: []clade.Token{30, 31, 32}, Parent: 0},
		{Tokens: []clade.Token{40, 41}, Parent: 0}}
	params := clade.DefaultGenerateParams()
	params.MaxNewTokens, params.IgnoreEOG = 32, true
	params.Sampler.Temperature = 0
	results, err := tree.Generate(prompts, &params)
	if err != nil {
		fmt.Fprintln(os.Stderr, "same_tokens:", err)
		os.Exit(1)
	}
	for _, g := range results {
		words := make([]string, len(g.Tokens))
		for i, t := range g.Tokens {
			words[i] = fmt.Sprint(t)
		}
		fmt.Println(strings.Join(words, " "))
	}
}
