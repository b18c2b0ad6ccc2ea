#!/bin/bash
# Speculative decoding on the trained pair (models/), greedy, the modes
# alternating round by round (clade bench spec): batch 1 over several
# prompts of held-out text, chains against trees of the same verification
# budget (fixed lengths), a prompt that repeats its own passage (prompt
# lookup's case), batches 16 and 64 under a shared prefix; then the step
# costs of the target and of the 8-layer benchmark model for the
# formula's prediction.
# Usage: bash bench/spec.sh OUT_DIR [L8_MODEL]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/spec.sh OUT_DIR [L8_MODEL]}
l8=${2:-}
mkdir -p "$out"
C=build/tools/clade/clade
T=models/kjv-target-f16.gguf
D=models/kjv-draft-f16.gguf
H=models/kjv-heldout.txt
M=plain,lookup,lookup-tree,draft,draft-tree
$C bench machine --csv > "$out/spec-machine.csv"
# batch 1: three prompts (offsets into the held-out text), 256 new tokens
head -c 60000 "$H" | tail -c 20000 > "$out/.text2"
head -c 120000 "$H" | tail -c 20000 > "$out/.text3"
for t in "$H" "$out/.text2" "$out/.text3"; do
  $C bench spec -m $T --draft-model $D --text "$t" --batch 1 --prefix 128 --gen 256 \
    --mode $M --rounds 9 --csv
done > "$out/spec-b1.csv.tmp"
{ head -1 "$out/spec-b1.csv.tmp"; grep -v '^batch' "$out/spec-b1.csv.tmp"; } > "$out/spec-b1.csv"
rm -f "$out/spec-b1.csv.tmp"
# chains against trees (width 2) of the same budget K, every step drafting
for k in 4 8; do
  for t in "$H" "$out/.text2" "$out/.text3"; do
    $C bench spec -m $T --draft-model $D --text "$t" --batch 1 --prefix 128 --gen 256 \
      --mode $M --draft-max $k --draft-tree 2 --draft-fixed --rounds 5 --csv
  done
done > "$out/spec-b1-fixed.csv.tmp"
{ head -1 "$out/spec-b1-fixed.csv.tmp"; grep -v '^batch' "$out/spec-b1-fixed.csv.tmp"; } > "$out/spec-b1-fixed.csv"
rm -f "$out/spec-b1-fixed.csv.tmp" "$out/.text2" "$out/.text3"
# a prompt whose branch restarts the prefix's passage
$C bench spec -m $T --draft-model $D --text "$H" --batch 1 --prefix 160 --gen 256 --repeat \
  --mode $M --rounds 9 --csv > "$out/spec-repeat.csv"
# batches under a shared prefix
$C bench spec -m $T --draft-model $D --text "$H" --batch 16,64 --prefix 128 --gen 128 \
  --mode $M --rounds 7 --csv > "$out/spec-batch.csv"
# the target's step costs: a plain step and a verify step of k + 1 tokens
for k in 1 2 4 8; do
  $C bench spec -m $T --batch 1 --prefix 128 --gen 128 --mode plain,verify-cost --draft-max $k --rounds 5 --csv
done > "$out/spec-kjv-costs.csv.tmp"
{ head -1 "$out/spec-kjv-costs.csv.tmp"; grep -v '^batch' "$out/spec-kjv-costs.csv.tmp"; } > "$out/spec-kjv-costs.csv"
rm -f "$out/spec-kjv-costs.csv.tmp"
# the 8-layer benchmark model's step costs: a plain step and a verify step
# of k + 1 tokens (fixed-length lookup on a repeating prompt)
if [ -n "$l8" ]; then
  for k in 1 2 4 8; do
    $C bench spec -m "$l8" --batch 1 --prefix 128 --gen 64 --mode plain,verify-cost \
      --draft-max $k --rounds 3 --csv
  done > "$out/spec-l8-costs.csv.tmp"
  { head -1 "$out/spec-l8-costs.csv.tmp"; grep -v '^batch' "$out/spec-l8-costs.csv.tmp"; } > "$out/spec-l8-costs.csv"
  rm -f "$out/spec-l8-costs.csv.tmp"
fi
