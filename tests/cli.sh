#!/bin/bash
# The clade CLI end to end on a tiny random model: a prompt tree decoded with
# shared and with flat attention gives the same greedy tokens; the JSON names
# each leaf's prompt; `--backend cuda` gives the same tokens or, without a
# device, a clean error; `bench decode` and `bench prefill` write their
# documented CSV; with a vocabulary, the sampler flags, --json lines, stop
# strings, --chat and a three-turn `clade chat` work; bad input is a clean
# error (exit 1 with a message, or for a bad option exit 2 with one line
# naming the flag), never a crash.
# usage: cli.sh PATH_TO_CLADE
set -uo pipefail
cli=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$cli" model random -o "$dir/m.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 --vocab 300 \
  --type f16 > /dev/null || { echo "FAIL: model random"; exit 1; }
# The file is written under a temporary name and renamed: none is left.
[ -z "$(ls -A "$dir" | grep -v '^m\.gguf$')" ] || fail "model random left other files: $(ls -A "$dir")"
# The shape is checked against the model's limits before anything is built
# (a 100000-wide model would need tens of GiB): exit 2 at once, one line
# naming the flag, no file.
for bad in "--dim 100000:--dim" "--dim 50000 --heads 2:--heads" "--heads 3:--heads" "--kv-heads 3:--kv-heads" \
    "--ctx 2147483648:--ctx" "--layers 0:--layers" "--dim 8192 --heads 64 --layers 1000:MiB"; do
  out=$(timeout 10 "$cli" model random -o "$dir/bad.gguf" ${bad%%:*} 2>&1); rc=$?
  [ $rc -eq 2 ] && [[ "$out" == *"${bad##*:}"* ]] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] ||
    fail "model random ${bad%%:*}: exit $rc, expected 2 and one line naming ${bad##*:}: $out"
  [ ! -e "$dir/bad.gguf" ] || fail "model random ${bad%%:*} left a file"
done
# A run killed while writing leaves nothing under the target's name.
"$cli" model random -o "$dir/killed.gguf" --dim 1024 --layers 16 --vocab 32000 > /dev/null 2>&1 &
sleep 0.3
kill -9 $! 2> /dev/null
wait $! 2> /dev/null; rc=$?
[ $rc -eq 0 ] || [ ! -e "$dir/killed.gguf" ] || fail "a killed model random left a partial killed.gguf"
rm -f "$dir"/.killed.gguf.tmp-* "$dir/killed.gguf"

# model info: what the file holds and what clade made of it, for llama and
# qwen2 (tests/test_families.cpp checks it on each family's file).
info=$("$cli" model info "$dir/m.gguf") || fail "model info"
for want in "architecture   llama" "family         clade-random" "status         runs" "context        4096" \
    "rope           normal" "output         separate" "qkv_bias       no" "tokenizer      none" \
    "tensors        21: f16 16, f32 5"; do
  [[ "$info" == *"$want"* ]] || fail "model info lacks '$want':
$info"
done
"$cli" model random -o "$dir/q.gguf" --arch qwen2 --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 \
  --vocab 300 > /dev/null || fail "model random --arch qwen2"
info=$("$cli" model info "$dir/q.gguf") || fail "model info qwen2"
for want in "architecture   qwen2" "rope           neox" "qkv_bias       yes" "tensors        27: f16 16, f32 11"; do
  [[ "$info" == *"$want"* ]] || fail "model info (qwen2) lacks '$want':
$info"
done
rm -f "$dir/q.gguf"

