#!/usr/bin/python3
"""Turn `clade bench decode` CSV into the tables of bench/README.md.

usage: bench/report.py MACHINE_CSV DECODE_CSV KV_HEADS [--layers 8 --heads 16 --head-dim 64 --kv-bytes 2]

For every (batch, prefix) point: step time per mode, shared/flat throughput,
the attention part of a step (mode step time minus the noattn step time) and
its roofline, max(KV bytes read / bandwidth, attention FLOPs / GEMM peak),
both measured on the same machine: per point when the decode CSV has them
(`clade bench decode --machine`: the best of every round, as the step times
are), else from MACHINE_CSV (`clade bench machine`).

The attention part, two ways: best mode step minus best noattn step (the
step times the table reports, against the best bandwidth and peak of the
same rounds), and, when the CSV has it, the paired median (attn_ms: per
round, mode minus noattn of the same round; median over rounds), which
carries the machine's noise. With the per-round lists of `--machine`
(round_attn_ms, round_bw_gb_s, round_gflop_s) a third figure: each round's
attention part against the roofline of that round's own bandwidth and
peak, median over rounds ("per round"). The machine's memory reads at
about 33 GB/s most of the time and 55-60 for seconds now and then: the best
bandwidth of a point's rounds and its best step then often come from
different seconds. With round_step_bw_gb_s (a read pass before every timed
step, median per mode and round) a fourth figure, "in steps": each round's
attention part against the roofline of the bandwidth read between that
mode's own steps (and the round's GEMM peak); it sets each step against
the memory it ran with, where the round's first reading (best of 5 passes)
may have caught a quick second. Noise: the largest (median - best) step time
of the point's modes; a best-minus-best part below twice that is marked "~"
(not resolved by the run).

KV bytes read per step: flat reads every sequence's whole context; shared
reads the prefix once plus every sequence's own tokens. Attention FLOPs
(both): 4 * head_dim * query_heads * layers per (query, key) pair.
The timed steps see on average gen/2 + 1 unique tokens of their own.
"""
import csv
import sys


def main():
    args = sys.argv[1:]
    if len(args) < 3:
        print(__doc__)
        sys.exit(2)
    machine_csv, decode_csv, kv_heads = args[0], args[1], int(args[2])
    opts = {"--layers": 8, "--heads": 16, "--head-dim": 64, "--kv-bytes": 2}
    rest = args[3:]
    for i in range(0, len(rest), 2):
        opts[rest[i]] = int(rest[i + 1])
    layers, heads, hd, kvb = opts["--layers"], opts["--heads"], opts["--head-dim"], opts["--kv-bytes"]
    with open(machine_csv) as f:
        m = list(csv.DictReader(f))[0]
    bw = float(m.get("read_bandwidth_gb_s") or m["bandwidth_gb_s"]) * 1e9
    peak = float(m["gemm_gflop_s"]) * 1e9
    per_token = layers * 2 * kv_heads * hd * kvb  # K and V bytes of one token

    points = {}
    with open(decode_csv) as f:
        for row in csv.DictReader(f):
            key = (int(row["prefix"]), int(row["batch"]))
            points.setdefault(key, {})[row["mode"]] = row
    print("bandwidth %.1f GB/s, GEMM peak %.1f GFLOP/s (clade bench machine)\n" % (bw / 1e9, peak / 1e9))
    print("| prefix | batch | shared ms | flat ms | noattn ms | shared/flat speed | attn shared ms: best, median "
          "(roofline; x) | attn flat ms: best, median (roofline; x) | noise ms | GB/s, GFLOP/s |")
    print("|---:|---:|---:|---:|---:|---:|---|---|---:|---|")
    for (prefix, batch) in sorted(points):
        p = points[(prefix, batch)]
        gen = int(next(iter(p.values()))["gen"])
        suffix = int(next(iter(p.values()))["suffix"])
        own = suffix + gen / 2 + 1
        ms = {k: (None if v["ms_per_step"] == "x" else float(v["ms_per_step"])) for k, v in p.items()}
        med = {k: float(v["ms_median"]) for k, v in p.items() if v.get("ms_median") not in (None, "", "x")}
        noise = max([med[k] - ms[k] for k in med if ms.get(k) is not None] or [0.0])
        pbw, ppeak = bw, peak
        row0 = next(iter(p.values()))
        if row0.get("read_bandwidth_gb_s"):
            pbw, ppeak = float(row0["read_bandwidth_gb_s"]) * 1e9, float(row0["gemm_gflop_s"]) * 1e9
        flops = 4.0 * hd * heads * layers * batch * (prefix + own)
        roof = {
            "shared": max((prefix + batch * own) * per_token / pbw, flops / ppeak) * 1e3,
            "flat": max(batch * (prefix + own) * per_token / pbw, flops / ppeak) * 1e3,
        }

        def per_round(mode, bw_key="round_bw_gb_s"):
            """Median over rounds of (attention part / that round's roofline), or None."""
            row = p[mode]
            lists = [row.get(k) for k in ("round_attn_ms", bw_key, "round_gflop_s")]
            if any(v in (None, "", "x") for v in lists):
                return None
            attn, rbw, rpeak = ([float(x) for x in v.split(";")] for v in lists)
            if not (len(attn) == len(rbw) == len(rpeak)):
                return None
            kv_bytes = (prefix + batch * own if mode == "shared" else batch * (prefix + own)) * per_token
            r = sorted(a / (max(kv_bytes / (b * 1e9), flops / (g * 1e9)) * 1e3) for a, b, g in zip(attn, rbw, rpeak))
            return r[len(r) // 2]

        def cell(mode):
            if ms.get(mode) is None or ms.get("noattn") is None:
                return "x"
            best = ms[mode] - ms["noattn"]
            vague = " ~" if best < 2 * noise else ""
            if p[mode].get("attn_ms") in (None, "", "x"):
                return "%.1f (%.1f; %.2fx%s)" % (best, roof[mode], best / roof[mode], vague)
            med = float(p[mode]["attn_ms"])
            pr = per_round(mode)
            tail = "" if pr is None else "; per round %.2fx" % pr
            ps = per_round(mode, "round_step_bw_gb_s")
            tail += "" if ps is None else ", in steps %.2fx" % ps
            return "%.1f, %.1f (%.1f; %.2fx%s, %.2fx%s)" % (best, med, roof[mode], best / roof[mode], vague,
                                                            med / roof[mode], tail)

        ratio = "x"
        if ms.get("shared") and ms.get("flat"):
            ratio = "%.2f" % (ms["flat"] / ms["shared"])
        fmt = lambda v: "x" if v is None else "%.1f" % v
        print("| %d | %d | %s | %s | %s | %s | %s | %s | %.1f | %.1f, %.0f |" % (
            prefix, batch, fmt(ms.get("shared")), fmt(ms.get("flat")), fmt(ms.get("noattn")), ratio, cell("shared"),
            cell("flat"), noise, pbw / 1e9, ppeak / 1e9))


if __name__ == "__main__":
    main()
