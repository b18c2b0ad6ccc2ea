#!/bin/bash
# One call on a lent GPU machine whose time is short (15 minutes a session,
# the start included): a scripts/gpu_bundle.sh bundle unpacked into
# build-gpu/, then, each step cut off at its share of SECONDS so that the
# call ends in time and what ran comes back:
#
#   1. test_cuda (every comparison against the CPU backend);
#   2. scripts/gpu_profile.sh: Nsight Compute of the attention kernels
#      (scripts/ncu_summary.py's summary in OUT/ncu-summary.txt);
#   3. scripts/gpu_ab.sh of the defaults against each SETTING given
#      (scripts/ab_summary.py's tables in OUT/ab-summary.md);
#   3b. split: decode steps whose graphs are timed on the device
#      (CLADE_CUDA_PASS_TIMES=1): batch 1 x 2048 shared and without
#      attention, batch 256 x 8192 shared; a step's wall time less its
#      graph's device time is the host's, the copies' and the wait's;
#   4. scripts/gpu_check.sh --prebuilt --no-sanitizers: the tests again
#      with SYNC and without PDL, the CLI test and the decode sweep whose
#      CSVs bench/README.md and README.md report (about 130 s on an H100);
#   4b. sample: top-k sampling (the library's defaults) of 256 sequences
#      under one 2048-token prompt, 64 tokens each, the steps' top-k
#      candidates read back against the whole rows, alternating, 2 rounds
#      (gpu_lib.sh's gpu_sample_ab);
#   4c. quant: Q4_0 and Q8_0 weights kept quantized (widened a tile at
#      each product) against widened to F16 at load, decode steps of batch
#      1 and 16 without attention, alternating, 2 rounds (gpu_lib.sh's
#      gpu_quant_ab);
#   5. compute-sanitizer memcheck, then racecheck (whose hazards inside
#      cuBLAS's nvjet kernels are not clade's: gpu_check.sh) on test_cuda,
#      with what time is left.
#
# Everything lands in OUT/session.tar.xz (on the device tool's machine:
# $OUT), with a log of each step and its exit status in OUT/session.log.
# --steps LIST: only the steps named, in the order named (comma-separated:
# test_cuda, profile, ab, split, sample, quant, gpu_check, memcheck,
# racecheck), for a session of short calls or one whose official run
# (gpu_check) must come first.
# usage: scripts/gpu_session.sh [--steps LIST] BUNDLE OUT SECONDS [SETTING...]
#   e.g. scripts/gpu_session.sh .gpu/B.tar.xz "$OUT" 540 CLADE_CUDA_MMA_MIN_CHUNK=512
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
steps=test_cuda,profile,ab,split,gpu_check,sample,quant,memcheck,racecheck
if [ "${1:-}" == "--steps" ]; then
  steps=${2:?gpu_session.sh: --steps needs a LIST}
  shift 2
  for s in ${steps//,/ }; do
    case $s in test_cuda | profile | ab | split | sample | quant | gpu_check | memcheck | racecheck) ;;
      *) echo "gpu_session.sh: unknown step '$s' (test_cuda, profile, ab, split, sample, quant, gpu_check," \
        "memcheck, racecheck)" >&2
        exit 2 ;;
    esac
  done
fi
bundle=${1:?usage: gpu_session.sh [--steps LIST] BUNDLE OUT SECONDS [SETTING...]}
out=${2:?usage: gpu_session.sh [--steps LIST] BUNDLE OUT SECONDS [SETTING...]}
seconds=${3:?usage: gpu_session.sh [--steps LIST] BUNDLE OUT SECONDS [SETTING...]}
shift 3
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 120 ]; then
  echo "gpu_session.sh: SECONDS must be a whole number of at least 120, not '$seconds'" >&2
  exit 2
fi
[ -f "$bundle" ] || { echo "gpu_session.sh: no bundle '$bundle'" >&2; exit 2; }
# OUT is emptied into the archive at the end: only a new or empty folder.
if [ -e "$out" ] && { [ ! -d "$out" ] || [ -n "$(ls -A "$out")" ]; }; then
  echo "gpu_session.sh: OUT '$out' must be a new or empty folder" >&2
  exit 2
