#!/bin/bash
# Pack what scripts/gpu_check.sh runs, built here, for a GPU machine that
# cannot build clade itself (no PCRE2 or OpenBLAS headers, no network):
# libclade, the CUDA plugin, the CLI and test_cuda from BUILD, and in
# syslib/ the shared libraries the CLI links that such a machine may lack.
# On that machine: mkdir -p build-gpu && tar xf BUNDLE -C build-gpu, then
# scripts/gpu_check.sh --prebuilt (it sets LD_LIBRARY_PATH to syslib/).
# usage: scripts/gpu_bundle.sh BUILD OUT.tar.xz
set -euo pipefail
build=${1:?usage: gpu_bundle.sh BUILD OUT.tar.xz}
out=${2:?usage: gpu_bundle.sh BUILD OUT.tar.xz}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/tools/clade" "$stage/tests" "$stage/syslib"
v=$(readlink "$build/libclade.so.1")
cp -a "$build/libclade.so.1" "$build/$v" "$build/libclade-cuda.so" "$stage/"
cp "$build/tools/clade/clade" "$stage/tools/clade/"
cp "$build/tests/test_cuda" "$stage/tests/"
# Every library the CLI, libclade and test_cuda resolve outside the C
# library itself and the CUDA toolkit (the GPU machine has its own).
for bin in "$stage/tools/clade/clade" "$stage/libclade.so.1" "$stage/tests/test_cuda"; do
  ldd "$bin" | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/usr/local/cuda|libclade' |
  while read -r lib; do cp -L "$lib" "$stage/syslib/"; done
# The commit it was built from (and whether the tree differed), for the
# reports of the scripts that run it.
git describe --always --dirty > "$stage/COMMIT" 2> /dev/null || echo unknown > "$stage/COMMIT"
mkdir -p "$(dirname "$out")"
tar -C "$stage" -cJf "$out" .
ls -l "$out"
