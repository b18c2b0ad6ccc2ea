#!/bin/bash
# The C# binding used from outside the checkout (as tests/install/run.sh does
# for C, Python, Rust and Go): `meson install --destdir` of the build into a
# private folder; Clade.dll built there from bindings/csharp's sources with
# mcs, beside its Clade.dll.config; the README's example compiled against
# it and run from another folder under `env -i` with only PATH, HOME and
# LD_LIBRARY_PATH (the installed lib folder) on a random model written by
# the installed CLI. Checks that the installed libclade is the one loaded.
# usage: install_test.sh BUILD_DIR SOURCE_DIR MESON MCS MONO
set -uo pipefail
build=$1; src=$2; meson=$3; mcs=$4; mono=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
unset LD_LIBRARY_PATH CLADE_LIBRARY CLADE_LIB_DIR CLADE_CLI MONO_PATH
mkdir -p "$dir/app" "$dir/elsewhere"
fail() { echo "FAIL: $*"; exit 1; }

$meson install -C "$build" --no-rebuild --destdir "$dir/root" --quiet > "$dir/install.log" 2>&1 ||
  { cat "$dir/install.log"; fail "meson install"; }
lib=$(find "$dir/root" -name 'libclade.so.1' | head -1)
[ -n "$lib" ] || fail "no libclade.so.1 installed"
libdir=$(dirname "$lib")
cli=$(find "$dir/root" -path '*/bin/clade' -type f | head -1)
[ -x "$cli" ] || fail "no installed CLI"
"$cli" model random -o "$dir/m.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 --type f16 \
  --vocab-from "$src/tests/data/vocab/ggml-vocab-llama-spm.gguf" > /dev/null || fail "installed clade model random"

# The binding, built by the user: its sources (not the tests, not same_tokens)
srcs=()
for f in Native Handles Model Tree Sampler Generate Stream; do srcs+=("$src/bindings/csharp/$f.cs"); done
(cd "$dir/app" && env -i PATH=/usr/bin:/bin HOME="$dir" "$mcs" -sdk:4.x -nologo -target:library -unsafe \
  -out:Clade.dll "${srcs[@]}") || fail "mcs Clade.dll"
cp "$src/bindings/csharp/Clade.dll.config" "$dir/app/"
# The README's C# example, as it is
awk '/^```csharp/ {on = 1; block = ""; next} on && /^```/ {if (block ~ /new Model\(/) {print block; exit} on = 0; next}
     on {block = block $0 "\n"}' "$src/bindings/csharp/README.md" > "$dir/app/Example.cs"
grep -q "new Model(" "$dir/app/Example.cs" || fail "no C# example with new Model( in bindings/csharp/README.md"
(cd "$dir/app" && env -i PATH=/usr/bin:/bin HOME="$dir" "$mcs" -sdk:4.x -nologo -r:Clade.dll -out:example.exe \
  Example.cs) || fail "mcs Example.cs"

out=$(cd "$dir/elsewhere" && env -i PATH=/usr/bin:/bin HOME="$dir" LD_LIBRARY_PATH="$libdir" LD_DEBUG=libs \
  "$mono" "$dir/app/example.exe" "$dir/m.gguf" 2> "$dir/ld.log") || { cat "$dir/ld.log" | grep -v "^ *[0-9]*:" ; fail "the README's C# example: $out"; }
echo "$out"
n=$(grep -cE "^(StopToken|StopString|Length): " <<< "$out")
[ "$n" -eq 4 ] || fail "the README's C# example: expected 4 results, got $n"
loaded=$(sed -n 's/.*calling init: \(.*libclade\.so\.1\)$/\1/p' "$dir/ld.log" | head -1)
[ -n "$loaded" ] || fail "libclade.so.1 was not loaded"
[ "$(cd "$(dirname "$loaded")" && pwd -P)" == "$(cd "$libdir" && pwd -P)" ] ||
  fail "the example loaded $loaded, not the installed $libdir/libclade.so.1"
echo "ok: Clade.dll built against the install; the README example ran with $loaded ($n results)"