gen() { "$cli" generate -m "$dir/m.gguf" --tokens "1 2 3" --tokens "4 5|6 7" --samples 2 -n 12 --threads 2 "$@" 2> /dev/null; }
shared=$(gen --attention shared) || fail "generate shared"
flat=$(gen --attention flat) || fail "generate flat"
[ "$(printf '%s\n' "$shared" | wc -l)" -eq 4 ] || fail "4 sequences expected, got: $shared"
[ "$shared" == "$flat" ] || fail "shared and flat differ:
$shared
---
$flat"
# --no-mmap: the weights read into memory of the model's own give the same tokens.
read=$(gen --attention shared --no-mmap) || fail "generate --no-mmap"
[ "$read" == "$shared" ] || fail "--no-mmap decoded differently:
$read
---
$shared"
# Greedy: the two samples of a leaf agree; the two leaves differ.
mapfile -t lines <<< "$shared"
[ "${lines[0]}" == "${lines[1]}" ] && [ "${lines[2]}" == "${lines[3]}" ] || fail "samples of a leaf differ under greedy"
[ "${lines[0]}" != "${lines[2]}" ] || fail "the two leaves decoded the same tokens"
# The CUDA backend: the same tokens as the CPU where a device is usable (an
# F32 model: with F16 weights cuBLAS narrows the activations to f16, and a
# near tie can then decode differently); elsewhere, or in a build without
# CUDA, exit 1 with the message naming what is missing: the plugin (a
# build without CUDA), its runtime or a device (any other failure is one).
"$cli" model random -o "$dir/m32.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 --vocab 300 \
  --type f32 > /dev/null || fail "model random f32"
gen32() { "$cli" generate -m "$dir/m32.gguf" --tokens "1 2 3" --tokens "4 5|6 7" --samples 2 -n 12 --threads 2 "$@"; }
if cuda=$(gen32 --backend cuda 2> "$dir/cuda.err"); then
  cpu=$(gen32 2> /dev/null) || fail "generate f32"
  [ "$cuda" == "$cpu" ] || fail "CUDA and CPU tokens differ:
$cuda
---
$cpu"
else
  rc=$?
  [ $rc -eq 1 ] && grep -qE "no CUDA device|no CUDA plugin|no CUDA runtime|has no CUDA backend" "$dir/cuda.err" ||
    fail "--backend cuda failed other than for a missing device: exit $rc: $(cat "$dir/cuda.err")"
fi
# bench machine --backend cuda: the GPU's ceilings, or the same clean
# failure without one.
if peaks=$("$cli" bench machine --backend cuda --csv 2> "$dir/peaks.err"); then
  [ "$(head -1 <<< "$peaks")" == "gpu,copy_gb_s,f16_tflop_s" ] || fail "bench machine --backend cuda header: $peaks"
  IFS=, read -r _ bw tf <<< "$(tail -1 <<< "$peaks")"
  awk -v a="$bw" -v b="$tf" 'BEGIN { exit !(a > 10 && b > 1) }' || fail "bench machine --backend cuda: $peaks"
else
  rc=$?
  [ $rc -eq 1 ] && grep -E "no CUDA device|no CUDA plugin|no CUDA runtime|has no CUDA backend" "$dir/peaks.err" \
    > /dev/null || fail "bench machine --backend cuda failed other than for a missing device: $(cat "$dir/peaks.err")"
fi
json=$(gen --json) || fail "generate --json"
grep -q '"prompt":"1 2 3 4 5"' <<< "$json" || fail "JSON prompt of the first leaf: $json"
grep -q '"prompt":"1 2 3 6 7"' <<< "$json" || fail "JSON prompt of the second leaf: $json"

csv=$("$cli" bench decode -m "$dir/m.gguf" --batch 1,3 --prefix 20 --mode shared,flat,noattn --gen 4 --rounds 2 \
  --threads 2 --csv 2> /dev/null) || fail "bench decode"
header="mode,batch,prefix,suffix,gen,threads,tokens_per_s,ms_per_step,ms_median,rounds,attn_ms,round_attn_ms"
[ "$(head -1 <<< "$csv")" == "$header" ] || fail "bench decode header: $(head -1 <<< "$csv")"
[ "$(wc -l <<< "$csv")" -eq 7 ] || fail "bench decode: 6 rows expected: $csv"
while IFS=, read -r mode batch prefix suffix g threads tps ms med rounds attn attn_rounds; do
  [ "$prefix" == 20 ] && [ "$g" == 4 ] && [ "$rounds" == 2 ] || fail "bench decode row: $mode,$batch,$prefix,$g,$rounds"
  awk -v a="$ms" -v b="$med" 'BEGIN { exit !(a > 0 && b >= a) }' || fail "bench decode times: best $ms median $med"
  # one attention part per round; the median is one of them
  n=$(tr ';' '\n' <<< "$attn_rounds" | wc -l)
  [ "$n" -eq "$rounds" ] || fail "bench decode: $n per-round parts for $rounds rounds: $attn_rounds"
  tr ';' '\n' <<< "$attn_rounds" | grep -x -- "$attn" >/dev/null || fail "bench decode: median $attn not among $attn_rounds"
  if [ "$mode" == noattn ]; then [ "$attn_rounds" == "0.000;0.000" ] || fail "noattn attention parts $attn_rounds"; fi
