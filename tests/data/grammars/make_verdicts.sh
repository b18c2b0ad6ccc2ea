#!/bin/bash
# Rebuilds verdicts.txt from cases.txt with llama.cpp's grammar code.
# llama.cpp's source: bench/peer/build_llama.sh's checkout (PEER_SRC, default
# ~/.cache/clade-peer/src; the npm package node-llama-cpp@3.22.1's bundle).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${PEER_SRC:-$HOME/.cache/clade-peer/src}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
g++ -std=c++17 -O1 -I"$src/include" -I"$src/ggml/include" -I"$src/src" \
  "$here/make_verdicts.cpp" "$src/src/llama-grammar.cpp" -o "$tmp/make_verdicts"
"$tmp/make_verdicts" "$here" > "$here/verdicts.txt"
echo "wrote $here/verdicts.txt ($(grep -c '^[apr]' "$here/verdicts.txt") verdicts)"
