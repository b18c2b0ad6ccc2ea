#!/bin/bash
# Prefill of one prompt, clade against llama.cpp on the same GGUF files and
# thread count, the engines alternating point by point (which one goes
# first alternates too), each point repeated ROUNDS times (each time the
# engine's figure over 3 runs: clade --rounds 3 (median), llama-bench -r 3
# (mean)).
# CSV on stdout:
#   engine,type,prompt,threads,round,prefill_tokens_per_s
# usage: bench/peer/prefill_side_by_side.sh BUILD_DIR MODEL_DIR [ROUNDS]
#   MODEL_DIR holds l8-f16.gguf, l8-bf16.gguf, l8-q8_0.gguf (the 8-layer
#   benchmark model; `clade model random ... --vocab-from` a real vocabulary
#   so that llama.cpp loads them).
set -euo pipefail
build=$1 models=$2 rounds=${3:-3}
clade=$build/tools/clade/clade
llama=$(bash "$(dirname "$0")/build_llama.sh")
threads=${THREADS:-2}
echo "engine,type,prompt,threads,round,prefill_tokens_per_s"
for r in $(seq 1 "$rounds"); do
  for type in f16 bf16 q8_0; do
    for n in 512 2048; do
      m=$models/l8-$type.gguf
      order="clade llama"; [ $(( (r + n / 512) % 2 )) -eq 0 ] && order="llama clade"
      for e in $order; do
        if [ $e = clade ]; then
          tps=$($clade bench prefill -m "$m" --prompts 1 --lengths fixed:$n --mode packed --rounds 3 \
                --threads $threads --no-mmap --csv 2>/dev/null | tail -1 | cut -d, -f8)
        else
          tps=$("$llama/llama-bench" -m "$m" -p $n -n 0 -t $threads -r 3 -o csv 2>/dev/null | tail -1 |
                awk -F, '{gsub(/"/, ""); print $(NF-1)}')
        fi
        echo "$e,$type,$n,$threads,$r,$tps"
      done
    done
  done
done
