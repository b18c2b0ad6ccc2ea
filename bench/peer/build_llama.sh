#!/bin/bash
# Build llama.cpp, clade's main peer, from the source that the npm package
# node-llama-cpp ships (a git bundle under llama/), outside the repository:
# nothing of llama.cpp is committed. The build is cached; the version built
# is written to $PEER_DIR/VERSION. No network is needed beyond npm.
#
# usage: bench/peer/build_llama.sh            (prints the bin folder)
# env:   PEER_DIR (default ~/.cache/clade-peer), NODE_LLAMA_CPP (default 3.22.1),
#        JOBS (default: the number of cores)
set -euo pipefail
ver=${NODE_LLAMA_CPP:-3.22.1}
dir=${PEER_DIR:-$HOME/.cache/clade-peer}
jobs=${JOBS:-$(nproc)}
bin=$dir/build/bin
targets=(llama-batched-bench llama-bench llama-cli llama-quantize llama-perplexity llama-server)
if [ -x "$bin/llama-batched-bench" ] && [ -f "$dir/VERSION" ] && grep -q "node-llama-cpp@$ver" "$dir/VERSION"; then
  echo "$bin"
  exit 0
fi
need=()
command -v npm >/dev/null || need+=(npm)
command -v cmake >/dev/null || need+=(cmake)
command -v git >/dev/null || need+=(git)
command -v g++ >/dev/null || need+=(g++)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
mkdir -p "$dir"
cd "$dir"
if [ ! -f "node-llama-cpp-$ver.tgz" ]; then npm pack "node-llama-cpp@$ver" >&2; fi
rm -rf package src
tar xzf "node-llama-cpp-$ver.tgz"
git clone -q package/llama/gitRelease.bundle src >&2
tag=$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' package/llama/llama.cpp.info.json | head -1)
cmake -S src -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON >&2
cmake --build build -j "$jobs" --target "${targets[@]}" >&2
echo "node-llama-cpp@$ver llama.cpp ${tag:-unknown} $(git -C src rev-parse --short HEAD)" > VERSION
rm -rf package
echo "$bin"
