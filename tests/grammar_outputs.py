#!/usr/bin/python3
"""Constrained generation judged by an independent validator (issue 43).

For the fixed schemas of bench/schemas and for random schemas drawn from a
seeded generator (objects, arrays with prefixItems and bounds, strings
with lengths, formats and patterns, integer ranges, enum, const, anyOf,
type lists, additionalProperties as a schema, recursive $defs), runs
`clade generate --json-schema` on a random model with the reference SPM
vocabulary and on the trained KJV target, at batch 1 and at batch 64 (8
leaves under a shared prefix, 8 samples each), greedy and sampled, plain,
prompt lookup and the draft model (chains and token trees), jump-forward
on and off: the configurations rotate over the schemas so that each one
meets every setting. Every finished output must parse as JSON and
validate against its schema with Debian's python3-jsonschema; an output
cut by -n is counted, not judged. A schema the engine refuses at compile
must be refused with exit 2 and a message naming a keyword; the run fails
when fewer than 90% of the random schemas compile or fewer than 500
outputs finish.

usage: grammar_outputs.py CLADE VOCAB_DIR MODELS_DIR SOURCE_DIR [--full]
(exit 77 when python3-jsonschema is missing: the test is skipped)
"""
import json
import os
import random
import subprocess
import sys
import tempfile

try:
    import jsonschema
except ImportError:
    print("python3-jsonschema is missing (apt-get install python3-jsonschema): skipped")
    sys.exit(77)

CLI, VOCAB_DIR, MODELS, SRC = sys.argv[1:5]
FULL = "--full" in sys.argv[5:]

# -------------------------------------------------------------- random schemas

WORDS = ["sword", "bread", "lamp", "gate", "river", "stone", "crown", "ark", "dove", "wheat"]


def r_string(rng):
    s = {"type": "string"}
    k = rng.random()
    if k < 0.15:
        s["format"] = rng.choice(["date", "time", "date-time", "uuid", "email", "ipv4"])
    elif k < 0.3:
        s["pattern"] = rng.choice(["^[a-z]{2,6}$", "^[A-Z][a-z]+( [A-Z][a-z]+)?$", "^#[0-9a-f]{6}$", "^(yes|no)$"])
    else:
        lo = rng.choice([0, 0, 1, 3])
        s["minLength"] = lo
        s["maxLength"] = lo + rng.choice([2, 8, 20])
    return s


def r_integer(rng):
    s = {"type": "integer"}
    lo = rng.choice([-100, -5, 0, 1, 10, 1000])
    if rng.random() < 0.8:
        s["exclusiveMinimum" if rng.random() < 0.3 else "minimum"] = lo
    if rng.random() < 0.8:
        s["exclusiveMaximum" if rng.random() < 0.3 else "maximum"] = lo + rng.choice([2, 9, 99, 12345])
    return s


def r_leaf(rng):
    k = rng.randrange(9)
    if k == 0:
        return r_string(rng)
    if k == 1:
        return r_integer(rng)
    if k == 2:
        return {"type": "number"}
    if k == 3:
        return {"type": "boolean"}
    if k == 4:
        return {"enum": rng.sample(WORDS, rng.randint(1, 4)) + ([None] if rng.random() < 0.3 else [])}
    if k == 5:
        return {"const": rng.choice([rng.choice(WORDS), rng.randint(-9, 99), True, None])}
    if k == 6:
        return {"type": ["string", "null"], "maxLength": 6}
    if k == 7:
        return {"type": ["integer", "boolean"], "minimum": 0, "maximum": 9}
    return {"type": "null"}


def r_schema(rng, depth):
    if depth <= 0:
        return r_leaf(rng)
    k = rng.randrange(10)
    if k < 4:
        props = {}
        for name in rng.sample(WORDS, rng.randint(1, 4)):
            props[name] = r_schema(rng, depth - 1)
        s = {"type": "object", "properties": props,
             "required": sorted(rng.sample(sorted(props), rng.randint(0, len(props))))}
        a = rng.random()
        s["additionalProperties"] = False if a < 0.6 else ({"type": "integer"} if a < 0.8 else True)
        return s
    if k < 6:
        lo = rng.choice([0, 1, 2])
        s = {"type": "array", "items": r_schema(rng, depth - 1), "minItems": lo, "maxItems": lo + rng.choice([1, 3])}
        if rng.random() < 0.3:
            s["prefixItems"] = [r_leaf(rng)]
        return s
    if k == 6:
        return {"anyOf": [r_schema(rng, depth - 1), r_leaf(rng)]}
    return r_leaf(rng)