done < <(tail -n +2 <<< "$csv")

# --logits greedy: steps return their greedy tokens (clade_batch.argmax),
# the same rows as with the logits.
csv=$("$cli" bench decode -m "$dir/m.gguf" --batch 3 --prefix 20 --mode shared,flat --gen 3 --rounds 1 \
  --threads 2 --logits greedy --csv 2> /dev/null) || fail "bench decode --logits greedy"
[ "$(head -1 <<< "$csv")" == "$header" ] || fail "bench decode --logits greedy header: $(head -1 <<< "$csv")"
[ "$(wc -l <<< "$csv")" -eq 3 ] || fail "bench decode --logits greedy: 2 rows expected: $csv"

# --machine: the point's best bandwidth and peak, then per round the first
# readings and, per mode, the reads between its steps (all positive).
csv=$("$cli" bench decode -m "$dir/m.gguf" --batch 2 --prefix 20 --mode shared,noattn --gen 3 --rounds 2 \
  --threads 2 --machine --no-mmap --csv 2> /dev/null) || fail "bench decode --machine --no-mmap"
header="mode,batch,prefix,suffix,gen,threads,tokens_per_s,ms_per_step,ms_median,rounds,attn_ms,read_bandwidth_gb_s,"
header+="gemm_gflop_s,round_attn_ms,round_bw_gb_s,round_gflop_s,round_step_bw_gb_s"
[ "$(head -1 <<< "$csv")" == "$header" ] || fail "bench decode --machine header: $(head -1 <<< "$csv")"
[ "$(wc -l <<< "$csv")" -eq 3 ] || fail "bench decode --machine: 2 rows expected: $csv"
while IFS=, read -r mode _ _ _ _ _ _ _ _ rounds _ bw peak _ rbw rpeak sbw; do
  awk -v a="$bw" -v b="$peak" 'BEGIN { exit !(a > 0 && b > 0) }' || fail "--machine $mode: bandwidth $bw peak $peak"
  for list in "$rbw" "$rpeak" "$sbw"; do
    [ "$(tr ';' '\n' <<< "$list" | wc -l)" -eq "$rounds" ] || fail "--machine $mode: $list for $rounds rounds"
    tr ';' '\n' <<< "$list" | awk '!($1 > 0) { exit 1 }' || fail "--machine $mode: non-positive reading in $list"
  done
done < <(tail -n +2 <<< "$csv")

# bench prefill: its header, one row per requested mode in the order given,
# the prompts' own token count, positive figures.
pf_header="mode,prompts,total_tokens,parent_tokens,chunk,threads,seconds,tokens_per_s,peak_bytes"
pf_rows() {  # pf_rows CSV MODES PROMPTS TOTAL PARENT CHUNK
  [ "$(head -1 <<< "$1")" == "$pf_header" ] || fail "bench prefill header: $(head -1 <<< "$1")"
  [ "$(tail -n +2 <<< "$1" | cut -d, -f1 | paste -sd,)" == "$2" ] || fail "bench prefill: rows for $2 expected: $1"
  while IFS=, read -r mode prompts total parent chunk threads secs tps peak; do
    [ "$prompts,$parent,$chunk,$threads" == "$3,$5,$6,2" ] || fail "bench prefill $mode row: $prompts,$parent,$chunk,$threads"
    [ -z "$4" ] || [ "$total" == "$4" ] || fail "bench prefill $mode: total_tokens $total, want $4"
    awk -v t="$total" -v s="$secs" -v r="$tps" -v p="$peak" 'BEGIN { exit !(t > 0 && s > 0 && r > 0 && p > 0) }' ||
      fail "bench prefill $mode: non-positive figure: $total,$secs,$tps,$peak"
  done < <(tail -n +2 <<< "$1")
}
pf() { "$cli" bench prefill -m "$dir/m.gguf" --threads 2 --rounds 2 --csv "$@" 2> /dev/null; }
csv=$(pf --prompts 5 --lengths uniform:1:20 --parent-tokens 8 --batch 2 --chunk 16 --mode packed,padded,serial) ||
  fail "bench prefill"
