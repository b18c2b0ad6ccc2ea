#!/bin/bash
# examples/simple.c, the README's C example, run on a small random model:
# nine lines of four tokens (the first drawn from the prompt node's logits,
# then one per decode step), inside the vocabulary, the four sequences'
# first tokens not all alike (four sampler streams), and the same output
# twice (a fixed seed).
# usage: tests/simple.sh CLADE_CLI SIMPLE
set -uo pipefail
clade=$1 simple=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$clade" model random -o "$tmp/m.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 --vocab 500 > /dev/null ||
  { echo "FAIL: model random"; exit 1; }
out=$("$simple" "$tmp/m.gguf") || { echo "FAIL: simple exited $?: $out"; exit 1; }
echo "$out"
[ "$(wc -l <<< "$out")" -eq 9 ] || { echo "FAIL: expected 9 lines"; exit 1; }
awk 'NF != 4 { exit 1 } { for (i = 1; i <= 4; i++) if ($i !~ /^[0-9]+$/ || $i >= 500) exit 1 }' <<< "$out" ||
  { echo "FAIL: a line is not four tokens in [0, 500)"; exit 1; }
first=$(head -1 <<< "$out" | tr ' ' '\n' | sort -u | wc -l)
[ "$first" -gt 1 ] || { echo "FAIL: the four first tokens are all alike"; exit 1; }
[ "$("$simple" "$tmp/m.gguf")" == "$out" ] || { echo "FAIL: a second run differs"; exit 1; }
echo "simple: ok"
