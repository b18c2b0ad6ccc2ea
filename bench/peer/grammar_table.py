#!/usr/bin/env python3
"""Medians of a structured-output side-by-side CSV
(bench/peer/grammar_side_by_side.sh): per engine the median ms per token
without and with the schema over the rounds, the overhead per token (the
median of the per-round differences constrained - free, each pair measured
a minute apart, with a distribution-free confidence interval of that
median: the order statistics that the sign test gives, at least 95%), and
the ratio of the two engines' median overheads (llama.cpp / clade), with
its lower bound from the intervals (llama.cpp's low end over clade's high
end). Markdown on stdout. An overhead at or under zero is inside the
noise: the ratio is then not given.

usage: python3 bench/peer/grammar_table.py CSV"""
import csv
import statistics
import sys
from collections import defaultdict
from math import comb


def median_interval(xs):
    """(low, high, coverage) for the median of xs: order statistics k and
    n-k+1 (1-based), the largest k with P(Binomial(n, 1/2) < k) <= 2.5%."""
    xs, n = sorted(xs), len(xs)
    tail = lambda k: sum(comb(n, i) for i in range(k)) / 2 ** n  # P(B < k)
    k = 0
    while k + 1 <= n // 2 and tail(k + 1) <= 0.025:
        k += 1
    if k == 0:
        return None  # too few rounds for 95%
    return xs[k - 1], xs[n - k], 1 - 2 * tail(k)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    ms = defaultdict(dict)  # (engine, constrained) -> round -> ms per token
    tokens = set()
    with open(sys.argv[1], newline="") as f:
        for row in csv.DictReader(f):
            ms[(row["engine"], int(row["constrained"]))][int(row["round"])] = float(row["ms_per_token"])
            tokens.add(int(row["tokens"]))
    names = {"clade": "clade", "llama": "llama.cpp"}
    over, ci = {}, {}
    print("| engine | ms/token free | ms/token constrained | overhead ms/token (range) | 95% interval | rounds |")
    print("|---|---:|---:|---:|---|---:|")
    for e in ("clade", "llama"):
        free, con = ms.get((e, 0), {}), ms.get((e, 1), {})
        rounds = sorted(set(free) & set(con))
        if not rounds:
            continue
        d = [con[r] - free[r] for r in rounds]
        over[e], ci[e] = statistics.median(d), median_interval(d)
        print("| %s | %.2f | %.2f | %.3f (%.3f to %.3f) | %s | %d |" %
              (names[e], statistics.median(free[r] for r in rounds), statistics.median(con[r] for r in rounds),
               over[e], min(d), max(d),
               "%.3f to %.3f (%.1f%%)" % (ci[e][0], ci[e][1], 100 * ci[e][2]) if ci[e] else "-", len(rounds)))
    print()
    print("tokens per run: %s" % ", ".join(str(t) for t in sorted(tokens)))
    if "clade" in over and "llama" in over:
        if over["clade"] > 0 and over["llama"] > 0:
            print("overhead ratio llama.cpp / clade: %.1f" % (over["llama"] / over["clade"]))
        else:
            print("overhead ratio llama.cpp / clade: not given (an overhead at or under zero: clade %.3f, "
                  "llama.cpp %.3f ms/token)" % (over["clade"], over["llama"]))
        if ci.get("clade") and ci.get("llama"):
            lo, hi = ci["llama"][0], ci["clade"][1]
            print("lower bound of the ratio (llama.cpp's interval low / clade's high): %s" %
                  ("%.1f" % (lo / hi) if lo > 0 and hi > 0 else "none (an interval reaches zero)"))


if __name__ == "__main__":
    main()
