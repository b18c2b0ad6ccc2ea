#!/usr/bin/env python3
"""The tables of a scripts/gpu_ab.sh report, as bench/README.md shows them.

For each setting (in the report's order) and each decode case of the
report, the two rounds' figures side by side: the attention part of the
shared and flat steps (attn_ms, the paired median of a mode's step less
the noattn step) and the noattn step itself (ms_per_step, the best of its
rounds), then the shared/flat ratio of the attention parts. Markdown on
standard output; a report that does not parse is an error naming the line.

usage: scripts/ab_summary.py REPORT
"""
import csv
import sys
from collections import OrderedDict

HEADER = "mode,batch,prefix,"


def parse(lines):
    """{setting: {round: {(model_key, batch, prefix): {mode: row}}}} in order.

    The model is told apart by the block it comes in: gpu_ab.sh runs the
    GQA model (batch 1, batch 256) then the multi-head one (batch 32), so a
    case is keyed by its batch and prefix alone.
    """
    runs = OrderedDict()
    setting = rnd = None
    fields = None
    for n, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        if line.startswith("# ") and line.split()[-2:-1] == ["round"]:
            parts = line[2:].rsplit(" round ", 1)
            if len(parts) != 2 or not parts[1].isdigit():
                raise ValueError(f"line {n}: a setting line without a round: {line!r}")
            setting, rnd = parts[0], int(parts[1])
            runs.setdefault(setting, OrderedDict()).setdefault(rnd, OrderedDict())
            fields = None
        elif line.startswith("#") or not line.strip():
            continue
        elif line.startswith(HEADER):
            fields = line.split(",")
        else:
            if setting is None or fields is None:
                raise ValueError(f"line {n}: a row before its setting or header: {line!r}")
            values = next(csv.reader([line]))
            if len(values) != len(fields):
                raise ValueError(f"line {n}: {len(values)} fields, {len(fields)} in the header")
            row = dict(zip(fields, values))
            key = (int(row["batch"]), int(row["prefix"]))
            runs[setting][rnd].setdefault(key, {})[row["mode"]] = row
    if not runs:
        raise ValueError("no '# SETTING round R' line: not a gpu_ab.sh report")
    return runs


def fmt(values):
    return " / ".join("-" if v is None else f"{v:.3f}" for v in values)


def table(runs):
    cases = []
    for rounds in runs.values():
        for by_case in rounds.values():
            for key in by_case:
                if key not in cases:
                    cases.append(key)
    out = []
    head = ["setting"]
    for b, p in cases:
        head += [f"b{b} x {p} shared attn", "flat attn", "noattn step", "flat/shared"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    for setting, rounds in runs.items():
        cells = [setting]
        for key in cases:
            per = {m: [] for m in ("shared", "flat", "noattn")}
            for rnd in sorted(rounds):
                rows = rounds[rnd].get(key, {})
                per["shared"].append(float(rows["shared"]["attn_ms"]) if "shared" in rows else None)
                per["flat"].append(float(rows["flat"]["attn_ms"]) if "flat" in rows else None)
                per["noattn"].append(float(rows["noattn"]["ms_per_step"]) if "noattn" in rows else None)
            ratios = [f / s if s and f is not None else None for s, f in zip(per["shared"], per["flat"])]
            cells += [fmt(per["shared"]), fmt(per["flat"]), fmt(per["noattn"]),
                      " / ".join("-" if r is None else f"{r:.2f}" for r in ratios)]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        with open(argv[1]) as f:
            runs = parse(f)
    except (OSError, ValueError, KeyError) as e:
        print(f"ab_summary.py: {argv[1]}: {e}", file=sys.stderr)
        return 1
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
