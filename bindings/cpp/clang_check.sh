#!/bin/bash
# clang_check.sh: the C++ layer under clang++ (meson's compiler is GCC):
# test_clade_hpp.cpp, example.cpp and same_tokens.cpp compiled with
# -std=c++17 and -std=c++20, with and without -fno-exceptions, under
# -Wall -Wextra -Wpedantic -Werror; then the test program of one variant
# (C++20, no exceptions: expected<T>) linked against this build's libclade
# and run.
# usage: clang_check.sh CLANGXX SOURCE_DIR LIB_DIR
set -uo pipefail
clang=$1; src=$2; lib=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
strict=(-Wall -Wextra -Wpedantic -Werror -I"$src/include")
for std in c++17 c++20; do
  for exc in "" -fno-exceptions; do
    for f in test_clade_hpp example same_tokens; do
      [ "$f" == example ] && [ -n "$exc" ] && continue  # the example uses try/catch
      if ! "$clang" -std=$std $exc "${strict[@]}" -c "$src/bindings/cpp/$f.cpp" -o "$dir/$f.o" 2> "$dir/log"; then
        echo "FAIL: clang++ -std=$std $exc $f.cpp"; cat "$dir/log"; failures=$((failures + 1))
      else
        echo "ok: clang++ -std=$std $exc $f.cpp"
      fi
    done
  done
done
if "$clang" -std=c++20 -fno-exceptions "${strict[@]}" -o "$dir/test" "$src/bindings/cpp/test_clade_hpp.cpp" \
    -L"$lib" -lclade -Wl,-rpath,"$lib" 2> "$dir/log"; then
  mkdir -p "$dir/scratch"
  "$dir/test" "$dir/scratch" || { echo "FAIL: the clang++-built test"; failures=$((failures + 1)); }
else
  echo "FAIL: linking the clang++ test"; cat "$dir/log"; failures=$((failures + 1))
fi
exit $((failures > 0))
