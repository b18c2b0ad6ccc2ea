#!/bin/bash
# Structs that grow (clade.h, Conventions): a caller built against the frozen
# 1.0 header runs against a "future" libclade.so.1 whose structs each have a
# field more (tests/abi/meson.build builds it), and a caller built against
# that grown header runs against this build's library. See abi_caller.c.
# usage: run_future.sh CLADE_CLI OLD_CALLER FUTURE_CALLER FUTURE_LIB_DIR LIB_DIR VOCAB_DIR
set -uo pipefail
cli=$1; old=$2; future=$3; future_dir=$4; lib_dir=$5; vocab_dir=$6
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$cli" model random -o "$dir/m.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 --vocab 300 \
  --type f16 > /dev/null 2>&1 || { echo "FAIL: model random"; exit 1; }
vocab="$vocab_dir/ggml-vocab-llama-spm.gguf"
[ -f "$vocab" ] || { echo "FAIL: no reference vocabulary at $vocab"; exit 1; }
failures=0
run() {  # run LIBRARY_DIR CALLER: the caller with LIBRARY_DIR's libclade.so.1
  if ! LD_LIBRARY_PATH="$1" "$2" "$dir/m.gguf" "$vocab" "$1"; then
    echo "FAIL: $(basename "$2") against $1"; failures=$((failures + 1))
  fi
}
run "$future_dir" "$old"   # an older caller, a newer library
run "$lib_dir" "$old"      # 1.0 against this build (as released)
run "$lib_dir" "$future"   # a newer caller, an older library
[ $failures -eq 0 ] && echo "ok: 1.0 caller with the grown library, grown caller with this one"
exit $((failures > 0))