fi
mkdir -p "$out"
t0=$(date +%s)
log() { echo "[t=$(($(date +%s) - t0))s] $*" | tee -a "$out/session.log"; }
left() { echo $((seconds - ($(date +%s) - t0))); }
# step NAME SHARE CMD...: runs CMD for at most SHARE seconds and never
# past the end (less 10 s to copy the results), its output in OUT/NAME.txt.
step() {
  local name=$1 share=$2
  shift 2
  local t
  t=$(left)
  t=$((t - 10 < share ? t - 10 : share))
  if [ $t -lt 15 ]; then
    log "$name: skipped, ${t}s left"
    return
  fi
  log "$name: up to ${t}s"
  timeout -k 5 "$t" "$@" > "$out/$name.txt" 2>&1
  log "$name: exit $?"
}
rm -rf build-gpu && mkdir -p build-gpu && tar xf "$bundle" -C build-gpu
log "bundle $(cat build-gpu/COMMIT 2> /dev/null || echo '(no COMMIT)'); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
# shellcheck source=scripts/gpu_lib.sh
source scripts/gpu_lib.sh
gpu_build 1
export CLADE_CUDA_PLUGIN=$PWD/build-gpu/libclade-cuda.so
# split_steps: the split step's decode runs, one process each (the graph
# lines come when its backend goes), their output one after another.
split_steps() {
  local clade=build-gpu/tools/clade/clade m4 m16
  gpu_models $clade
  local run=(bench decode --backend cuda --past-context --gen 32 --rounds 3 --logits greedy -m "$m4")
  for a in "--batch 1 --prefix 2048 --mode shared" "--batch 1 --prefix 2048 --mode noattn" \
    "--batch 256 --prefix 8192 --mode shared"; do
    echo "## clade ${run[*]} $a"
    # shellcheck disable=SC2086
    CLADE_CUDA_PASS_TIMES=1 $clade "${run[@]}" $a 2>&1
  done
}
sample_steps() {
  local clade=build-gpu/tools/clade/clade m4 m16
  gpu_models $clade
  gpu_sample_ab $clade "$m4" cuda 2048 256 64 2
}
quant_steps() { gpu_quant_ab build-gpu/tools/clade/clade cuda 2; }
export -f split_steps sample_steps quant_steps gpu_models gpu_sample_ab gpu_quant_ab
for s in ${steps//,/ }; do
  case $s in
    test_cuda) step test_cuda 90 build-gpu/tests/test_cuda ;;
    profile)
      # (GPU_PROFILE_CASES: the cases of gpu_profile.sh, all by default)
      # shellcheck disable=SC2086
      step profile 150 scripts/gpu_profile.sh --prebuilt "$out/prof" ${GPU_PROFILE_CASES:-}
      [ -d "$out/prof" ] && python3 scripts/ncu_summary.py "$out/prof" > "$out/ncu-summary.txt" 2>&1
      ;;
    ab)
      if [ $# -gt 0 ]; then
        step ab $((60 * $# + 60)) scripts/gpu_ab.sh --prebuilt "$out/gpu-ab.txt" X "$@"
        [ -s "$out/gpu-ab.txt" ] && python3 scripts/ab_summary.py "$out/gpu-ab.txt" > "$out/ab-summary.md" 2>&1
      else
        log "ab: skipped, no SETTING given"
      fi
      ;;
    split) step split 90 bash -c split_steps ;;
    sample) step sample 45 bash -c sample_steps ;;
    quant) step quant 75 bash -c quant_steps ;;
    gpu_check) step gpu_check 200 scripts/gpu_check.sh --prebuilt --no-sanitizers ;;
    memcheck) step memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 1 build-gpu/tests/test_cuda ;;
    racecheck) step racecheck 240 compute-sanitizer --tool racecheck build-gpu/tests/test_cuda ;;
  esac
done
for f in bench/results/gpu-machine.csv bench/results/gpu-machine-torch.csv bench/results/gpu-decode-kv4.csv \
  bench/results/gpu-decode-kv16.csv bench/results/gpu-decode-kv4-greedy.csv; do
  [ -f "$f" ] && cp "$f" "$out/"
done
# The device tool brings back at most 8 files: everything in one archive,
# the log beside it.
if tar -C "$out" -cJf "/tmp/session.$$.tar.xz" . &&
  find "$out" -mindepth 1 -maxdepth 1 ! -name session.log -exec rm -rf {} + &&
  mv "/tmp/session.$$.tar.xz" "$out/session.tar.xz"; then
  log "done: OUT/session.tar.xz"
else
  log "done; the archive failed, the files are as they were written"
fi
