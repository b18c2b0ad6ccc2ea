# shellcheck shell=bash
# What scripts/gpu_check.sh, gpu_ab.sh and gpu_profile.sh share, sourced by
# them from the repository root.

# gpu_build PREBUILT: with 1, build-gpu/ holds a scripts/gpu_bundle.sh
# bundle (for a GPU machine that cannot build clade) and its syslib/ goes
# on LD_LIBRARY_PATH; else build-gpu/ is built here with the CUDA backend.
gpu_build() {
  if [ "$1" == 1 ]; then
    export LD_LIBRARY_PATH=$PWD/build-gpu/syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  else
    [ -d build-gpu ] || meson setup build-gpu -Dcuda=enabled -Dbindings=disabled > /dev/null
    ninja -C build-gpu > /dev/null
  fi
}

# gpu_models CLADE: sets m4 and m16 to the GPU benchmarks' random models
# (8 layers, dim 1024, 16 heads, F16; 4 KV heads and 16) in $CLADE_MODELS
# (default /tmp/clade-bench-models), writing with the CLI CLADE those that
# are missing.
gpu_models() {
  local models=${CLADE_MODELS:-/tmp/clade-bench-models}
  mkdir -p "$models"
  m4=$models/l8-d1024-h16-kv4-f16.gguf
  m16=$models/l8-d1024-h16-kv16-f16.gguf
  [ -f "$m4" ] || "$1" model random -o "$m4" --layers 8 --dim 1024 --heads 16 --kv-heads 4 --ff 2816 --vocab 32000 --type f16
  [ -f "$m16" ] || "$1" model random -o "$m16" --layers 8 --dim 1024 --heads 16 --kv-heads 16 --ff 2816 --vocab 32000 --type f16
}
