#!/bin/bash
# Nsight Compute profiles of the attention kernels on a GPU machine, for the
# cases that issue 25's targets name: what bounds each kernel (throughput
# against the device's peaks, achieved occupancy and what limits it, the
# warps' stall reasons, registers and shared memory a block), where a
# decode step's timing (gpu_check.sh, gpu_ab.sh) says only how long.
#
#   b256: the GQA-4 model, batch 256 x prefix 8192, shared
#         (attention_reg_kernel against its roofline)
#   mha:  the multi-head model, batch 32 x prefix 8192, shared
#   b1:   the GQA-4 model, batch 1 x prefix 2048 (the latency of a step:
#         times only)
#
# The steps run without graphs (CLADE_CUDA_GRAPHS=0) so that each launch is
# profiled on its own; ncu replays each profiled kernel once per metric pass,
# which leaves its time as measured alone (--clock-control none: at the
# clocks the benchmarks run at).
# Writes OUT/ncu-CASE-times.csv (every kernel's time, grid and block, the
# prefill's included: the decode steps' are the last), OUT/ncu-CASE.csv
# (b256, mha: the sections of the last 12 attention launches, the last
# layers of the second decode step; ncu --csv --page details) and
# OUT/ncu-CASE.err.
# --prebuilt: build-gpu/ holds a scripts/gpu_bundle.sh bundle.
# usage: scripts/gpu_profile.sh [--prebuilt] OUT [CASE...]
set -euo pipefail
cd "$(dirname "$0")/.."
prebuilt=0
[ "${1:-}" == "--prebuilt" ] && { prebuilt=1; shift; }
out=${1:?usage: gpu_profile.sh [--prebuilt] OUT [CASE...]}
shift
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(b256 mha b1)
for c in "${cases[@]}"; do
  case $c in b256 | mha | b1) ;; *) echo "gpu_profile.sh: unknown case '$c' (b256, mha, b1)" >&2; exit 2 ;; esac
done
command -v ncu > /dev/null || { echo "gpu_profile.sh: ncu (Nsight Compute) is not on PATH" >&2; exit 1; }
# shellcheck source=scripts/gpu_lib.sh
source scripts/gpu_lib.sh
gpu_build $prebuilt
export CLADE_CUDA_PLUGIN=$PWD/build-gpu/libclade-cuda.so CLADE_CUDA_GRAPHS=0
clade=build-gpu/tools/clade/clade
mkdir -p "$out"
gpu_models $clade
step=(bench decode --backend cuda --past-context --mode shared --gen 2 --rounds 1 --logits greedy)
sections=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
  --section MemoryWorkloadAnalysis)
times=(--metrics "gpu__time_duration.sum,launch__grid_size,launch__block_size")
attn='attention|combine|merge'
for c in "${cases[@]}"; do
  case $c in
    b256) args=(-m "$m4" --batch 256 --prefix 8192) ;;
    mha) args=(-m "$m16" --batch 32 --prefix 8192) ;;
    b1) args=(-m "$m4" --batch 1 --prefix 2048) ;;
  esac
  # Every kernel's time, the prefix's prefill included (the decode steps'
  # launches are the last ones).
  echo "# $c: clade ${step[*]} ${args[*]}" > "$out/ncu-$c.err"
  ncu --clock-control none --print-units base --csv --page details "${times[@]}" $clade "${step[@]}" "${args[@]}" \
    > "$out/ncu-$c-times.csv" 2>> "$out/ncu-$c.err" || { echo "gpu_profile.sh: ncu failed on $c" >&2; continue; }
  [ "$c" == b1 ] && continue
  # The sections of the last 12 attention launches (the last layers of
  # the second decode step): the same run again, the launches before them
  # skipped (its launches are the same in number each run).
  # (ncu's report follows the program's own output and its ==PROF== lines)
  n=$(python3 scripts/ncu_summary.py --count "$attn" "$out/ncu-$c-times.csv") || n=-1
  if [ "$n" -lt 0 ]; then
    echo "gpu_profile.sh: no ncu report in $out/ncu-$c-times.csv; $c's sections skipped" >&2
    continue
  fi
  skip=$(( n > 12 ? n - 12 : 0 ))
  echo "# $c: $n attention launches, sections of the last from $skip" >> "$out/ncu-$c.err"
  ncu --clock-control none --csv --page details -k "regex:$attn" --launch-skip $skip --launch-count 12 \
    "${sections[@]}" $clade "${step[@]}" "${args[@]}" > "$out/ncu-$c.csv" 2>> "$out/ncu-$c.err" ||
    echo "gpu_profile.sh: ncu failed on $c (see $out/ncu-$c.err)" >&2
done
ls -l "$out"
