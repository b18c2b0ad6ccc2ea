#!/bin/bash
# A/B of CUDA backend settings on a GPU machine, in one call: the decode
# cases that issue 25's targets name, each setting in turn, the whole
# sequence twice (settings alternating, so that a drift of the machine
# shows as a difference between the rounds, not between the settings).
#
#   SETTING: X (the defaults) or NAME=VALUE[,NAME=VALUE...] (environment
#   variables of the CUDA backend, README.md "CUDA backend").
#   Cases: the GQA-4 model at batch 1 x prefix 2048 and 8192 and at batch
#   256 x 8192, the multi-head model at batch 32 x 8192, each shared, flat
#   and noattn (the attention part: a mode's step less noattn's). The
#   models of scripts/gpu_check.sh.
#
# Writes OUT: a header naming the GPU, the commit and the date, then per
# setting and round a "# SETTING round R" line and bench decode's CSVs.
# --prebuilt: build-gpu/ holds a scripts/gpu_bundle.sh bundle (as
# gpu_check.sh --prebuilt); else build-gpu/ is built here.
# usage: scripts/gpu_ab.sh [--prebuilt] OUT SETTING...
set -euo pipefail
cd "$(dirname "$0")/.."
prebuilt=0
[ "${1:-}" == "--prebuilt" ] && { prebuilt=1; shift; }
out=${1:?usage: gpu_ab.sh [--prebuilt] OUT SETTING...}
shift
[ $# -ge 1 ] || { echo "gpu_ab.sh: no SETTING given" >&2; exit 2; }
for s in "$@"; do
  [ "$s" == X ] || [[ "$s" =~ ^[A-Z_0-9]+=[^,]*(,[A-Z_0-9]+=[^,]*)*$ ]] ||
    { echo "gpu_ab.sh: setting '$s' is neither X nor NAME=VALUE[,NAME=VALUE...]" >&2; exit 2; }
done
# shellcheck source=scripts/gpu_lib.sh
source scripts/gpu_lib.sh
gpu_build $prebuilt
clade=build-gpu/tools/clade/clade
mkdir -p "$(dirname "$out")"
gpu_models $clade
common=(--backend cuda --past-context --gen 32 --rounds 3 --logits greedy --csv)
{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)," \
    "build $(cat build-gpu/COMMIT 2> /dev/null || git describe --always --dirty 2> /dev/null || echo unknown)"
  echo "# clade bench decode ${common[*]}; settings alternating in the order shown"
} > "$out"
for round in 1 2; do
  for s in "$@"; do
    envs=()
    [ "$s" == X ] || IFS=, read -r -a envs <<< "$s"
    echo "# $s round $round" >> "$out"
    # (the backend's settings in effect and any fallback, as # lines)
    run() {
      env "${envs[@]}" CLADE_CUDA_VERBOSE=1 $clade bench decode "$@" "${common[@]}" >> "$out" 2> "$out.err" ||
        { cat "$out.err" >&2; exit 1; }
      { grep '^clade cuda:' "$out.err" || true; } | sort -u | sed 's/^/# /' >> "$out"
    }
    run -m "$m4" --batch 1 --prefix 2048,8192 --mode shared,flat,noattn
    run -m "$m4" --batch 256 --prefix 8192 --mode shared,flat,noattn
    run -m "$m16" --batch 32 --prefix 8192 --mode shared,flat,noattn
  done
done
rm -f "$out.err"
cat "$out"
