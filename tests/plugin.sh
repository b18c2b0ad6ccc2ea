#!/bin/bash
# The CUDA backend as a plugin (lib/plugin.h): libclade links no CUDA
# library, and asking for CUDA where the plugin, the CUDA runtime or a
# device is missing is one status naming which, with every other call
# unaffected. Fake plugins, built here with the C compiler, stand in for
# the cases this machine cannot show (a missing runtime, a plugin's own
# refusal).
# usage: tests/plugin.sh CLADE_CLI LIBCLADE [PLUGIN]   (PLUGIN: a CUDA build's libclade-cuda.so)
set -uo pipefail
clade=$1 lib=$2 plugin=${3:-}
unset CLADE_CUDA_PLUGIN
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect WHAT OUTPUT_PATTERN CMD...: exit status 1 and the pattern in stderr
expect() {
  local what=$1 pat=$2 out rc
  shift 2
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 1 ] || ! grep -qE -- "$pat" <<< "$out"; then
    fail "$what: rc $rc, got: $out"
  else
    echo "ok: $what: $out"
  fi
}

if ldd "$lib" | grep -E 'libcuda|libcublas|libnvidia'; then
  fail "libclade links a CUDA library"
else
  echo "ok: ldd $lib names no CUDA library"
fi

"$clade" model random -o "$tmp/m.gguf" --layers 1 --dim 64 --heads 2 --kv-heads 1 --ff 128 --vocab 300 > /dev/null ||
  { echo "FAIL: model random"; exit 1; }
gen=("$clade" generate -m "$tmp/m.gguf" --tokens "1 2 3" -n 2 --backend cuda)

# The build's plugin beside libclade: a GPU machine runs, any other says
# which part is missing (the runtime or a device).
if [ -n "$plugin" ]; then
  [ -f "$(dirname "$lib")/libclade-cuda.so" ] || fail "the plugin is not beside libclade in the build"
  ldd "$plugin" | grep libcudart >/dev/null || fail "the plugin does not link the CUDA runtime"
  out=$("${gen[@]}" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 0 ]; then
    echo "ok: a CUDA device ran through the plugin"
  elif grep -qE "backend error: no CUDA (device|runtime): " <<< "$out"; then
    echo "ok: plugin found, then: $out"
  else
    fail "--backend cuda with the build's plugin: rc $rc: $out"
  fi
fi

# No plugin: a copy of libclade alone in a folder, found first through
# LD_LIBRARY_PATH (ahead of the CLI's run path).
mkdir -p "$tmp/alone"
cp -L "$lib" "$tmp/alone/$(basename "$(readlink -f "$lib")")"
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
ln -sf "$(basename "$(readlink -f "$lib")")" "$tmp/alone/$soname"
LD_LIBRARY_PATH=$tmp/alone expect "no plugin" \
  "unsupported: no CUDA plugin: libclade-cuda.so was not found \(looked beside the library, in $tmp/alone, and the library path\)" \
  "${gen[@]}"
# ... and the CPU backend of that same library still works.
LD_LIBRARY_PATH=$tmp/alone "$clade" generate -m "$tmp/m.gguf" --tokens "1 2 3" -n 2 > /dev/null ||
  fail "the CPU backend without a plugin"

CLADE_CUDA_PLUGIN=$tmp/nothing expect "a named plugin that is not there" \
  "unsupported: no CUDA plugin: CLADE_CUDA_PLUGIN names $tmp/nothing, which is not a file" "${gen[@]}"
CLADE_CUDA_PLUGIN=$lib expect "a library that is not a plugin" \
  "unsupported: .* is not a clade CUDA plugin \(no symbol clade_cuda_plugin_make\)" "${gen[@]}"

cc=${CC:-cc}
# A plugin whose CUDA runtime is missing: it needs a libcudart that is
# removed after the link.
cat > "$tmp/rt.c" <<'C'
int cudaRuntimeGetVersion(int* v) { *v = 0; return 0; }
C
cat > "$tmp/fake.c" <<'C'
#include <stddef.h>
#include <string.h>
int cudaRuntimeGetVersion(int* v);
/* clade_cuda_plugin_make's C-compatible shape (lib/plugin.h): refuses
   with CLADE_E_BACKEND (-8) and a message of its own. */
__attribute__((visibility("default"))) void* clade_cuda_plugin_make(const void* host, int* status, char* msg,
                                                                    size_t size) {
  int v;
  (void)host;
  cudaRuntimeGetVersion(&v);
  *status = -8;
  strncpy(msg, "no CUDA device: the fake plugin has none", size - 1);
  msg[size - 1] = 0;
  return NULL;
}
C
mkdir -p "$tmp/rt" "$tmp/fake"
if "$cc" -shared -fPIC -o "$tmp/rt/libcudart.so.99" -Wl,-soname,libcudart.so.99 "$tmp/rt.c" &&
   "$cc" -shared -fPIC -o "$tmp/fake/libclade-cuda.so" "$tmp/fake.c" "$tmp/rt/libcudart.so.99" \
     -Wl,-rpath,"$tmp/rt"; then
  CLADE_CUDA_PLUGIN=$tmp/fake/libclade-cuda.so expect "the plugin's own refusal" \
    "backend error: no CUDA device: the fake plugin has none" "${gen[@]}"
  rm "$tmp/rt/libcudart.so.99"
  CLADE_CUDA_PLUGIN=$tmp/fake/libclade-cuda.so expect "no CUDA runtime" \
    "backend error: no CUDA runtime: the CUDA plugin $tmp/fake/libclade-cuda.so needs a library that is missing: libcudart.so.99" \
    "${gen[@]}"
else
  fail "could not build the fake plugins with $cc"
fi

[ $fails -eq 0 ] && echo "plugin: all checks passed" || { echo "plugin: $fails failed"; exit 1; }
