#!/bin/bash
# The CLI's refusals, table-driven: each bad invocation with its exit code
# and the exact message on stderr (nothing on stdout), every message naming
# the flag or word the user typed and, for numbers, the allowed range; then
# every command's --help (exit 0, its usage with defaults on stdout), and
# `clade help COMMAND` giving the same text.
# usage: cli_errors.sh PATH_TO_CLADE VOCAB_DIR
set -uo pipefail
cli=$1
vocab=$2/ggml-vocab-llama-spm.gguf
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
checked=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

[ -f "$vocab" ] || { echo "FAIL: no reference vocabulary at $vocab"; exit 1; }
# M: no tokenizer, a context of 64; V: the Llama 2 vocabulary.
M=$dir/m.gguf
V=$dir/v.gguf
"$cli" model random -o "$M" --layers 1 --dim 64 --heads 4 --kv-heads 2 --ff 128 --vocab 300 --ctx 64 \
  > /dev/null 2>&1 || { echo "FAIL: model random"; exit 1; }
"$cli" model random -o "$V" --layers 1 --dim 64 --heads 4 --ff 128 --ctx 256 --vocab-from "$vocab" \
  > /dev/null 2>&1 || { echo "FAIL: model random --vocab-from"; exit 1; }

# EXIT | MESSAGE | ARGUMENTS (shell words; $M, $V and $dir expand)
while IFS= read -r line; do
  [[ -z "$line" || "$line" == \#* ]] && continue
  code=${line%% | *}
  rest=${line#* | }
  want=${rest%% | *}
  args=${rest#* | }
  eval "set -- $args"
  out=$("$cli" "$@" 2> "$dir/err" < /dev/null)
  rc=$?
  got=$(cat "$dir/err")
  checked=$((checked + 1))
  if [ "$rc" != "$code" ] || [ "$got" != "$want" ] || [ -n "$out" ]; then
    fail "clade $args"$'\n'"  expected exit $code: $want"$'\n'"  got exit $rc: $got${out:+ (stdout: ${out:0:200})}"
  fi
done << 'TABLE'
# commands
2 | clade: unknown command 'frobnicate' (clade --help lists the commands) | frobnicate
2 | clade: model: give a subcommand: random or info (clade model --help) | model
2 | clade: unknown command 'model frob' (model takes random or info) | model frob
2 | clade: bench: give a subcommand: decode, prefill, spec, grammar or machine (clade bench --help) | bench
2 | clade: unknown command 'bench frob' (bench takes decode, prefill, spec, grammar or machine) | bench frob
2 | clade: version: unexpected argument 'extra' | version extra
2 | clade: help: unknown command 'frob' | help frob
# generate: numbers out of range, named with their range
2 | clade: --samples 20000000 is out of range: 1 to 1048576 | generate -m $M --tokens 1 --samples 20000000
2 | clade: --temp -1 is out of range: 0 (greedy) to 100 | generate -m $M --tokens 1 --temp -1
2 | clade: bad number 'nan' for --temp | generate -m $M --tokens 1 --temp nan
2 | clade: --top-p 0 is out of range: above 0, at most 1 (1: off) | generate -m $M --tokens 1 --top-p 0
2 | clade: --top-k -1 is out of range: 0 (off) to 1073741824 | generate -m $M --tokens 1 --top-k -1
2 | clade: --tokens -5 is out of range: 0 to 2147483647 | generate -m $M --tokens "1 -5"
2 | clade: --min-p 2 is out of range: 0 (off) to 1 | generate -m $M --tokens 1 --min-p 2
2 | clade: --repeat-penalty 0 is out of range: above 0, at most 100 (1: off) | generate -m $M --tokens 1 --repeat-penalty 0
2 | clade: --presence-penalty 101 is out of range: -100 to 100 (0: off) | generate -m $M --tokens 1 --presence-penalty 101
2 | clade: bad unsigned integer '-1' for --seed | generate -m $M --tokens 1 --seed -1
2 | clade: -n 0 is out of range: 1 to 16777216 | generate -m $M --tokens 1 -n 0
2 | clade: -n 99999999999999999999 is out of range: 1 to 16777216 | generate -m $M --tokens 1 -n 99999999999999999999
2 | clade: bad integer 'abc' for -n | generate -m $M --tokens 1 -n abc
2 | clade: --threads -1 is out of range: 0 to 1024 | generate -m $M --tokens 1 --threads -1
2 | clade: --logprobs 21 is out of range: 0 to 20 | generate -m $M --tokens 1 --logprobs 21
2 | clade: --lookup 0 is out of range: 1 to 64 | generate -m $M --tokens 1 --lookup 0
2 | clade: --draft-tree 9 is out of range: 1 to 8 | generate -m $M --tokens 1 --lookup 2 --draft-tree 9
2 | clade: bad integer 'x' for --tokens | generate -m $M --tokens "1 x"
# generate: positions past the context, before any work
2 | clade: -n 100: the longest prompt (3 tokens) and -n pass the model's context of 64 tokens (at most -n 61, or --past-context) | generate -m $M --tokens "1 2" --tokens "3|4" -n 100
# generate: unknown values, conflicts, extra words, empty prompts
2 | clade: --attention: unknown value 'fast' (shared or flat) | generate -m $M --tokens 1 --attention fast
2 | clade: --backend: unknown value 'gpu' (cpu or cuda) | generate -m $M --tokens 1 --backend gpu
2 | clade: --draft-max needs a drafter: --draft-model FILE or --lookup N | generate -m $M --tokens 1 --draft-max 4
2 | clade: give one drafter: --draft-model FILE or --lookup N | generate -m $M --tokens 1 --lookup 2 --draft-model $M
2 | clade: --template goes with --chat | generate -m $V -p hi --template chatml
2 | clade: --as-finished and --json conflict (--json prints every sequence at the end) | generate -m $M --tokens 1 --json --as-finished
2 | clade: generate: give the prompt levels with -p or with --tokens (not both) | generate -m $M --tokens 1 -p hi
2 | clade: --tokens '1 2|': prompt level 1 has an empty prompt | generate -m $M --tokens "1 2|" -n 2
2 | clade: -p '': prompt level 2 has an empty prompt | generate -m $V -p hi -p "" -n 2
2 | clade: generate: unexpected argument 'extra' | generate -m $M --tokens 1 extra
2 | clade: generate: unknown option --frob (clade generate --help) | generate -m $M --tokens 1 --frob
2 | clade: generate: -m FILE is required | generate --tokens 1
2 | clade: missing value after -m | generate --tokens 1 -m
# tokenize
2 | clade: tokenize: unexpected argument 'b' after TEXT 'a' (quote the text) | tokenize -m $V --pieces a b c
2 | clade: tokenize: give TEXT or --file PATH, not both | tokenize -m $V --file $dir/m.gguf hello
2 | clade: tokenize: unknown option --bos (clade tokenize --help) | tokenize -m $V --bos hello
# model info, model random
2 | clade: model info: give FILE (clade model info --help) | model info
2 | clade: model info: unexpected argument 'b' | model info a b
2 | clade: model info: unknown option --bogus (clade model info --help) | model info --bogus
2 | clade: --vocab and --vocab-from conflict (--vocab-from's file gives the vocabulary and its size) | model random -o $dir/x.gguf --vocab 5 --vocab-from $V
2 | clade: --arch: unknown value 'gpt2' (llama or qwen2) | model random -o $dir/x.gguf --arch gpt2
2 | clade: bad unsigned integer '-3' for --seed | model random -o $dir/x.gguf --seed -3
2 | clade: model random: -o FILE is required | model random --layers 1
2 | clade: model random: unexpected argument 'big' | model random -o $dir/x.gguf big
# bench
2 | clade: --kv: unknown value 'q8' (f16, bf16 or f32) | bench decode -m $M --kv q8
2 | clade: --logits: unknown value 'top' (all or greedy) | bench decode -m $M --logits top
2 | clade: --mode: unknown value 'fast' (shared, flat or noattn) | bench decode -m $M --mode flat,fast
2 | clade: --batch 0 is out of range: 1 to 1048576 | bench decode -m $M --batch 1,0
2 | clade: --gen 1 is out of range: 2 to 16777216 | bench decode -m $M --gen 1
2 | clade: bad number 'abc' for --min-seconds | bench decode -m $M --min-seconds abc
2 | clade: bench decode: unknown option --kv-type (clade bench decode --help) | bench decode -m $M --kv-type f16
2 | clade: --prefix 100: with --suffix 0 and --gen 4 it passes the model's context of 64 tokens (--past-context to go past it) | bench decode -m $M --prefix 8,100 --gen 4
2 | clade: bench prefill: --lengths gives a prompt of 100 tokens; with --parent-tokens 0 that passes the model's context of 64 | bench prefill -m $M --prompts 2 --lengths fixed:100
2 | clade: --threads 0 is out of range: 1 to 1024 | bench machine --threads 0
2 | clade: --prompts 0 is out of range: 1 to 1073741824 | bench prefill -m $M --prompts 0 --lengths fixed:4
2 | clade: --draft-tree 1 is out of range: 2 to 8 | bench spec -m $M --draft-tree 1
2 | clade: --mode: unknown value 'fast' (plain, lookup, draft, lookup-tree, draft-tree or verify-cost) | bench spec -m $M --mode fast
# perplexity, chat, demo
2 | clade: --ctx 2 is out of range: 4 to 1048576 | perplexity -m $M --file $dir/m.gguf --ctx 2
2 | clade: --chunks 0 is out of range: 1 to 1073741824 | perplexity -m $M --file $dir/m.gguf --chunks 0
2 | clade: perplexity: unexpected argument 'text.txt' | perplexity -m $M text.txt
2 | clade: -n 0 is out of range: 1 to 16777216 | chat -m $V -n 0
2 | clade: --threads 2000 is out of range: 0 to 1024 | chat -m $V --threads 2000
2 | clade: --threads -1 is out of range: 0 to 1024 | demo --threads -1
2 | clade: demo: unknown option --bogus (clade demo --help) | demo --bogus
# structured output: generate's grammar flags, grammar check, bench grammar
2 | clade: --lenient goes with --json-schema | generate -m $V -p hi --lenient
2 | clade: --no-jump goes with --json-schema, --grammar, --regex or --json-any | generate -m $V -p hi --no-jump
2 | clade: --regex: give one of --json-schema, --grammar, --regex, --json-any (--json-any was given) | generate -m $V -p hi --json-any --regex a
2 | clade: --lenient goes with --json-schema | generate -m $V -p hi --regex a --lenient
2 | clade: --json-any needs a model with a tokenizer | generate -m $M --tokens 1 --json-any
2 | clade: missing value after --json-schema | generate -m $V -p hi --json-schema
2 | clade: grammar: give a subcommand: check (clade grammar --help) | grammar
2 | clade: unknown command 'grammar bogus' (grammar takes check) | grammar bogus
2 | clade: grammar check: give --json-schema FILE, --grammar FILE or --regex RE | grammar check x.txt
2 | clade: grammar check: --json-any is not a check (give a schema) | grammar check --json-any x.txt
2 | clade: grammar check: give one or more text files | grammar check --regex a
2 | clade: grammar check: unknown option --bogus (clade grammar check --help) | grammar check --bogus
2 | clade: bench grammar: give -m FILE (its vocabulary) | bench grammar --json-any
2 | clade: --states 1 is out of range: 10 to 10000000 | bench grammar -m $V --states 1
2 | clade: bench grammar: unknown option --bogus (clade bench grammar --help) | bench grammar -m $V --bogus
TABLE
[ $checked -ge 40 ] || fail "only $checked bad invocations checked"

# Every command's --help: exit 0, its usage on stdout, nothing on stderr;
# `clade help COMMAND` prints the same.
for cmd in demo "model random" "model info" quantize generate chat perplexity serve tokenize "bench decode" \
    "bench prefill" "bench spec" "bench grammar" "bench machine" "grammar check" version; do
  # shellcheck disable=SC2086
  out=$("$cli" $cmd --help 2> "$dir/err"); rc=$?
  [ $rc -eq 0 ] && [[ "$out" == "usage: clade $cmd"* ]] && [ ! -s "$dir/err" ] ||
    fail "clade $cmd --help: exit $rc, stdout '${out:0:80}', stderr '$(cat "$dir/err")'"
  # shellcheck disable=SC2086
  [ "$("$cli" help $cmd 2>&1)" == "$out" ] || fail "clade help $cmd differs from clade $cmd --help"
  # shellcheck disable=SC2086
  [ "$("$cli" $cmd -h 2>&1)" == "$out" ] || fail "clade $cmd -h differs from clade $cmd --help"
  checked=$((checked + 1))
done
# the defaults are shown: a few of them
"$cli" generate --help | grep -- '-n N (32)' >/dev/null || fail "generate --help shows no default for -n"
"$cli" bench decode --help | grep -- '--mode shared,flat,noattn (flat)' >/dev/null || fail "bench decode --help: --mode's default"
"$cli" chat --help | grep -- '--temp T (0.8; 0 greedy)' >/dev/null || fail "chat --help: --temp's default"
"$cli" serve --help | grep -- '--drain-timeout S (30)' >/dev/null || fail "serve --help: --drain-timeout's default"
"$cli" serve --help | grep -- '--max-queue N (0: none)' >/dev/null || fail "serve --help: --max-queue's default"
# serve's limits, refused before the model loads (where serve is built)
if [[ "$("$cli" serve 2>&1)" == *"-m FILE is required"* ]]; then
  serve_refuses() {  # MESSAGE ARGUMENTS...
    local want=$1 out rc
    shift
    out=$("$cli" serve -m "$M" "$@" 2> "$dir/err" < /dev/null); rc=$?
    [ $rc -eq 2 ] && [ "$(cat "$dir/err")" == "$want" ] && [ -z "$out" ] ||
      fail "clade serve $*: exit $rc, stderr '$(cat "$dir/err")', want '$want'"
    checked=$((checked + 1))
  }
  serve_refuses "clade: --max-n must be 0 (as --parallel) to 4 (--parallel)" --parallel 4 --max-n 5
  serve_refuses "clade: --max-queue must be 0 (no limit) or more" --max-queue -1
  serve_refuses "clade: --max-prompt-tokens must be 0 (the context) or more" --max-prompt-tokens -2
  serve_refuses "clade: --max-tokens-limit must be 0 (the context) or more" --max-tokens-limit -1
  serve_refuses "clade: --drain-timeout must be 0 to 86400 seconds" --drain-timeout -1
  serve_refuses "clade: bad number 'soon' for --drain-timeout" --drain-timeout soon
fi
# groups and the whole usage
for g in model bench grammar; do
  out=$("$cli" $g --help) && [[ "$out" == "usage: clade $g "* ]] || fail "clade $g --help: $out"
done
out=$("$cli" --help) && [[ "$out" == "usage: clade <command>"* ]] || fail "clade --help"
for cmd in demo "model random" "model info" quantize generate chat perplexity serve tokenize "bench decode" \
    "bench prefill" "bench spec" "bench grammar" "bench machine" "grammar check" version; do
  grep -q "^  $cmd" <<< "$out" || fail "clade --help does not list $cmd"
done
# no arguments: the usage on stderr, exit 2
"$cli" > /dev/null 2>&1; [ $? -eq 2 ] || fail "clade without arguments: expected exit 2"
out=$("$cli" version) && [ "$out" == "$("$cli" --version)" ] && [[ "$out" == "clade "* ]] || fail "clade version: $out"

[ $failures -eq 0 ] && echo "ok: $checked invocations"
exit $((failures > 0))
