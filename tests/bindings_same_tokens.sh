#!/bin/bash
# bindings_same_tokens.sh: the cross-language check of the bindings. One
# random model (written by $CLADE_CLI), then every language's same_tokens
# program on it: greedy clade_generate from three prompts (1..24; [30 31 32]
# and [40 41] under it), 32 new tokens each, end-of-generation ignored, one
# line of token ids per sequence. Every language must print the same two
# lines. C and C++ always run (bindings/cpp builds them); Python, Rust, Go,
# Node.js, Lua and C# run when their toolchain (and, for Node.js, Lua and
# C#, their module built by this build) is there. Says which ran.
# usage: bindings_same_tokens.sh BUILD_DIR SOURCE_DIR
# Environment (tests/meson.build's bindings_env): CLADE_CLI, CLADE_VOCAB_DIR,
# CLADE_LIBRARY, CLADE_LIB_DIR, LD_LIBRARY_PATH.
set -uo pipefail
build=$1; src=$2
lib=${CLADE_LIB_DIR:-$build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0; ran=(); skipped=()
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$CLADE_CLI" model random -o "$dir/m.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 --type f32 \
  --seed 7 --vocab-from "$CLADE_VOCAB_DIR/ggml-vocab-llama-spm.gguf" > /dev/null || { echo "FAIL: model random"; exit 1; }

want=""
# run LANG COMMAND...: the command's output must be the two lines (the first
# language's output is the reference; each must be two lines of 32 ids).
run() {
  local lang=$1; shift
  local out
  if ! out=$("$@" 2> "$dir/$lang.err"); then
    fail "$lang: $* exited with an error: $(cat "$dir/$lang.err")"; return
  fi
  ran+=("$lang")
  if [ "$(wc -l <<< "$out")" -ne 2 ] || grep -vqE '^[0-9]+( [0-9]+){31}$' <<< "$out"; then
    fail "$lang: not two lines of 32 token ids: $out"; return
  fi
  if [ -z "$want" ]; then
    want=$out; echo "$lang (the reference):"; echo "$out"
  elif [ "$out" != "$want" ]; then
    fail "$lang differs:"; echo "$out"
  else
    echo "$lang: the same"
  fi
}
skip() { skipped+=("$1 ($2)"); }

run c "$build/bindings/cpp/same_tokens_c" "$dir/m.gguf"
run c++ "$build/bindings/cpp/same_tokens_cpp" "$dir/m.gguf"

py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
if [ -n "$py" ]; then
  run python env PYTHONDONTWRITEBYTECODE=1 "$py" "$src/bindings/python/same_tokens.py" "$dir/m.gguf"
else
  skip python "no python3"
fi

if command -v cargo > /dev/null; then
  # the rust test's target folder: its build is reused
  if CARGO_TARGET_DIR="$build/tests/bindings-cargo" CARGO_NET_OFFLINE=true cargo build --offline -q \
      --manifest-path "$src/bindings/rust/Cargo.toml" --example same_tokens > "$dir/cargo.log" 2>&1; then
    run rust "$build/tests/bindings-cargo/debug/examples/same_tokens" "$dir/m.gguf"
  else
    cat "$dir/cargo.log"; fail "rust: cargo build --example same_tokens"
  fi
else
  skip rust "no cargo"
fi

if command -v go > /dev/null; then
  # as the go test runs (tests/meson.build): offline, the checkout's header and build
  if (cd "$src/bindings/go" && env GOCACHE="$build/tests/bindings-go/cache" GOPATH="$build/tests/bindings-go/path" \
      GOPROXY=off GOFLAGS=-mod=mod GOTOOLCHAIN=local GOTELEMETRY=off GO111MODULE=on CGO_ENABLED=1 \
      CGO_LDFLAGS="-L$lib -Wl,-rpath,$lib" go build -tags clade_checkout -o "$dir/same_tokens_go" ./same_tokens) \
      > "$dir/go.log" 2>&1; then
    run go "$dir/same_tokens_go" "$dir/m.gguf"
  else
    cat "$dir/go.log"; fail "go: go build ./same_tokens"
  fi
else
  skip go "no go"
fi

# The bindings other helpers wrote, run as their own meson.build runs them.
addon=$build/bindings/node/clade.node
if [ ! -f "$src/bindings/node/same_tokens.js" ]; then skip node "no same_tokens.js"
elif ! command -v node > /dev/null; then skip node "no node"
elif [ ! -f "$addon" ]; then skip node "no addon built at $addon"
else run node env CLADE_NODE_ADDON="$addon" node "$src/bindings/node/same_tokens.js" "$dir/m.gguf"
fi

lua=$(command -v lua5.4 || command -v lua-5.4)
if [ ! -f "$src/bindings/lua/same_tokens.lua" ]; then skip lua "no same_tokens.lua"
elif [ -z "$lua" ]; then skip lua "no lua5.4"
elif [ ! -f "$build/bindings/lua/clade.so" ]; then skip lua "no module built"
else run lua env LUA_CPATH="$build/bindings/lua/?.so" LUA_PATH="$src/bindings/lua/?.lua" "$lua" \
  "$src/bindings/lua/same_tokens.lua" "$dir/m.gguf"
fi

if [ ! -f "$src/bindings/csharp/same_tokens.cs" ]; then skip csharp "no same_tokens.cs"
elif ! command -v mono > /dev/null; then skip csharp "no mono"
elif [ ! -f "$build/bindings/csharp/same_tokens.exe" ]; then skip csharp "no same_tokens.exe built"
else run csharp env LD_LIBRARY_PATH="$lib" mono "$build/bindings/csharp/same_tokens.exe" "$dir/m.gguf"
fi

echo "ran: ${ran[*]}"
[ ${#skipped[@]} -eq 0 ] || echo "skipped: $(IFS=';'; echo "${skipped[*]}")"
[ $failures -eq 0 ] && echo "ok: ${#ran[@]} languages printed the same two lines"
exit $((failures > 0))
