#!/usr/bin/env python3
"""Medians and ratios of a side-by-side CSV (bench/peer/decode_side_by_side.sh):
per point (batch, prefix), each engine's median decode and prefill tokens/s
over its rounds, and the median of the per-round ratios clade / llama.cpp
(each round's pair was measured minutes apart, alternating). Markdown on
stdout.

usage: python3 bench/peer/side_by_side_table.py CSV"""
import csv
import statistics
import sys
from collections import defaultdict


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    pts = defaultdict(lambda: defaultdict(dict))  # (batch, prefix) -> engine -> round -> (decode, prefill)
    with open(sys.argv[1], newline="") as f:
        for row in csv.DictReader(f):
            pts[(int(row["batch"]), int(row["prefix"]))][row["engine"]][int(row["round"])] = (
                float(row["decode_tokens_per_s"]), float(row["prefill_tokens_per_s"]))
    print("| batch | prefix | clade decode | llama.cpp decode | ratio | clade prefill | llama.cpp prefill | ratio | rounds |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (b, p) in sorted(pts, key=lambda k: (k[1], k[0])):
        e = pts[(b, p)]
        if "clade" not in e or "llama" not in e:
            continue
        rounds = sorted(set(e["clade"]) & set(e["llama"]))
        med = lambda eng, i: statistics.median(e[eng][r][i] for r in rounds)
        ratio = lambda i: statistics.median(e["clade"][r][i] / e["llama"][r][i] for r in rounds)
        print("| %d | %d | %.1f | %.1f | %.2f | %.0f | %.0f | %.2f | %d |" %
              (b, p, med("clade", 0), med("llama", 0), ratio(0), med("clade", 1), med("llama", 1), ratio(1),
               len(rounds)))


if __name__ == "__main__":
    main()
