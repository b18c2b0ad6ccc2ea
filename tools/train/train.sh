#!/bin/bash
# Train and export both shipped models (models/kjv-draft-f16.gguf,
# models/kjv-target-f16.gguf) from the King James Bible. Installs Debian's
# python3-torch, python3-numpy and bible-kjv when missing (as root).
# Usage: bash tools/train/train.sh [draft|target]...   (default: both)
set -euo pipefail
cd "$(dirname "$0")/../.."
need=()
/usr/bin/python3 -c "import torch, numpy" 2>/dev/null || need+=(python3-torch python3-numpy)
command -v bible >/dev/null || need+=(bible-kjv)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
mkdir -p models
/usr/bin/python3 tools/train/corpus.py --heldout models/kjv-heldout.txt
for preset in "${@:-draft target}"; do
  for p in $preset; do
    /usr/bin/python3 tools/train/train.py --preset "$p" --out "models/kjv-$p-f16.gguf" \
      --checkpoint "models/.kjv-$p.pt" 2>&1 | tee "models/train-$p.log"
    if [ "$p" = target ]; then
      # Phase 2: 240 more steps from phase 1's weights, without dropout, at
      # a lower peak rate (phase 1 alone left the target above the draft).
      cp models/.kjv-target.pt models/.kjv-target-phase1.pt
      /usr/bin/python3 tools/train/train.py --preset target --resume models/.kjv-target-phase1.pt \
        --steps 240 --lr 4e-4 --dropout 0 --seed 1235 --out models/kjv-target-f16.gguf \
        --checkpoint models/.kjv-target.pt 2>&1 | tee models/train-target-2.log
    fi
  done
done
