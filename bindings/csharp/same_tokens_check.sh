#!/bin/bash
# Runs same_tokens.exe (the cross-language check) on a small random model
# written by the CLI and checks its output's shape: two lines of 32 token
# ids, the same on a second run. The lead's comparison across bindings runs
# `LD_LIBRARY_PATH=BUILD mono BUILD/bindings/csharp/same_tokens.exe MODEL`.
# usage: same_tokens_check.sh CLI MONO SAME_TOKENS_EXE VOCAB_DIR
set -uo pipefail
cli=$1; mono=$2; exe=$3; vocab=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$cli" model random -o "$dir/m.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 --type f32 \
  --seed 7 --vocab-from "$vocab/ggml-vocab-llama-spm.gguf" > /dev/null || { echo "FAIL: clade model random"; exit 1; }
out=$("$mono" "$exe" "$dir/m.gguf") || { echo "FAIL: same_tokens.exe: $out"; exit 1; }
echo "$out"
[ "$(wc -l <<< "$out")" -eq 2 ] || { echo "FAIL: want 2 lines"; exit 1; }
while read -r line; do
  [ "$(wc -w <<< "$line")" -eq 32 ] || { echo "FAIL: want 32 token ids: $line"; exit 1; }
  grep -qE '^[0-9]+( [0-9]+)*$' <<< "$line" || { echo "FAIL: not token ids: $line"; exit 1; }
done <<< "$out"
again=$("$mono" "$exe" "$dir/m.gguf")
[ "$again" == "$out" ] || { echo "FAIL: a second run differs: $again"; exit 1; }
echo "ok: 2 sequences of 32 tokens, the same twice"
