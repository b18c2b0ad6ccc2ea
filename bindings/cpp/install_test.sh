#!/bin/bash
# install_test.sh: the C++ layer as a user outside the checkout gets it:
# `meson install --destdir` of the build into a temporary folder, then the
# README's example (example.cpp, which must be what README.md shows) copied
# out of the checkout, compiled under `env -i` with the installed clade.hpp
# and libclade found through pkg-config alone (PKG_CONFIG_PATH; the folder
# as the program's rpath), and run with only PATH set on a random model
# written by the installed CLI.
# usage: install_test.sh BUILD_DIR SOURCE_DIR CXX MESON
set -uo pipefail
build=$1; src=$2; cxx=$3; meson=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# no search path of the caller's (meson test sets LD_LIBRARY_PATH to the build)
unset LD_LIBRARY_PATH CPATH CPLUS_INCLUDE_PATH LIBRARY_PATH PKG_CONFIG_PATH
"$meson" install -C "$build" --no-rebuild --destdir "$dir/root" --quiet > "$dir/install.log" 2>&1 ||
  { cat "$dir/install.log"; fail "meson install"; }
pc=$(find "$dir/root" -name clade.pc -path '*/pkgconfig/*' | head -1)
[ -n "$pc" ] || fail "no clade.pc installed"
pcdir=$(dirname "$pc")
incdir=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=includedir clade)
libdir=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir clade)
prefix=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=prefix clade)
[ -f "$incdir/clade/clade.hpp" ] || fail "no clade.hpp installed beside clade.h ($incdir/clade)"
cmp -s "$incdir/clade/clade.hpp" "$src/include/clade/clade.hpp" || fail "the installed clade.hpp differs"

# The README's example is example.cpp from its #include on.
awk '/^```cpp/ {on = 1; next} on && /^```/ {exit} on {print}' "$src/bindings/cpp/README.md" > "$dir/readme.cpp"
sed -n '/^#include <clade\/clade.hpp>/,$p' "$src/bindings/cpp/example.cpp" > "$dir/example_body.cpp"
[ -s "$dir/readme.cpp" ] && cmp -s "$dir/readme.cpp" "$dir/example_body.cpp" ||
  { diff "$dir/readme.cpp" "$dir/example_body.cpp"; fail "README.md's C++ example is not example.cpp"; }

# the compiler by its full path (env -i's PATH is /usr/bin:/bin)
read -r -a cxx_words <<< "$cxx"
cxx_words[0]=$(command -v "${cxx_words[0]}") || fail "no compiler ${cxx_words[0]}"
mkdir -p "$dir/elsewhere"
cp "$src/bindings/cpp/example.cpp" "$dir/elsewhere/"
"$prefix/bin/clade" model random -o "$dir/elsewhere/m.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 \
  --type f16 --vocab-from "$src/tests/data/vocab/ggml-vocab-llama-spm.gguf" > /dev/null || fail "installed clade model random"
# shellcheck disable=SC2016
(cd "$dir/elsewhere" && env -i PATH=/usr/bin:/bin PKG_CONFIG_PATH="$pcdir" sh -c \
  '$0 -std=c++17 -Wall -Wextra -Wpedantic -Werror -o example example.cpp $(pkg-config --cflags --libs clade) \
   -Wl,-rpath,"$(pkg-config --variable=libdir clade)"' "${cxx_words[*]}") > "$dir/cxx.log" 2>&1 ||
  { cat "$dir/cxx.log"; fail "compiling example.cpp against the install"; }
lib=$(ldd "$dir/elsewhere/example" | sed -n 's/.*libclade\.so\.[0-9]* => \(.*\) (.*/\1/p')
[ "$(cd "$(dirname "$lib")" && pwd -P)" == "$(cd "$libdir" && pwd -P)" ] || fail "example loads libclade from '$lib'"
out=$(cd "$dir/elsewhere" && env -i PATH=/usr/bin:/bin ./example m.gguf 2>&1) || fail "example: $out"
echo "$out"
[ "$(grep -c '^finish [0-9]: ' <<< "$out")" -eq 4 ] || fail "expected 4 results"
grep -q '^streamed [1-9][0-9]* tokens$' <<< "$out" || fail "no streamed tokens"
echo "ok: example.cpp built against the installed clade.hpp and run"
