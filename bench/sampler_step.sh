#!/bin/bash
# Issue 21's sampler bound: one clade_sample_batch call over 64 rows of a
# 128k vocabulary with top-p alone (bench_sampler's "top-p 0.95 only":
# temperature 0.8, top-k and min-p off, 2 threads) against one decode step
# of the 8-layer benchmark model at batch 64 (clade bench decode, flat,
# prefix 512), the two alternating round by round, so that both see the
# same minutes of a noisy machine. Prints each round and the medians, and
# the sampler's share of a step (the target: under 5%).
# Usage: bash bench/sampler_step.sh [L8_MODEL] [ROUNDS] [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-/tmp/bm/l8-f16.gguf}
rounds=${2:-5}
b=${3:-build}
[ -f "$model" ] || { echo "no model $model (clade model random, bench/README.md)" >&2; exit 2; }
$b/tools/clade/clade bench machine
smp=() step=()
for r in $(seq "$rounds"); do
  s=$($b/bench/bench_sampler --threads 2 --calls 20 --only "top-p 0.95 only" | awk '{for (i = 1; i < NF; i++) if ($i == "median") print $(i + 1)}')
  d=$($b/tools/clade/clade bench decode -m "$model" --batch 64 --threads 2 --csv 2>/dev/null |
    awk -F, '$1 == "flat" {print $9}')
  echo "round $r: sampler $s ms, step $d ms"
  smp+=("$s") step+=("$d")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
ms=$(median "${smp[@]}") md=$(median "${step[@]}")
awk -v s="$ms" -v d="$md" 'BEGIN {printf "median: sampler %.2f ms, step %.2f ms: %.1f%% of a step\n", s, d, 100 * s / d}'
