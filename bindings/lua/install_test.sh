#!/bin/bash
# install_test.sh: the Lua binding from a user's side. `meson install
# --destdir` of the build into a private folder; the module built and
# installed with bindings/lua/Makefile against that install (pkg-config
# through PKG_CONFIG_PATH alone) into a folder of its own; then README.md's
# example run from a folder outside the checkout under `env -i` with only
# PATH and LUA_CPATH, on a random model written by the installed CLI. The
# module must load the installed libclade (its rpath), not the build's.
# usage: install_test.sh BUILD_DIR SOURCE_DIR MESON   (CLADE_VOCAB_DIR: the vocabularies)
set -uo pipefail
build=$1; src=$2; meson=$3
vocab=${CLADE_VOCAB_DIR:-$src/tests/data/vocab}/ggml-vocab-llama-spm.gguf
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/elsewhere"
unset LD_LIBRARY_PATH PKG_CONFIG_PATH CLADE_LIB_DIR CLADE_LIBRARY LUA_CPATH LUA_PATH LUA_INIT LUA_INIT_5_4

lua=$(command -v lua5.4) || { echo "FAIL: no lua5.4"; exit 1; }
$meson install -C "$build" --no-rebuild --destdir "$dir/root" --quiet > "$dir/install.log" 2>&1 ||
  { cat "$dir/install.log"; echo "FAIL: meson install"; exit 1; }
pc=$(find "$dir/root" -name clade.pc -path '*/pkgconfig/*' | head -1)
[ -n "$pc" ] || { echo "FAIL: no clade.pc installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(pkg-config --variable=libdir clade)
prefix=$(pkg-config --variable=prefix clade)

"$prefix/bin/clade" model random -o "$dir/m.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 \
  --type f16 --vocab-from "$vocab" > /dev/null || { echo "FAIL: installed clade model random"; exit 1; }

# the Makefile, with its build outputs outside the checkout
make -s -C "$src/bindings/lua" BUILDDIR="$dir/lua-build" LUA_CMOD="$dir/lua-cmod" install \
  > "$dir/make.log" 2>&1 || { cat "$dir/make.log"; echo "FAIL: make install of the Lua module"; exit 1; }
mod=$dir/lua-cmod/clade.so
[ -f "$mod" ] || { echo "FAIL: no $mod"; exit 1; }
lib=$(ldd "$mod" | sed -n 's/.*libclade\.so\.[0-9]* => \(.*\) (.*/\1/p')
[ "$(cd "$(dirname "$lib")" 2> /dev/null && pwd -P)" == "$(cd "$libdir" && pwd -P)" ] ||
  { echo "FAIL: clade.so loads libclade from '$lib', not $libdir"; exit 1; }

# README.md's first ```lua block that loads a model
awk '/^```lua/ {on = 1; block = ""; next} on && /^```/ {if (block ~ /clade.load/) {print block; exit} on = 0; next}
     on {block = block $0 "\n"}' "$src/bindings/lua/README.md" | sed "s|\"model.gguf\"|\"$dir/m.gguf\"|" > "$dir/example.lua"
grep -q 'clade.load("'"$dir"'/m.gguf")' "$dir/example.lua" || { echo "FAIL: no Lua example in README.md"; exit 1; }
printf 'print("module: " .. package.searchpath("clade", package.cpath))\n' >> "$dir/example.lua"
out=$(cd "$dir/elsewhere" && env -i PATH=/usr/bin:/bin LUA_CPATH="$dir/lua-cmod/?.so" "$lua" "$dir/example.lua" 2>&1) ||
  { echo "$out"; echo "FAIL: the README's Lua example"; exit 1; }
echo "$out"
n=$(grep -cE '^result [0-9]+: (stop_token|stop_string|length) ' <<< "$out")
[ "$n" -eq 3 ] || { echo "FAIL: expected 3 results, got $n"; exit 1; }
grep -q "^module: $dir/lua-cmod/clade.so\$" <<< "$out" || { echo "FAIL: the module was not the installed one"; exit 1; }
echo "ok: the Lua module built with its Makefile against the install, README example run"
