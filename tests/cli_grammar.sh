#!/bin/bash
# Structured output through the CLI (issue 43):
# - `clade grammar check`: exit 0 when every text is accepted, else 1 with
#   the byte offset of each refusal; a bad grammar exits 2 naming the
#   keyword / position;
# - `clade generate --json-schema` on the trained KJV target (batch 8,
#   sampled; speculative with the draft model; jump-forward on and off) and
#   on a random model: every finished output validates with an independent
#   validator, Debian's python3-jsonschema (the validation is skipped, exit
#   77, only when that module is missing);
# - --grammar, --regex and --json-any outputs;
# - `clade bench grammar` prints its figures.
# usage: cli_grammar.sh PATH_TO_CLADE VOCAB_DIR MODELS_DIR
set -uo pipefail
cli=$1
vocab=$2/ggml-vocab-llama-spm.gguf
models=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
[ -f "$vocab" ] || { echo "FAIL: no reference vocabulary at $vocab"; exit 1; }
target=$models/kjv-target-f16.gguf
draft=$models/kjv-draft-f16.gguf
[ -f "$target" ] || { echo "FAIL: no $target"; exit 1; }
V=$dir/v.gguf
"$cli" model random -o "$V" --layers 1 --dim 32 --heads 2 --kv-heads 1 --ff 64 --ctx 1024 --vocab-from "$vocab" \
  > /dev/null 2>&1 || { echo "FAIL: model random"; exit 1; }

cat > "$dir/person.json" << 'EOF'
{"type": "object",
 "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 16},
                "age": {"type": "integer", "minimum": 0, "maximum": 130},
                "role": {"enum": ["king", "prophet", "priest"]},
                "sons": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3}},
 "required": ["name", "age", "role", "sons"], "additionalProperties": false}
EOF
printf '{"name":"Saul","age":40,"role":"king","sons":["Jonathan"]}' > "$dir/good.json"
printf '{"name":"Saul","age":400,"role":"king","sons":[]}' > "$dir/bad.json"
printf '{"name":"Saul"' > "$dir/short.json"

