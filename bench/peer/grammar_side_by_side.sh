#!/bin/bash
# Per-token cost of structured output, clade against llama.cpp's grammar
# sampling (issue 43): the same GGUF file, prompt, schema, sampler, thread
# count and token count, each engine with and without the schema, the four
# runs alternating in every round (odd rounds in one order, even rounds in
# the reverse one), after one unprinted warm-up round.
#   clade:     `clade generate --json-schema FILE --no-jump --ignore-eos -n N`
#              (no jump-forward: every token sampled, the mask applied), its
#              generation time from its stderr line (first token to last).
#   llama.cpp: llama-server's /completion with `json_schema` and
#              `ignore_eos`, its `timings.predicted_ms` (first token to last);
#              one server for the whole run, prompt cache off.
# Neither clock holds the grammar's compile (clade's comes before its
# prompt, llama.cpp's before the request's first token).
# Both sample with temperature 1 and top-k 40 (top-p 1, min-p 0), seed = round.
# Milliseconds per token = generation seconds / (tokens - 1): both clocks
# start when the first token is out, so they cover tokens - 1 steps. The
# per-token overhead of constraining is constrained minus free, per engine.
# The schema must not let the output end before N tokens (the default one
# asks for a string of at least 1500 characters); the script stops when an
# engine does not give exactly N tokens, or when a constrained output does
# not start with the schema's first key.
# CSV on stdout, one line per engine, case and round:
#   engine,constrained,round,tokens,gen_seconds,ms_per_token
# then `python3 bench/peer/grammar_table.py CSV` gives the medians and the
# ratio of the overheads.
#
# usage: bench/peer/grammar_side_by_side.sh BUILD_DIR MODEL [ROUNDS (5)]
# env:   SCHEMA (bench/schemas/note_long.json), TOKENS (160), THREADS (1),
#        PROMPT ("The note:"), PORT (8093)
set -euo pipefail
shopt -s inherit_errexit
build=$1 model=$2 rounds=${3:-5}
here=$(cd "$(dirname "$0")" && pwd)
schema=${SCHEMA:-$here/../schemas/note_long.json}
n=${TOKENS:-160} threads=${THREADS:-1} prompt=${PROMPT:-The note:} port=${PORT:-8093}
clade=$build/tools/clade/clade
[ -x "$clade" ] || { echo "no $clade" >&2; exit 2; }
[ -f "$model" ] || { echo "no model $model" >&2; exit 2; }
[ -f "$schema" ] || { echo "no schema $schema" >&2; exit 2; }
first_key=$(python3 -c 'import json,sys; print(next(iter(json.load(open(sys.argv[1]))["properties"])))' "$schema")
llama=$(bash "$here/build_llama.sh")
tmp=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

LD_LIBRARY_PATH="$llama${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$llama/llama-server" -m "$model" -c 4096 -np 1 \
  -t "$threads" -tb "$threads" --port "$port" --host 127.0.0.1 --no-webui --cache-ram 0 >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { echo "llama-server ended:" >&2; tail -20 "$tmp/server.log" >&2; exit 1; }
  sleep 0.2
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "llama-server did not come up" >&2; exit 1; }

check() {  # engine constrained tokens text-prefix
  [ "$3" -eq "$n" ] || { echo "grammar_side_by_side: $1 (constrained $2) gave $3 tokens, not $n" >&2; exit 1; }
  if [ "$2" = 1 ] && [[ "$4" != '{'*"\"$first_key\""* ]]; then
    echo "grammar_side_by_side: $1's constrained output does not start with the schema: $4" >&2
    exit 1
  fi
}

clade_run() {  # constrained seed -> "tokens,seconds"
  local args=(generate -m "$model" -p "$prompt" -n "$n" --ignore-eos --temp 1 --top-k 40 --top-p 1 --min-p 0
              --seed "$2" --threads "$threads" --json)
  [ "$1" = 1 ] && args+=(--json-schema "$schema" --no-jump)
  "$clade" "${args[@]}" >"$tmp/out" 2>"$tmp/err" || { echo "clade failed:" >&2; cat "$tmp/err" >&2; exit 1; }
  local line tokens secs text
  line=$(grep 'tokens generated in' "$tmp/err" | tail -1)
  tokens=$(sed -n 's/.*, \([0-9]*\) tokens generated in \([0-9.]*\) s.*/\1/p' <<<"$line")
  secs=$(sed -n 's/.*, \([0-9]*\) tokens generated in \([0-9.]*\) s.*/\2/p' <<<"$line")
  text=$(python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).readline()); print(len(d["tokens"])); print(d.get("text","")[:40])' "$tmp/out")
  [ "$(head -1 <<<"$text")" = "$tokens" ] || { echo "clade: $tokens tokens on stderr, $(head -1 <<<"$text") in the JSON" >&2; exit 1; }
  check clade "$1" "$tokens" "$(sed -n 2p <<<"$text")"
  echo "$tokens,$secs"
}

llama_run() {  # constrained seed -> "tokens,seconds"
  python3 - "$1" "$2" "$schema" "$prompt" "$n" "$port" >"$tmp/llama" <<'EOF'
import json, sys, urllib.request
c, seed, schema, prompt, n, port = sys.argv[1:]
body = {"prompt": prompt, "n_predict": int(n), "ignore_eos": True, "temperature": 1.0, "top_k": 40,
        "top_p": 1.0, "min_p": 0.0, "seed": int(seed), "cache_prompt": False, "stream": False}
if c == "1":
    body["json_schema"] = json.load(open(schema))
req = urllib.request.Request("http://127.0.0.1:%s/completion" % port, json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
r = json.load(urllib.request.urlopen(req, timeout=600))
t = r["timings"]
print(t["predicted_n"], r["tokens_predicted"], "%.6f" % (t["predicted_ms"] / 1e3))
print(r["content"][:40].replace("\n", " "))
EOF
  local tokens tokens2 secs
  read -r tokens tokens2 secs < <(head -1 "$tmp/llama")
  [ "$tokens" = "$tokens2" ] || { echo "llama: timings say $tokens tokens, tokens_predicted $tokens2" >&2; exit 1; }
  check llama "$1" "$tokens" "$(sed -n 2p "$tmp/llama")"
  echo "$tokens,$secs"
}

echo "engine,constrained,round,tokens,gen_seconds,ms_per_token"
for r in $(seq 0 "$rounds"); do
  order="clade:0 llama:0 clade:1 llama:1"
  [ $((r % 2)) -eq 0 ] && order="llama:1 clade:1 llama:0 clade:0"
  for ec in $order; do
    e=${ec%:*} c=${ec#*:}
    if [ "$e" = clade ]; then v=$(clade_run "$c" "$r"); else v=$(llama_run "$c" "$r"); fi
    [ "$r" -eq 0 ] && continue  # the warm-up round
    awk -F, -v e="$e" -v c="$c" -v r="$r" '{printf "%s,%s,%s,%d,%.3f,%.3f\n", e, c, r, $1, $2, $2 * 1000 / ($1 - 1)}' <<<"$v"
  done
done
