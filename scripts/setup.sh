#!/bin/bash
# Install what is missing (Debian bookworm, as root or with sudo) and build
# clade into build/. Used by scripts/demo.sh and scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v meson >/dev/null || need+=(meson)
command -v ninja >/dev/null || need+=(ninja-build)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v g++ >/dev/null || need+=(g++)
pkg-config --exists openblas 2>/dev/null || need+=(libopenblas-dev)
pkg-config --exists libpcre2-8 2>/dev/null || need+=(libpcre2-dev)
command -v abidiff >/dev/null || need+=(abigail-tools)  # the abidiff test
dpkg -s python3-jsonschema >/dev/null 2>&1 || need+=(python3-jsonschema)  # tests/cli_grammar.sh
# `clade serve` (left out of the build without them)
pkg-config --exists cpp-httplib 2>/dev/null || need+=(libcpp-httplib-dev)
pkg-config --exists nlohmann_json 2>/dev/null || need+=(nlohmann-json3-dev)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx)  # tests/scale
command -v chromium >/dev/null || need+=(chromium)  # tests/browser
if [ "${CLADE_BINDINGS:-auto}" != "disabled" ]; then
  command -v go >/dev/null || need+=(golang-go)
fi
# Toolchains of the bindings that list them (bindings/<lang>/apt-packages:
# a Debian package name a line, # for comments; a second word names a
# command that, when on PATH already, makes the package unneeded: npm
# comes with NodeSource's nodejs, which conflicts with Debian's npm).
if [ "${CLADE_BINDINGS:-auto}" != "disabled" ]; then
  for f in bindings/*/apt-packages; do
    [ -f "$f" ] || continue
    while read -r p cmd _; do
      case "$p" in ''|'#'*) continue ;; esac
      case "$cmd" in ''|'#'*) cmd="" ;; esac
      if [ -n "$cmd" ] && command -v "$cmd" >/dev/null; then continue; fi
      dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
    done < "$f"
  done
fi
# the install test's `pip install bindings/python` into a fresh venv
/usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "installing: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# CUDA backend: built when nvcc is there (it compiles without a GPU; its
# tests skip where no device exists).
cuda=disabled
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda=enabled
  export PATH="$PATH:/usr/local/cuda/bin"
fi
if [ ! -f build/build.ninja ]; then
  meson setup build -Dcuda=$cuda --buildtype=release
fi
ninja -C build
