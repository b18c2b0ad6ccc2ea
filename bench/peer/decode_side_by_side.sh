#!/bin/bash
# Batch decode, clade against llama.cpp in one run (issue 24): the same
# GGUF file and thread count, point by point, the engines alternating
# (which one goes first alternates too: odd rounds reversed), each point
# ROUNDS times.
#   clade:     `clade bench decode --mode shared --rounds 1 --no-mmap`
#              (decode tokens/s of one step over G steps of B sequences
#              under a shared prefix of P tokens), and `clade bench prefill`
#              of the P-token prefix (its prefill tokens/s).
#   llama.cpp: `llama-batched-bench -pps -kvu` (the prompt prefilled once
#              and shared, unified KV: its best mode), S_TG and S_PP.
# Both count decode tokens/s as B x G / decode time.
# CSV on stdout (one line per engine, point and round):
#   engine,batch,prefix,gen,threads,round,decode_tokens_per_s,prefill_tokens_per_s
# then `python3 bench/peer/side_by_side_table.py CSV` gives medians and
# ratios, and `/usr/bin/python3 bench/plot.py` the plots.
#
# The model's context must hold the longest prefix (clade's prefill
# refuses positions past it): make it with `clade model random --ctx 16384`.
#
# usage: bench/peer/decode_side_by_side.sh BUILD_DIR MODEL [ROUNDS]
# env:   BATCHES (1,4,16,64,256), PREFIXES (512,2048,8192), GEN (32),
#        THREADS (2)
set -euo pipefail
build=$1 model=$2 rounds=${3:-3}
[ -x "$build/tools/clade/clade" ] || { echo "no $build/tools/clade/clade" >&2; exit 2; }
[ -f "$model" ] || { echo "no model $model" >&2; exit 2; }
clade=$build/tools/clade/clade
llama=$(bash "$(dirname "$0")/build_llama.sh")
threads=${THREADS:-2} gen=${GEN:-32}
IFS=, read -r -a batches <<< "${BATCHES:-1,4,16,64,256}"
IFS=, read -r -a prefixes <<< "${PREFIXES:-512,2048,8192}"

clade_point() {  # batch prefix -> "decode,prefill"
  local d p
  d=$("$clade" bench decode -m "$model" --batch "$1" --prefix "$2" --gen "$gen" --past-context --mode shared --rounds 1 \
        --threads "$threads" --no-mmap --csv 2>/dev/null | tail -1 | cut -d, -f7)
  p=$("$clade" bench prefill -m "$model" --prompts 1 --lengths "fixed:$2" --mode packed --rounds 1 \
        --threads "$threads" --no-mmap --csv 2>/dev/null | tail -1 | cut -d, -f8)
  echo "$d,$p"
}

llama_point() {  # batch prefix -> "decode,prefill"
  # the table row: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
  # (seen here: now and then the table comes without its row, exit status
  # 0; up to three tries)
  local v="" try
  for try in 1 2 3; do
    v=$(LD_LIBRARY_PATH="$llama${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$llama/llama-batched-bench" -m "$model" \
          -c $(($2 + $1 * gen + 64)) -b 2048 -ub 512 -npp "$2" -ntg "$gen" -npl "$1" -pps -kvu -t "$threads" \
          2>/dev/null | awk -F'|' -v b="$1" '$4 + 0 == b && $2 ~ /[0-9]/ {gsub(/ /, ""); print $9 "," $7}')
    [ -n "$v" ] && break
  done
  echo "$v"
}

echo "engine,batch,prefix,gen,threads,round,decode_tokens_per_s,prefill_tokens_per_s"
for r in $(seq 1 "$rounds"); do
  for p in "${prefixes[@]}"; do
    for b in "${batches[@]}"; do
      order="clade llama"
      [ $((r % 2)) -eq 0 ] && order="llama clade"
      for e in $order; do
        if [ "$e" = clade ]; then v=$(clade_point "$b" "$p"); else v=$(llama_point "$b" "$p"); fi
        [ -n "$v" ] && [ "$v" != "," ] || { echo "decode_side_by_side: $e gave nothing at batch $b prefix $p" >&2; exit 1; }
        echo "$e,$b,$p,$gen,$threads,$r,$v"
      done
    done
  done
done
