#!/bin/bash
# Batch-1 decode and 512-token prefill of quantized files, clade against
# llama.cpp on the same GGUF files and thread count, the engines
# alternating (which goes first alternates too), ROUNDS rounds.
# Each engine loads the weights both ways (LOAD="mmap read" by default):
#   mmap  clade's default (mapped, huge pages where the page cache allows)
#         against llama.cpp's `-lm mmap`;
#   read  clade `--no-mmap` (read into huge-page memory) against
#         llama.cpp's `-lm none` (read into its own buffers).
# CSV on stdout:
#   engine,file,what,load,threads,round,tokens_per_s
# usage: bench/peer/quant_side_by_side.sh BUILD_DIR FILE... [ROUNDS=3 THREADS=2 LOAD="mmap read" env]
#   e.g. the 8-layer benchmark model in F32, quantized by llama-quantize to
#   Q4_K_M and by `clade quantize` to Q8_0.
set -euo pipefail
build=$1
shift
rounds=${ROUNDS:-3}
clade=$build/tools/clade/clade
llama=$(bash "$(dirname "$0")/build_llama.sh")
export LD_LIBRARY_PATH=$llama${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
threads=${THREADS:-2}
loads=${LOAD:-mmap read}
for l in $loads; do
  case $l in mmap | read) ;; *) echo "LOAD: '$l' is not mmap or read" >&2; exit 2 ;; esac
done
echo "engine,file,what,load,threads,round,tokens_per_s"
for r in $(seq 1 "$rounds"); do
  for m in "$@"; do
    for what in decode prefill512; do
      for l in $loads; do
        cl=""; ll="-lm mmap"; [ $l = read ] && cl="--no-mmap" && ll="-lm none"
        order="clade llama"; [ $((r % 2)) -eq 0 ] && order="llama clade"
        for e in $order; do
          if [ $e = clade ] && [ $what = decode ]; then
            tps=$($clade bench decode -m "$m" --batch 1 --prefix 16 --gen 64 --mode flat --rounds 3 --threads $threads \
                  $cl --csv 2>/dev/null | tail -1 | cut -d, -f7)
          elif [ $e = clade ]; then
            tps=$($clade bench prefill -m "$m" --prompts 1 --lengths fixed:512 --mode packed --rounds 3 \
                  --threads $threads $cl --csv 2>/dev/null | tail -1 | cut -d, -f8)
          elif [ $what = decode ]; then
            tps=$("$llama/llama-bench" -m "$m" -p 0 -n 64 -t $threads -r 3 $ll -o csv 2>/dev/null | tail -1 |
                  awk -F, '{gsub(/"/, ""); print $(NF-1)}')
          else
            tps=$("$llama/llama-bench" -m "$m" -p 512 -n 0 -t $threads -r 3 $ll -o csv 2>/dev/null | tail -1 |
                  awk -F, '{gsub(/"/, ""); print $(NF-1)}')
          fi
          echo "$e,$(basename "$m"),$what,$l,$threads,$r,$tps"
        done
      done
    done
  done
done
