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
      # Phases 2 and 3: 240 more steps each from the previous weights,
      # without dropout, at lower peak rates (phase 1 alone left the target
      # above the draft).
      for phase in "2 4e-4 1235" "3 3e-4 1236"; do
        set -- $phase
        cp models/.kjv-target.pt "models/.kjv-target-phase$(($1 - 1)).pt"
        /usr/bin/python3 tools/train/train.py --preset target --resume "models/.kjv-target-phase$(($1 - 1)).pt" \
          --steps 240 --lr "$2" --dropout 0 --seed "$3" --out models/kjv-target-f16.gguf \
          --checkpoint models/.kjv-target.pt 2>&1 | tee "models/train-target-$1.log"
      done
    fi
  done
done