pf_rows "$csv" packed,padded,serial 5 "" 8 16
csv=$(pf --prompts 7 --lengths lognormal:6:40 --mode serial,packed --seed 3) || fail "bench prefill lognormal"
pf_rows "$csv" serial,packed 7 "" 0 1024
again=$(pf --prompts 7 --lengths lognormal:6:40 --mode packed --seed 3) || fail "bench prefill lognormal again"
[ "$(tail -1 <<< "$again" | cut -d, -f3)" == "$(tail -1 <<< "$csv" | cut -d, -f3)" ] ||
  fail "bench prefill: the same --seed drew other lengths: $csv / $again"
printf '3\n7\n\n5\n' > "$dir/lengths.txt"
csv=$(pf --lengths "file:$dir/lengths.txt" --mode padded --batch 3) || fail "bench prefill file:"
pf_rows "$csv" padded 3 15 0 1024
csv=$(pf --prompts 4 --lengths fixed:6 --mode packed --chunk 4) || fail "bench prefill fixed"
pf_rows "$csv" packed 4 24 0 4
# A bad option: exit 2 and one line naming the flag.
expect_flag_error() {
  local flag=$1
  shift
  out=$("$cli" bench prefill "$@" 2>&1)
  rc=$?
  [ $rc -eq 2 ] || fail "bench prefill $*: exit $rc (want 2): $out"
  [ "$(wc -l <<< "$out")" -eq 1 ] && grep -q -- "$flag" <<< "$out" || fail "bench prefill $*: message without $flag: $out"
}
for bad in lognormal:5 uniform:9:3 fixed:0 fixed:x normal:4 "file:$dir/none.txt"; do
  expect_flag_error --lengths -m "$dir/m.gguf" --prompts 2 --lengths "$bad"
done
expect_flag_error --mode -m "$dir/m.gguf" --prompts 2 --lengths fixed:4 --mode packed,bogus
expect_flag_error --prompts -m "$dir/m.gguf" --prompts 0 --lengths fixed:4
expect_flag_error --batch -m "$dir/m.gguf" --prompts 2 --lengths fixed:4 --batch -1
expect_flag_error -m --prompts 2 --lengths fixed:4

# Text: a random model with the Llama 2 vocabulary and the ChatML template
# (`model random --chat-template`): every sampler flag of `generate`, --json
# lines, a stop string, --chat, and `clade chat` holding three turns with each
# token evaluated once. The vocabulary is in the repository (tests/data/vocab,
# CLADE_VOCAB_DIR overrides): without it these checks fail.
vocab="${CLADE_VOCAB_DIR:-$(cd "$(dirname "$0")" && pwd)/data/vocab}/ggml-vocab-llama-spm.gguf"
if [ -f "$vocab" ]; then
  "$cli" model random -o "$dir/v.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 --type f16 \
    --vocab-from "$vocab" --chat-template chatml > /dev/null 2>&1 || fail "model random --chat-template"
  vg() { "$cli" generate -m "$dir/v.gguf" -p "Once upon a time" -n 8 --threads 2 "$@" 2> /dev/null; }
  for flags in "--top-k 5" "--top-p 0.5" "--min-p 0.2" "--repeat-penalty 1.3" "--presence-penalty 0.5" \
    "--frequency-penalty 0.5" "--seed 9" "--stop zzz" "--logprobs 1" "--chat" "--chat --template chatml"; do
    # shellcheck disable=SC2086
    out=$(vg --temp 0.9 $flags) && [ -n "$out" ] || fail "generate $flags: $out"
  done
  [ "$(vg --temp 0.9 --seed 1)" == "$(vg --temp 0.9 --seed 1)" ] || fail "generate: one seed, two texts"
  [ "$(vg --temp 0.9 --seed 1 -n 16)" != "$(vg --temp 0.9 --seed 2 -n 16)" ] || fail "generate: --seed changes nothing"
  [ "$(vg --logprobs 1 | tail -1 | cut -d' ' -f1)" == logprobs ] || fail "generate --logprobs 1: no logprobs line"
  # --json: one object a line, with the fields asked for.
  json=$(vg -p " in a land| far away" --samples 2 --temp 0.9 --top-k 20 --json --logprobs 1) || fail "generate --json"
  /usr/bin/python3 -c '
