#!/bin/bash
# The decode sweep of bench/README.md, all in one run. Writes bench/results/.
# usage: bench/run_sweep.sh [BUILD_DIR] [MODEL_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
models=${2:-/tmp/clade-bench-models}
clade=$build/tools/clade/clade
out=bench/results
mkdir -p "$out" "$models"
m4=$models/l8-d1024-h16-kv4-f16.gguf
m16=$models/l8-d1024-h16-kv16-f16.gguf
[ -f "$m4" ] || $clade model random -o "$m4" --layers 8 --dim 1024 --heads 16 --kv-heads 4 --ff 2816 --vocab 32000 --type f16
[ -f "$m16" ] || $clade model random -o "$m16" --layers 8 --dim 1024 --heads 16 --kv-heads 16 --ff 2816 --vocab 32000 --type f16
$clade bench machine --threads 2 --csv > "$out/machine.csv"
$clade bench decode -m "$m4" --batch 1,4,16,64,256 --prefix 512,2048,8192 --past-context --mode shared,flat,noattn \
  --gen 32 --suffix 0 --threads 2 --rounds 6 --min-seconds 10 --machine --no-mmap --csv > "$out/decode-kv4.csv" 2> "$out/decode-kv4.log"
$clade bench decode -m "$m16" --batch 32 --prefix 8192 --past-context --mode shared,flat,noattn \
  --gen 32 --suffix 0 --threads 2 --rounds 6 --machine --no-mmap --csv > "$out/decode-kv16.csv" 2> "$out/decode-kv16.log"
# Attention alone (one layer of one decode step) against its roofline, with
# the bandwidth and GEMM peak measured right before.
$clade bench machine --threads 2 --csv > "$out/machine-end.csv"
bw=$(tail -1 "$out/machine-end.csv" | cut -d, -f3)
peak=$(tail -1 "$out/machine-end.csv" | cut -d, -f4)
{
  $build/bench/bench_attention --batch 64 --len 8192 --kv-heads 4 --group 4 --bw "$bw" --peak "$peak" --reps 10
  $build/bench/bench_attention --batch 32 --len 8192 --kv-heads 16 --group 1 --bw "$bw" --peak "$peak" --reps 10 | tail -n +2
} > "$out/attention.csv"
echo done