# grammar check
out=$("$cli" grammar check --json-schema "$dir/person.json" "$dir/good.json"); rc=$?
[ $rc -eq 0 ] && [ -z "$out" ] || fail "grammar check good: exit $rc, $out"
out=$("$cli" grammar check --json-schema "$dir/person.json" "$dir/good.json" "$dir/bad.json" "$dir/short.json")
rc=$?
[ $rc -eq 1 ] || fail "grammar check bad: exit $rc"
grep -qx "$dir/bad.json: refused at byte 23" <<< "$out" || fail "grammar check bad: $out"
grep -q "^$dir/short.json: refused at byte 14 " <<< "$out" || fail "grammar check short: $out"
grep -q "good.json" <<< "$out" && fail "grammar check lists an accepted file: $out"
out=$("$cli" grammar check --regex '[a-z]+@[a-z]+\.com' -m "$V" <(printf 'ab@cd.com') 2>&1); rc=$?
[ $rc -eq 0 ] || fail "grammar check --regex: exit $rc, $out"
printf 'root ::= "a" [0-9]+\n' > "$dir/g.gbnf"
out=$("$cli" grammar check --grammar "$dir/g.gbnf" <(printf 'a12') <(printf 'a1x')); rc=$?
[ $rc -eq 1 ] && grep -q "refused at byte 2$" <<< "$out" || fail "grammar check --grammar: exit $rc, $out"
# bad grammars: exit 2, the keyword / position named
printf '{"type": "array", "uniqueItems": true}' > "$dir/unique.json"
err=$("$cli" grammar check --json-schema "$dir/unique.json" "$dir/good.json" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && grep -q "uniqueItems" <<< "$err" || fail "bad schema: exit $rc, $err"
printf 'root ::= "a" (\n' > "$dir/bad.gbnf"
err=$("$cli" grammar check --grammar "$dir/bad.gbnf" "$dir/good.json" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && grep -q "1:" <<< "$err" || fail "bad GBNF: exit $rc, $err"
err=$("$cli" generate -m "$V" -p hi --json-schema "$dir/unique.json" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && grep -q "uniqueItems" <<< "$err" || fail "generate, bad schema: exit $rc, $err"

# generate: JSON lines out, the texts of finished sequences to validate
run() {  # NAME ARGS...: the --json lines into $dir/NAME.jsonl
  local name=$1; shift
  "$cli" generate --json "$@" > "$dir/$name.jsonl" 2> "$dir/$name.err" ||
    fail "generate $name: $(tail -3 "$dir/$name.err")"
}
P='The sons of Saul were these, as a JSON record:'
run kjv -m "$target" -p "$P" --json-schema "$dir/person.json" --samples 8 --temp 0.8 --seed 3 -n 160
run kjv-nojump -m "$target" -p "$P" --json-schema "$dir/person.json" --samples 4 --temp 0.8 --seed 4 -n 160 --no-jump
run kjv-greedy -m "$target" -p "$P" --json-schema "$dir/person.json" -n 160
run kjv-draft -m "$target" -p "$P" --json-schema "$dir/person.json" --samples 4 --temp 0.8 --seed 5 -n 160 \
  --draft-model "$draft"
run kjv-lookup -m "$target" -p "$P" --json-schema "$dir/person.json" -n 160 --lookup 3
run random -m "$V" -p "$P" --json-schema "$dir/person.json" --samples 8 --temp 1 --seed 6 -n 200
# greedy with a drafter is plain greedy's text
a=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["text"])' "$dir/kjv-greedy.jsonl")
b=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["text"])' "$dir/kjv-lookup.jsonl")
[ "$a" == "$b" ] || fail "greedy with --lookup differs: $a / $b"

run regex -m "$target" -p "$P" --regex '(Saul|David) [0-9]{2}' --samples 4 --temp 1 -n 40
run any -m "$target" -p "$P" --json-any --samples 4 --temp 1 -n 200
run gbnf -m "$V" -p "$P" --grammar "$dir/g.gbnf" --samples 4 --temp 1 -n 20

python3 - "$dir" << 'PY' || fail "outputs (see above)"
import json, re, sys
d = sys.argv[1]
bad = 0
def lines(name):
    return [json.loads(l) for l in open("%s/%s.jsonl" % (d, name)) if l.strip()]
schema = json.load(open(d + "/person.json"))
try:
    import jsonschema
except ImportError:
    jsonschema = None
    print("python3-jsonschema missing: schema validation skipped")
done = 0
for name in ("kjv", "kjv-nojump", "kjv-greedy", "kjv-draft", "kjv-lookup", "random"):
    for o in lines(name):
        if o["finish_reason"] != "stop":
            continue
        done += 1
        try:
            v = json.loads(o["text"])
            if jsonschema:
                jsonschema.validate(v, schema)
        except Exception as e:
            print("%s: %r: %s" % (name, o["text"], e))
            bad += 1
for o in lines("regex"):
    if o["finish_reason"] == "stop" and not re.fullmatch(r"(Saul|David) [0-9]{2}", o["text"]):
        print("regex: %r" % o["text"]); bad += 1
for o in lines("any"):
    if o["finish_reason"] == "stop":
        try: json.loads(o["text"])
        except Exception as e: print("any: %r: %s" % (o["text"], e)); bad += 1
for o in lines("gbnf"):
    if o["finish_reason"] == "stop" and not re.fullmatch(r"a[0-9]+", o["text"]):
        print("gbnf: %r" % o["text"]); bad += 1
print("%d schema outputs finished and validated%s" % (done, "" if jsonschema else " (JSON only)"))
if done < 10:
    print("too few finished outputs"); bad += 1
sys.exit(1 if bad else (77 if jsonschema is None else 0))
PY
py=$?

# bench grammar: its figures
out=$("$cli" bench grammar -m "$V" --json-schema "$dir/person.json" --states 200 2>&1) &&
  grep -q "^mask *median" <<< "$out" || fail "bench grammar: $out"

[ $failures -eq 0 ] || exit 1
[ $py -eq 77 ] && exit 77
echo ok
