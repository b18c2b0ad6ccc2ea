#!/bin/bash
# A user outside the checkout: `meson install --destdir` of this build into
# a private folder, then a C program (hello.c) built against it with
# pkg-config alone (PKG_CONFIG_PATH, nothing else) and run on a small random
# model written by the installed CLI, generating text. Checks the installed
# files (header, library with its soname links, CLI, clade.pc with no build
# or CUDA paths); `pip install bindings/python` into a fresh venv and the
# docs/bindings.md's Python example run outside the checkout with no environment
# variable; and, configure-only, clade as a Meson subproject (no CLI,
# benchmarks or tests by default).
#
# --system (by hand, as root; never in CI): the real install to the
# build's prefix (/usr/local by default) and ldconfig, then the same
# programs built and run with no PKG_CONFIG_PATH, no rpath and no
# environment variable at all; uninstalled again at the end.
# usage: run.sh BUILD_DIR SOURCE_DIR CC MESON [--system]
set -uo pipefail
build=$1; src=$2; cc=$3; meson=$4; system=0
[ "${5:-}" == "--system" ] && system=1
dir=$(mktemp -d)
cleanup() {
  if [ $system -eq 1 ]; then
    ninja -C "$build" uninstall > "$dir/uninstall.log" 2>&1 || cat "$dir/uninstall.log"
    ldconfig
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$dir/elsewhere"  # where the programs run: outside the checkout
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# A clean environment: no compiler or loader search paths from the caller.
unset LD_LIBRARY_PATH CPATH C_INCLUDE_PATH LIBRARY_PATH PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR CLADE_LIB_DIR \
  CLADE_LIBRARY CGO_LDFLAGS CGO_CFLAGS

rpath() { [ $system -eq 1 ] || echo "$1"; }  # a private prefix needs the folder recorded
if [ $system -eq 1 ]; then
  $meson install -C "$build" --no-rebuild --quiet > "$dir/install.log" 2>&1 ||
    { cat "$dir/install.log"; echo "FAIL: meson install"; exit 1; }
  ldconfig
  pkg-config --exists clade || { pkg-config --print-errors clade; echo "FAIL: pkg-config clade"; exit 1; }
  pc=$(pkg-config --variable=pcfiledir clade)/clade.pc
else
  $meson install -C "$build" --no-rebuild --destdir "$dir/root" --quiet > "$dir/install.log" 2>&1 ||
    { cat "$dir/install.log"; echo "FAIL: meson install"; exit 1; }
  pc=$(find "$dir/root" -name clade.pc -path '*/pkgconfig/*' | head -1)
  [ -n "$pc" ] || { echo "FAIL: no clade.pc installed"; exit 1; }
  export PKG_CONFIG_PATH=$(dirname "$pc")
  pkg-config --exists clade || { pkg-config --print-errors clade; echo "FAIL: pkg-config clade"; exit 1; }
fi

libdir=$(pkg-config --variable=libdir clade)
incdir=$(pkg-config --variable=includedir clade)
prefix=$(pkg-config --variable=prefix clade)
# Relocatable: the .pc's prefix is where it lies, not the configured one.
[ "$(cd "$prefix" 2> /dev/null && pwd -P)" == "$(cd "$(dirname "$pc")/../.." && pwd -P)" ] ||
  [ "$(cd "$prefix" 2> /dev/null && pwd -P)" == "$(cd "$(dirname "$pc")/../../.." && pwd -P)" ] ||
  fail "clade.pc's prefix $prefix is not the install folder"
[ -f "$incdir/clade/clade.h" ] || fail "no header at $incdir/clade/clade.h"
version=$(sed -n 's/^#define CLADE_VERSION_STRING "\(.*\)"/\1/p' "$src/include/clade/clade.h")
major=$(sed -n 's/^#define CLADE_ABI_MAJOR \([0-9]*\).*/\1/p' "$src/include/clade/clade.h")
[ "$(pkg-config --modversion clade)" == "$version" ] || fail "clade.pc version $(pkg-config --modversion clade), header $version"
[ -f "$libdir/libclade.so.$version" ] || fail "no $libdir/libclade.so.$version"
[ "$(readlink "$libdir/libclade.so.$major")" == "libclade.so.$version" ] || fail "libclade.so.$major is not a link to libclade.so.$version"
[ "$(readlink "$libdir/libclade.so")" == "libclade.so.$major" ] || fail "libclade.so is not a link to libclade.so.$major"
soname=$(readelf -d "$libdir/libclade.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" == "libclade.so.$major" ] || fail "soname '$soname', expected libclade.so.$major"
# clade.pc: only -L/-l/-I flags relative to its own prefix; no build folder,
# no CUDA library path (Libs.private names libraries, not files).
grep -q "$build\|$src\|\.so\b\|/cuda/lib" "$pc" && fail "clade.pc has build or library paths: $(cat "$pc")"
libs=$(pkg-config --libs clade)
[ "${libs% }" == "-L$libdir -lclade" ] || [ $system -eq 1 -a "${libs% }" == "-lclade" ] || fail "pkg-config --libs clade: $(pkg-config --libs clade)"

cli=$prefix/bin/clade
[ -x "$cli" ] || { echo "FAIL: no installed CLI at $cli"; exit 1; }
# The installed CLI finds the installed library by itself ($ORIGIN rpath).
out=$("$cli" version 2>&1) && [ "$out" == "clade $version" ] || fail "installed clade version: $out"
"$cli" model random -o "$dir/m.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 --type f16 \
  --vocab-from "$src/tests/data/vocab/ggml-vocab-llama-spm.gguf" > /dev/null || fail "installed clade model random"

# The program: compiled and linked with what pkg-config says, run with the
# library folder as its rpath (a private prefix is not on the loader's path;
# docs/install.md).
# shellcheck disable=SC2046
$cc -std=c99 -Wall -Werror -o "$dir/hello" "$src/tests/install/hello.c" $(pkg-config --cflags --libs clade) \
  $(rpath "-Wl,-rpath,$libdir") > "$dir/cc.log" 2>&1 || { cat "$dir/cc.log"; fail "compiling hello.c against the install"; }
if [ -x "$dir/hello" ]; then
  lib=$(ldd "$dir/hello" | sed -n 's/.*libclade\.so\.[0-9]* => \(.*\) (.*/\1/p')
  [ "$(cd "$(dirname "$lib")" && pwd -P)" == "$(cd "$libdir" && pwd -P)" ] || fail "hello loads libclade from '$lib', not $libdir"
  out=$(cd "$dir/elsewhere" && env -i PATH=/usr/bin:/bin "$dir/hello" "$dir/m.gguf" "Once upon a time" 2>&1) ||
    fail "hello: $out"
  grep -q "^clade $version (header $version)\$" <<< "$out" || fail "hello: no version line: $out"
  grep -q "^Once upon a time." <<< "$out" && grep -q "^8 tokens" <<< "$out" || fail "hello: no text: $out"
  echo "$out"
fi

# Python: `pip install bindings/python` into a fresh venv, offline (no
# index), with PKG_CONFIG_PATH pointing at the install; then docs/bindings.md's
# Python example, outside the checkout, with no environment variable at all.
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
if ! "$py" -c 'import venv, ensurepip' 2> /dev/null; then
  fail "python3 -m venv is not available (apt-get install python3-venv)"
else
  "$py" -m venv --system-site-packages "$dir/venv" || fail "python3 -m venv"
  PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$dir/venv/bin/pip" install -q "$src/bindings/python" \
    > "$dir/pip.log" 2>&1 || { cat "$dir/pip.log"; fail "pip install bindings/python"; }
  # docs/bindings.md's first Python block that uses the package, on the random model.
  awk '/^ *```python/ {on = 1; block = ""; next} on && /^ *```/ {if (block ~ /import clade/) {print block; exit} on = 0; next}
       on {sub(/^  /, ""); block = block $0 "\n"}' "$src/docs/bindings.md" | sed "s|\"model.gguf\"|\"$dir/m.gguf\"|" > "$dir/example.py"
  grep -q "import clade" "$dir/example.py" || fail "no Python example with 'import clade' in docs/bindings.md"
  printf 'import clade._lib\nprint("library:", clade._lib.LIBRARY_PATH)\nprint("package:", clade.__file__)\n' >> "$dir/example.py"
  out=$(cd "$dir/elsewhere" && env -i PATH=/usr/bin:/bin HOME="$dir" "$dir/venv/bin/python" "$dir/example.py" 2>&1) ||
    fail "the README's Python example: $out"
  grep -q "^library: $libdir/libclade.so.1\$\|^library: $(cd "$libdir" && pwd -P)/libclade.so.1\$" <<< "$out" ||
    fail "the Python package did not load the installed library: $out"
  grep -q "^package: $dir/venv/" <<< "$out" || fail "clade was not imported from the venv: $out"
  [ "$(grep -cE "^(stop_token|stop_string|length) " <<< "$out")" -eq 4 ] || fail "the README's Python example: expected 4 results: $out"
  echo "python: $(grep -cE "^(stop_token|stop_string|length) " <<< "$out") results"
fi

# Rust: a separate crate depending on bindings/rust by path, built offline;
# the binding's build.rs finds the install through the pkg-config program,
# and the crate's two-line build.rs records DEP_CLADE_LIB_DIR as its rpath
# (docs/bindings.md). It runs the README's Rust example with no environment.
if command -v cargo > /dev/null; then
  mkdir -p "$dir/rust-user/src"
  cat > "$dir/rust-user/Cargo.toml" << EOM
[package]
name = "clade-user"
version = "0.1.0"
edition = "2021"

[dependencies]
clade = { path = "$src/bindings/rust" }
EOM
  [ $system -eq 1 ] || cat > "$dir/rust-user/build.rs" << 'EOM'
fn main() {
    let dir = std::env::var("DEP_CLADE_LIB_DIR").unwrap();
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
}
EOM
  {
    echo 'fn main() -> Result<(), Box<dyn std::error::Error>> {'
    echo '    let path = std::env::args().nth(1).expect("usage: clade-user MODEL");'
    awk '/^ *```rust/ {on = 1; block = ""; next} on && /^ *```/ {if (block ~ /Model::load/) {print block; exit} on = 0; next}
         on {sub(/^  /, ""); block = block "    " $0 "\n"}' "$src/docs/bindings.md" | sed 's|"model.gguf"|\&path|'
    echo '    Ok(())'
    echo '}'
  } > "$dir/rust-user/src/main.rs"
  grep -q "Model::load(&path)" "$dir/rust-user/src/main.rs" || fail "no Rust example with Model::load in docs/bindings.md"
  if CARGO_TARGET_DIR="$dir/rust-user/target" cargo build --offline -q --manifest-path "$dir/rust-user/Cargo.toml" \
      > "$dir/cargo.log" 2>&1; then
    bin=$dir/rust-user/target/debug/clade-user
    lib=$(ldd "$bin" | sed -n 's/.*libclade\.so\.[0-9]* => \(.*\) (.*/\1/p')
    [ "$(cd "$(dirname "$lib")" && pwd -P)" == "$(cd "$libdir" && pwd -P)" ] || fail "the Rust program loads libclade from '$lib', not $libdir"
    out=$(cd "$dir/elsewhere" && env -i PATH=/usr/bin:/bin "$bin" "$dir/m.gguf" 2>&1) || fail "the README's Rust example: $out"
    # (the streamed pieces come first, with no newline before the results)
    [ "$(grep -oE "(StopToken|StopString|Length): " <<< "$out" | wc -l)" -eq 4 ] || fail "the README's Rust example: expected 4 results: $out"
    echo "rust: $(grep -oE "(StopToken|StopString|Length): " <<< "$out" | wc -l) results"
  else
    cat "$dir/cargo.log"; fail "cargo build of a crate depending on bindings/rust"
  fi
else
  echo "rust: no cargo, the Rust crate is not checked"
fi

# Go: a program in a module of its own requiring clade.dev/clade, the
# checkout's bindings/go through a go.work `use` (no replace line), built
# offline with `#cgo pkg-config: clade` (PKG_CONFIG_PATH) and the folder as
# its rpath (docs/bindings.md); it runs the README's Go example.
if command -v go > /dev/null; then
  mkdir -p "$dir/go-user"
  printf 'module example.com/user\n\ngo 1.19\n\nrequire clade.dev/clade v0.0.0\n' > "$dir/go-user/go.mod"
  {
    printf 'package main\n\nimport (\n\t"fmt"\n\t"os"\n\n\t"clade.dev/clade"\n)\n\n'
    printf 'func main() {\n\tm, err := clade.LoadModel(os.Args[1], nil)\n\tif err != nil {\n\t\tpanic(err)\n\t}\n'
    printf '\tdefer m.Close()\n'
    awk '/^ *```go/ {on = 1; block = ""; next} on && /^ *```/ {if (block ~ /GenerateStream/) {print block; exit} on = 0; next}
         on {sub(/^  /, ""); block = block "\t" $0 "\n"}' "$src/docs/bindings.md"
    printf '\tif err != nil {\n\t\tpanic(err)\n\t}\n\tfmt.Println()\n'
    printf '\tfor _, r := range results {\n\t\tfmt.Printf("finish %%d: %%s\\n", r.Finish, r.Text)\n\t}\n}\n'
  } > "$dir/go-user/main.go"
  grep -q "GenerateStream" "$dir/go-user/main.go" || fail "no Go example with GenerateStream in docs/bindings.md"
  (cd "$dir/go-user" && env -u GOFLAGS GOPROXY=off GOTOOLCHAIN=local GOTELEMETRY=off GOWORK= go work init . "$src/bindings/go") \
    > "$dir/go.log" 2>&1 || { cat "$dir/go.log"; fail "go work init"; }
  mkdir -p "$build/tests/install-go-cache"
  if (cd "$dir/go-user" && env -u GOFLAGS GOPROXY=off GOTOOLCHAIN=local GOTELEMETRY=off GOPATH="$dir/gopath" \
      GOCACHE="$build/tests/install-go-cache" CGO_ENABLED=1 CGO_LDFLAGS="$(rpath "-Wl,-rpath,$libdir")" \
      go build -o "$dir/go-user/user" .) > "$dir/go.log" 2>&1; then
    lib=$(ldd "$dir/go-user/user" | sed -n 's/.*libclade\.so\.[0-9]* => \(.*\) (.*/\1/p')
    [ "$(cd "$(dirname "$lib")" && pwd -P)" == "$(cd "$libdir" && pwd -P)" ] || fail "the Go program loads libclade from '$lib', not $libdir"
    out=$(cd "$dir/elsewhere" && env -i PATH=/usr/bin:/bin "$dir/go-user/user" "$dir/m.gguf" 2>&1) || fail "the README's Go example: $out"
    [ "$(grep -c "^finish [0-9]*: " <<< "$out")" -eq 4 ] || fail "the README's Go example: expected 4 results: $out"
    echo "go: $(grep -c "^finish [0-9]*: " <<< "$out") results"
  else
    cat "$dir/go.log"; fail "go build of a module requiring clade.dev/clade"
  fi
else
  echo "go: no go, the Go module is not checked"
fi

# clade as a Meson subproject (configure only): the library and its
# dependency, no CLI, benchmarks or tests unless asked for.
mkdir -p "$dir/user/subprojects"
ln -s "$src" "$dir/user/subprojects/clade"
cat > "$dir/user/meson.build" << 'EOM'
project('user', 'c')
clade_dep = subproject('clade').get_variable('clade_dep')
executable('user', 'user.c', dependencies: clade_dep)
EOM
echo 'int main(void) { return 0; }' > "$dir/user/user.c"
if $meson setup "$dir/user/build" "$dir/user" -Dclade:cuda=disabled > "$dir/sub.log" 2>&1; then
  $meson introspect --targets "$dir/user/build" > "$dir/targets.json"
  python3 - "$dir/targets.json" << 'EOP' || fail "clade as a subproject"
import json, sys
targets = [(t["name"], t["type"]) for t in json.load(open(sys.argv[1]))]
errors = [] if ("clade", "shared library") in targets else ["no libclade target"]
errors += ["builds the %s %s by default" % (ty, n) for n, ty in targets if ty == "executable" and n != "user"]
print("\n".join("subproject: " + e for e in errors))
sys.exit(1 if errors else 0)
EOP
else
  cat "$dir/sub.log"; fail "meson setup with clade as a subproject"
fi

[ $failures -eq 0 ] && echo "ok: installed, built against with pkg-config, run; subproject configured"
exit $((failures > 0))
