#!/usr/bin/env python3
"""Medians and ratios of a side-by-side CSV (bench/peer/decode_side_by_side.sh):
per point (batch, prefix), each engine's median decode and prefill tokens/s
over its rounds, and the median of the per-round ratios clade / llama.cpp
(each round's pair was measured minutes apart, alternating). Markdown on
stdout. A CSV of bench/peer/quant_side_by_side.sh (a `what` column) gives
the same per file, measurement and load mode, with every round's ratio.

usage: python3 bench/peer/side_by_side_table.py CSV"""
import csv
import statistics
import sys
from collections import defaultdict


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
    if rows and "what" in rows[0]:
        return quant_table(rows)
    pts = defaultdict(lambda: defaultdict(dict))  # (batch, prefix) -> engine -> round -> (decode, prefill)
    for row in rows:
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


def quant_table(rows):
    pts = defaultdict(lambda: defaultdict(dict))  # (file, what, load) -> engine -> round -> tokens/s
    for row in rows:  # (CSVs before the load modes: mapped)
        v = float(row["tokens_per_s"] or 0)
        if v > 0:  # a failed run prints nothing
            pts[(row["file"], row["what"], row.get("load", "mmap"))][row["engine"]][int(row["round"])] = v
    print("| file | measure | load | clade tokens/s | llama.cpp tokens/s | ratio (median) | ratio per round |")
    print("|---|---|---|---:|---:|---:|---|")
    for k in pts:  # in the CSV's order
        e = pts[k]
        rounds = sorted(set(e["clade"]) & set(e["llama"]))
        if not rounds:
            continue
        ratios = [e["clade"][r] / e["llama"][r] for r in rounds]
        print("| %s | %s | %s | %.0f | %.0f | **%.2f** | %s |" %
              (k[0], k[1], k[2], statistics.median(e["clade"][r] for r in rounds),
               statistics.median(e["llama"][r] for r in rounds), statistics.median(ratios),
               " ".join("%.2f" % x for x in ratios)))


if __name__ == "__main__":
    main()