def r_recursive(rng):
    return {"$defs": {"node": {"type": "object",
                               "properties": {"name": {"enum": rng.sample(WORDS, 3)},
                                              "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                       "maxItems": 2}},
                               "required": ["name"], "additionalProperties": False}},
            "$ref": "#/$defs/node"}


# -------------------------------------------------------------- runs

def main():
    tmp = tempfile.mkdtemp(prefix="clade-grammar-outputs-")
    model = os.path.join(tmp, "random.gguf")
    subprocess.run([CLI, "model", "random", "-o", model, "--layers", "1", "--dim", "32", "--heads", "2",
                    "--kv-heads", "1", "--ff", "64", "--ctx", "2048", "--seed", "21",
                    "--vocab-from", os.path.join(VOCAB_DIR, "ggml-vocab-llama-spm.gguf")],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = os.path.join(MODELS, "kjv-target-f16.gguf")
    draft = os.path.join(MODELS, "kjv-draft-f16.gguf")
    for f in (target, draft):
        if not os.path.exists(f):
            print("FAIL: no", f)
            return 1

    schemas = []
    for name in sorted(os.listdir(os.path.join(SRC, "bench", "schemas"))):
        if name.endswith(".json"):
            with open(os.path.join(SRC, "bench", "schemas", name)) as f:
                schemas.append(("fixed/" + name[:-5], json.load(f)))
    rng = random.Random(43)
    n_random = 40 if FULL else 16
    for i in range(n_random):
        s = r_recursive(rng) if i % 8 == 7 else r_schema(rng, rng.choice([1, 2, 2, 3]))
        schemas.append(("random/%02d" % i, s))

    # (batch 64, sampled, speculative mode, jump-forward): every setting in turn
    configs = []
    for b64 in (0, 1):
        for sampled in (0, 1):
            for spec in ("none", "lookup", "draft", "draft-tree", "lookup-tree"):
                for jump in (1, 0):
                    configs.append((b64, sampled, spec, jump))
    per_schema = 6 if FULL else 3
    finished = cut = compiled = refused = runs = 0
    failures = []
    random_total = sum(1 for n, _ in schemas if n.startswith("random/"))
    random_compiled = 0
    for si, (name, schema) in enumerate(schemas):
        path = os.path.join(tmp, "s%d.json" % si)
        with open(path, "w") as f:
            json.dump(schema, f)
        jsonschema.Draft202012Validator.check_schema(schema)
        validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
        ok_compile = True
        for k in range(per_schema):
            b64, sampled, spec, jump = configs[(si * per_schema + k * 7) % len(configs)]
            on_kjv = (si + k) % 3 == 0 or spec.startswith("draft")
            m = target if on_kjv else model
            if spec.startswith("draft") and not on_kjv:
                spec = "lookup"
            cmd = [CLI, "generate", "-m", m, "--json-schema", path, "--json", "--threads", "1",
                   "-n", "160" if on_kjv else "400"]
            if b64:
                cmd += ["-p", "The record of the tribes, as JSON:", "-p", "|".join("abcdefgh"), "--samples", "8"]
            else:
                cmd += ["-p", "The record, as JSON:"]
            if sampled:
                cmd += ["--temp", "1", "--seed", str(si * 10 + k)]
            if spec.startswith("lookup"):
                cmd += ["--lookup", "3"]
            elif spec.startswith("draft"):
                cmd += ["--draft-model", draft]
            if spec.endswith("-tree"):
                cmd += ["--draft-tree", "3"]
            if not jump:
                cmd += ["--no-jump"]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            runs += 1
            if r.returncode == 2:
                ok_compile = False
                if "#" not in r.stderr and "keyword" not in r.stderr:
                    failures.append("%s: refused without naming a keyword: %s" % (name, r.stderr.strip()))
                break
            if r.returncode != 0:
                failures.append("%s: %s exited %d: %s" % (name, " ".join(cmd[3:]), r.returncode, r.stderr[-400:]))
                continue
            for line in r.stdout.splitlines():
                o = json.loads(line)
                if o["finish_reason"] == "length":
                    cut += 1
                    continue
                finished += 1
                try:
                    v = json.loads(o["text"])
                    validator.validate(v)
                except Exception as e:  # noqa: BLE001 (any refusal is a failure)
                    failures.append("%s (%s): %r does not validate: %s" %
                                    (name, " ".join(cmd[3:]), o["text"], str(e).splitlines()[0]))
        if ok_compile:
            compiled += 1
            random_compiled += name.startswith("random/")
        else:
            refused += 1
    print("%d schemas (%d random), %d compiled, %d refused at compile; %d runs; %d outputs finished and valid, "
          "%d cut by -n" % (len(schemas), random_total, compiled, refused, runs, finished - len(failures), cut))
    for f in failures[:20]:
        print("FAIL:", f)
    if random_compiled < 0.9 * random_total:
        print("FAIL: only %d of %d random schemas compiled" % (random_compiled, random_total))
        return 1
    if finished < 500:
        print("FAIL: only %d outputs finished" % finished)
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