import json, sys
lines = sys.stdin.read().splitlines()
assert len(lines) == 4, lines
for i, l in enumerate(lines):
    o = json.loads(l)
    assert o["id"] == i and o["leaf"] == i // 2, o
    assert o["prompt"] == ["Once upon a time in a land", "Once upon a time far away"][i // 2], o
    assert isinstance(o["text"], str) and o["finish_reason"] in ("stop", "stop_string", "length"), o
    assert len(o["logprobs"]) == len(o["tokens"]) > 0 and all(p <= 0 for p in o["logprobs"]), o
' <<< "$json" || fail "generate --json lines: $json"
  # A stop string cuts the greedy text before it, and is not printed.
  full=$(vg -n 24 --json) || fail "generate -n 24"
  stop=$(/usr/bin/python3 -c 'import json,sys; t = json.loads(sys.stdin.read())["text"]; print(t[8:12])' <<< "$full")
  cut=$(vg -n 24 --json --stop "$stop") || fail "generate --stop"
  /usr/bin/python3 -c '
import json, sys
full, cut, stop = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
assert stop and cut["text"] == full["text"][:full["text"].index(stop)], (full, cut, stop)
assert cut["finish_reason"] == "stop_string", cut
' "$full" "$cut" "$stop" || fail "--stop '$stop' did not cut: $full / $cut"
  # Bad values: exit 2, one line naming the flag.
  expect_gen_flag_error() {
    local flag=$1
    shift
    out=$("$cli" generate -m "$dir/v.gguf" -p "Hi" "$@" 2>&1)
    rc=$?
    [ $rc -eq 2 ] || fail "generate $*: exit $rc (want 2): $out"
    [ "$(wc -l <<< "$out")" -eq 1 ] && grep -q -- "$flag" <<< "$out" || fail "generate $*: message without $flag: $out"
  }
  for bad in "--temp -1" "--temp x" "--top-k -1" "--top-p 0" "--top-p 1.5" "--min-p -0.1" "--min-p 2" \
    "--repeat-penalty 0" "--presence-penalty 1000" "--frequency-penalty nan" "--seed -3" "--seed x" \
    "--logprobs -1" "--logprobs 21" "--template nope"; do
    # shellcheck disable=SC2086
    expect_gen_flag_error "${bad%% *}" $bad
  done
  expect_gen_flag_error --stop --stop ""
  expect_gen_flag_error --chat --chat -p "two levels"
  expect_gen_flag_error --chat --chat -p "a|b"
  expect_gen_flag_error --template --template chatml
  # clade chat: three turns, each answer one line of stdout; the tokens
  # evaluated add up to the conversation's length (nothing twice).
  printf 'Hello there\nWhat is your name?\nTell me a story.\n' |
    "$cli" chat -m "$dir/v.gguf" -n 12 --seed 5 --threads 2 --verbose > "$dir/chat.out" 2> "$dir/chat.err" ||
    fail "chat: exit $?: $(cat "$dir/chat.err")"
  [ "$(wc -l < "$dir/chat.out")" -eq 3 ] || fail "chat: 3 answers expected: $(cat "$dir/chat.out")"
  [ "$(grep -c '^\[turn [123]\] prompt tokens evaluated' "$dir/chat.err")" -eq 3 ] || fail "chat: 3 turns expected: $(cat "$dir/chat.err")"
  last=$(grep '^\[turn 3\] prompt' "$dir/chat.err")
  total=$(sed -n 's/.*total evaluated \([0-9]*\),.*/\1/p' <<< "$last")
  length=$(sed -n 's/.*conversation \([0-9]*\) tokens.*/\1/p' <<< "$last")
  [ -n "$total" ] && [ "$total" == "$length" ] && [ "$total" -gt 40 ] ||
    fail "chat: evaluated $total tokens for a conversation of $length: $(cat "$dir/chat.err")"
  grep -q "evaluating again" "$dir/chat.err" && fail "chat: ChatML re-evaluated a turn: $(cat "$dir/chat.err")"
  out=$("$cli" chat -m "$dir/v.gguf" --top-p 2 < /dev/null 2>&1)
  [ $? -eq 2 ] && grep -q -- --top-p <<< "$out" || fail "chat --top-p 2: $out"
  # clade chat --session: three greedy turns in one run against two turns,
  # then the third in a run that resumes the saved session: the same
  # answers, and the resumed run evaluates only its own turn's tokens.
  printf 'Hello there\nWhat is your name?\nTell me a story.\n' |
    "$cli" chat -m "$dir/v.gguf" -n 8 --temp 0 --threads 2 > "$dir/g3.out" 2> "$dir/g3.err" ||
    fail "chat greedy: $(cat "$dir/g3.err")"
  printf 'Hello there\nWhat is your name?\n' |
    "$cli" chat -m "$dir/v.gguf" -n 8 --temp 0 --threads 2 --session "$dir/conv.kv" > "$dir/s1.out" 2> "$dir/s1.err" ||
    fail "chat --session, run 1: $(cat "$dir/s1.err")"
  [ -s "$dir/conv.kv" ] && [ -s "$dir/conv.kv.chat" ] || fail "chat --session wrote no files"
  printf 'Tell me a story.\n' |
    "$cli" chat -m "$dir/v.gguf" -n 8 --temp 0 --threads 2 --verbose --session "$dir/conv.kv" > "$dir/s2.out" 2> "$dir/s2.err" ||
    fail "chat --session, run 2: $(cat "$dir/s2.err")"
  cat "$dir/s1.out" "$dir/s2.out" | cmp -s - "$dir/g3.out" ||
    fail "chat --session: answers differ from one run: $(cat "$dir/g3.out") / $(cat "$dir/s1.out" "$dir/s2.out")"
  resumed=$(sed -n 's/^chat: resumed 4 messages, \([0-9]*\) tokens from .*(nothing evaluated)$/\1/p' "$dir/s2.err")
  last=$(grep '^\[turn 1\] prompt' "$dir/s2.err")
  total=$(sed -n 's/.*total evaluated \([0-9]*\),.*/\1/p' <<< "$last")
  length=$(sed -n 's/.*conversation \([0-9]*\) tokens.*/\1/p' <<< "$last")
  [ -n "$resumed" ] && [ -n "$total" ] && [ $((resumed + total)) -eq "$length" ] && [ "$resumed" -gt 20 ] ||
    fail "chat --session: resumed '$resumed' + evaluated '$total' != conversation '$length': $(cat "$dir/s2.err")"
  "$cli" model random -o "$dir/v2.gguf" --layers 1 --dim 64 --heads 4 --ff 128 --seed 77 \
    --vocab-from "$vocab" --chat-template chatml > /dev/null 2>&1 || fail "model random v2"
  out=$(printf 'Hi\n' | "$cli" chat -m "$dir/v2.gguf" --session "$dir/conv.kv" 2>&1)
  [ $? -ne 0 ] && grep -q "another model" <<< "$out" || fail "chat --session with another model: $out"
else
  fail "no reference vocabulary at $vocab (set CLADE_VOCAB_DIR): the text and chat checks cannot run"
fi

# Bad input: a token outside the vocabulary, a missing file, a corrupt file.
expect_error() {
  local what=$1
  shift
  out=$("$@" 2>&1)
  rc=$?
  [ $rc -eq 1 ] || fail "$what: exit $rc (want 1): $out"
  [ -n "$out" ] || fail "$what: no message"
}
expect_error "token outside the vocabulary" "$cli" generate -m "$dir/m.gguf" --tokens "1 300" -n 2
expect_error "missing model" "$cli" generate -m "$dir/none.gguf" --tokens "1 2" -n 2
head -c 1000 "$dir/m.gguf" > "$dir/cut.gguf"
expect_error "truncated model" "$cli" generate -m "$dir/cut.gguf" --tokens "1 2" -n 2
expect_error "truncated model, read" "$cli" generate -m "$dir/cut.gguf" --tokens "1 2" -n 2 --no-mmap

[ $failures -eq 0 ] && echo "cli: all checks passed"
exit $((failures > 0))
