#!/usr/bin/env python3
"""Each point of a side-by-side sweep against its roofline (issue 24).

A decode step of B sequences under a shared prefix of P tokens, each with
about G/2 tokens of its own (the mean over the G steps), has two parts:

  weights    every matrix streamed once (the token embedding is a gather):
             bytes = parameters x bytes per weight; FLOPs = 2 x parameters x B
  attention  every query head against P + G/2 keys: FLOPs = 4 x head_dim x
             keys x heads x layers x B; bytes = the KV read: the prefix's KV
             once per step (clade's shared node), or once per sequence
             (a flat reading, what llama.cpp's unified cache does), plus
             each sequence's own keys

A part's roofline time is max(bytes / read bandwidth, FLOPs / GEMM peak);
the step's is the two parts' sum (they do not overlap). The bandwidth and
peak are the best of `clade bench machine` before and after the sweep.
Printed per point: clade's step (median of the rounds) against the shared
roofline, llama.cpp's against the flat one, and what bounds each part.

usage: roofline_table.py SIDE_CSV MACHINE_CSV... [--layers 8 --dim 1024
       --heads 16 --kv-heads 4 --ff 2816 --vocab 32000 --weight-bytes 2
       --kv-bytes 2 --gen 32]
"""
import argparse
import csv
import statistics
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("side")
    ap.add_argument("machine", nargs="+")
    for name, val in [("layers", 8), ("dim", 1024), ("heads", 16), ("kv-heads", 4), ("ff", 2816),
                      ("vocab", 32000), ("gen", 32)]:
        ap.add_argument("--" + name, type=int, default=val)
    ap.add_argument("--weight-bytes", type=float, default=2.0)
    ap.add_argument("--kv-bytes", type=float, default=2.0)
    a = ap.parse_args()

    bw, peak = 0.0, 0.0
    for path in a.machine:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                bw = max(bw, float(row["read_bandwidth_gb_s"]))
                peak = max(peak, float(row["gemm_gflop_s"]))
    hd = a.dim // a.heads
    per_layer = 2 * a.dim * a.dim + 2 * a.kv_heads * hd * a.dim + 3 * a.dim * a.ff
    params = a.layers * per_layer + a.vocab * a.dim  # the output matrix; not the embedding
    kv_token = a.layers * 2 * a.kv_heads * hd * a.kv_bytes  # bytes of KV per token

    runs = defaultdict(list)
    with open(a.side, newline="") as f:
        for row in csv.DictReader(f):
            runs[(row["engine"], int(row["batch"]), int(row["prefix"]))].append(float(row["decode_tokens_per_s"]))

    def part(nbytes, flops):
        t_mem, t_fl = nbytes / (bw * 1e9), flops / (peak * 1e9)
        return max(t_mem, t_fl), "mem" if t_mem >= t_fl else "fl"

    print("read bandwidth %.1f GB/s, GEMM peak %.1f GFLOP/s (best of the machine CSVs); "
          "weights %.1f MB a step" % (bw, peak, params * a.weight_bytes / 1e6))
    print("| batch | prefix | weights ms (bound) | attn shared ms | attn flat ms | clade ms | x roofline "
          "| llama.cpp ms | x flat roofline |")
    print("|---:|---:|---|---|---|---:|---:|---:|---:|")
    points = sorted({(b, p) for (_, b, p) in runs}, key=lambda bp: (bp[1], bp[0]))
    for b, p in points:
        own = a.gen / 2
        w_t, w_b = part(params * a.weight_bytes, 2.0 * params * b)
        flops_att = 4.0 * hd * (p + own) * a.heads * a.layers * b
        s_t, s_b = part(kv_token * (p + b * own), flops_att)
        f_t, f_b = part(kv_token * b * (p + own), flops_att)
        row = "| %d | %d | %.1f (%s) | %.1f (%s) | %.1f (%s) |" % (b, p, w_t * 1e3, w_b, s_t * 1e3, s_b, f_t * 1e3, f_b)
        for eng, roof in (("clade", w_t + s_t), ("llama", w_t + f_t)):
            tps = runs.get((eng, b, p))
            if not tps:
                row += " | |"
                continue
            ms = b / statistics.median(tps) * 1e3
            row += " %.1f | %.2f |" % (ms, ms / (roof * 1e3))
        print(row)


if __name__ == "__main__":
    main()
