#!/bin/bash
# On a machine with an NVIDIA GPU (compute capability 8.0 or newer) and the
# build tools (meson, ninja, nvcc, OpenBLAS, PCRE2): build with the CUDA
# backend into build-gpu/, run the CUDA tests (also under compute-sanitizer
# when it is there) and the CLI test, then the GPU decode benchmark of
# bench/README.md into bench/results/gpu-decode-kv{4,16}.csv, and the GQA
# model's again with each step returning its greedy tokens instead of its
# logits (--logits greedy: clade_batch.argmax) into gpu-decode-kv4-greedy.csv.
#
# With --prebuilt, build-gpu/ holds a bundle of scripts/gpu_bundle.sh made
# on another machine (for a GPU machine that cannot build clade): nothing is
# built, the meson test suites are skipped, and the bundle's syslib/ is put
# on LD_LIBRARY_PATH.
# With --no-sanitizers, compute-sanitizer is not run (for a build whose
# sanitizer runs were made on the same GPU earlier, when a lent machine's
# time is short; say so where the results are reported).
# usage: scripts/gpu_check.sh [--prebuilt] [--no-sanitizers] [--no-bench]
set -euo pipefail
cd "$(dirname "$0")/.."
prebuilt=0 sanitizers=1
[ "${1:-}" == "--prebuilt" ] && { prebuilt=1; shift; }
[ "${1:-}" == "--no-sanitizers" ] && { sanitizers=0; shift; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# shellcheck source=scripts/gpu_lib.sh
source scripts/gpu_lib.sh
gpu_build $prebuilt
# test_cuda links the core statically: it is told where the plugin is (the
# CLI finds it beside libclade).
export CLADE_CUDA_PLUGIN=$PWD/build-gpu/libclade-cuda.so
build-gpu/tests/test_cuda
CLADE_CUDA_SYNC=1 build-gpu/tests/test_cuda > /dev/null
# Plain launches (README.md: CLADE_CUDA_PDL=0; programmatic dependent
# launches are the default on Hopper) under the same comparisons.
CLADE_CUDA_PDL=0 build-gpu/tests/test_cuda > /dev/null
if [ $sanitizers == 1 ] && command -v compute-sanitizer > /dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 1 build-gpu/tests/test_cuda > /dev/null
  echo "compute-sanitizer memcheck: clean"
  # racecheck: a hazard in one of clade's kernels fails; cuBLAS's own GEMM
  # kernels (nvjet_*) report one on an H100, which is not ours to mend.
  races=$(compute-sanitizer --tool racecheck build-gpu/tests/test_cuda 2>&1 | grep "Race reported" || true)
  ours=$(grep -v "nvjet_" <<< "$races" || true)
  [ -z "$ours" ] || { echo "compute-sanitizer racecheck: $ours"; exit 1; }
  echo "compute-sanitizer racecheck: no hazard in clade's kernels"
fi
bash tests/cli.sh build-gpu/tools/clade/clade
# Whole passes (graphs included) with plain launches and the WMMA
# attention kernel: the same tokens as the CPU backend.
CLADE_CUDA_PDL=0 CLADE_CUDA_MMA_REG=0 bash tests/cli.sh build-gpu/tools/clade/clade
# ... and with the switches not yet the defaults (the few-row products
# picking the tokens and merging the attention rows, the many-row split).
CLADE_CUDA_GEMV_ARGMAX=1 CLADE_CUDA_GEMV_MERGE=1 CLADE_CUDA_MMA_UNITS_PER_SM=3 \
  bash tests/cli.sh build-gpu/tools/clade/clade
[ $prebuilt == 1 ] || meson test -C build-gpu --suite unit --suite cuda
[ "${1:-}" == "--no-bench" ] && exit 0
clade=build-gpu/tools/clade/clade
# The GPU's memory bandwidth and tensor-core peak, for the roofline of the
# attention part (bench/README.md), measured by clade in this run; and by
# PyTorch the same way, where the machine has it, as a cross-check.
$clade bench machine --backend cuda --csv | tee bench/results/gpu-machine.csv
if python3 -c "import torch" 2> /dev/null; then
  python3 bench/gpu_peaks.py | tee bench/results/gpu-machine-torch.csv
fi
mkdir -p bench/results
gpu_models $clade
$clade bench decode -m "$m4" --backend cuda --batch 1,16,64,256 --prefix 2048,8192 --past-context --mode shared,flat,noattn \
  --gen 32 --rounds 3 --csv | tee bench/results/gpu-decode-kv4.csv
$clade bench decode -m "$m16" --backend cuda --batch 32 --prefix 8192 --past-context --mode shared,flat,noattn \
  --gen 32 --rounds 3 --csv | tee bench/results/gpu-decode-kv16.csv
$clade bench decode -m "$m4" --backend cuda --batch 1,16,64,256 --prefix 2048,8192 --past-context --mode shared,flat,noattn \
  --gen 32 --rounds 3 --logits greedy --csv | tee bench/results/gpu-decode-kv4-greedy.csv
