#!/bin/bash
# A constrained decode step against a plain one (issue 43's "at most 3%
# slower at batch 64, 5% at batch 1"): `clade generate` with a schema whose
# text is long (bench/schemas/note_long.json, jump-forward off, so every
# step is a masked step), with no grammar (--ignore-eos, the same token
# count), and with the schema but whole rows masked and sampled
# (CLADE_SAMPLE_WHOLE_ROWS=1, the plain path the masked top-k is checked
# against), alternating, ROUNDS times. Prints the generation seconds the
# CLI reports (model load and prompt excluded) and each constrained run
# over the plain run of its round.
#
# usage: bench/grammar_step.sh BUILD MODEL [SEQS (64)] [TOKENS (32)] [ROUNDS (10)] [-- EXTRA FLAGS]
# e.g.   bench/grammar_step.sh build l8-f16.gguf 64 32 10 -- --temp 1
set -euo pipefail
build=$1 model=$2
seqs=${3:-64} toks=${4:-32} rounds=${5:-10}
shift $(( $# < 5 ? $# : 5 ))
[ "${1:-}" = "--" ] && shift
clade=$build/tools/clade/clade
schema=$(dirname "$0")/schemas/note_long.json
common=(generate -m "$model" -p "Record:" --samples "$seqs" -n "$toks" --threads 2 --json "$@")
secs() { sed -n 's/.*generated in \([0-9.]*\) s.*/\1/p'; }
echo "round,masked_s,none_s,whole_rows_s,masked_over_none,whole_rows_over_none"
for r in $(seq "$rounds"); do
  a=$("$clade" "${common[@]}" --json-schema "$schema" --no-jump 2>&1 >/dev/null | secs)
  b=$("$clade" "${common[@]}" --ignore-eos 2>&1 >/dev/null | secs)
  c=$(CLADE_SAMPLE_WHOLE_ROWS=1 "$clade" "${common[@]}" --json-schema "$schema" --no-jump 2>&1 >/dev/null | secs)
  awk -v r="$r" -v a="$a" -v b="$b" -v c="$c" 'BEGIN { printf "%d,%s,%s,%s,%.4f,%.4f\n", r, a, b, c, a / b, c / b }'
done
