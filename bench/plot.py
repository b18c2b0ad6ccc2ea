#!/usr/bin/python3
"""PNG plots of the committed benchmark CSVs (Debian's python3-matplotlib;
run with /usr/bin/python3).

  decode-side-by-side.png  decode tokens/s against batch, one panel per
                           prefix: clade (shared) and llama.cpp, medians of
                           a bench/peer/decode_side_by_side.sh CSV
  decode-modes.png         decode tokens/s against batch, one panel per
                           prefix: clade shared, flat and noattn (the
                           ceiling without attention), from a `clade bench
                           decode --mode shared,flat,noattn --csv` sweep
                           (bench/run_sweep.sh's decode-kv4.csv)
  decode-attention.png     attention time per step (step minus noattn)
                           against prefix, per batch, shared and flat
  gpu-decode-modes.png,    the same two from a scripts/gpu_check.sh CSV
  gpu-decode-attention.png (--gpu; --gpu-name names the GPU in the titles)
  decode-kv.png            KV memory against batch, per prefix: one shared
                           copy of the prefix (clade's tree) against a copy
                           per sequence (B x (P + G)), from the model's
                           shape

usage: /usr/bin/python3 bench/plot.py [--side-by-side CSV] [--sweep CSV] [--gpu CSV]
           [--layers 8 --kv-heads 4 --head-dim 64 --kv-bytes 2 --gen 32]
           [--out DIR (bench/plots)]"""
import argparse
import csv
import os
import statistics
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def panels(prefixes, title):
    fig, axes = plt.subplots(1, len(prefixes), figsize=(4.2 * len(prefixes), 3.8), squeeze=False)
    fig.suptitle(title)
    return fig, axes[0]


def batch_axis(ax, prefix):
    """A panel of decode tokens/s against batch, for one prefix."""
    ax.set_xscale("log", base=2)
    ax.set_title("prefix %d" % prefix)
    ax.set_xlabel("batch (sequences)")
    ax.set_ylabel("decode tokens/s")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def side_by_side(rows, out):
    med = defaultdict(list)
    for r in rows:
        med[(r["engine"], int(r["prefix"]), int(r["batch"]))].append(float(r["decode_tokens_per_s"]))
    prefixes = sorted({k[1] for k in med})
    fig, axes = panels(prefixes, "Batch decode, clade and llama.cpp in one run (medians)")
    for ax, p in zip(axes, prefixes):
        for eng, label, style in (("clade", "clade (shared prefix)", "o-"), ("llama", "llama.cpp (-pps -kvu)", "s--")):
            pts = sorted((b, statistics.median(v)) for (e, pp, b), v in med.items() if e == eng and pp == p)
            if pts:
                ax.plot([b for b, _ in pts], [t for _, t in pts], style, label=label)
        batch_axis(ax, p)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "decode-side-by-side.png"), dpi=110)
    plt.close(fig)


def sweep(rows, out, name="decode", title="clade batch decode by attention mode"):
    tps = {(r["mode"], int(r["prefix"]), int(r["batch"])): float(r["tokens_per_s"]) for r in rows}
    ms = {(r["mode"], int(r["prefix"]), int(r["batch"])): float(r["ms_per_step"]) for r in rows}
    prefixes = sorted({k[1] for k in tps})
    fig, axes = panels(prefixes, title)
    for ax, p in zip(axes, prefixes):
        for mode, style in (("shared", "o-"), ("flat", "s--"), ("noattn", "k:")):
            pts = sorted((b, t) for (m, pp, b), t in tps.items() if m == mode and pp == p)
            if pts:
                ax.plot([b for b, _ in pts], [t for _, t in pts], style, label=mode)
        batch_axis(ax, p)
    fig.tight_layout()
    fig.savefig(os.path.join(out, name + "-modes.png"), dpi=110)
    plt.close(fig)
    # attention time per step: the step minus the step without attention
    batches = sorted({k[2] for k in ms})
    fig, ax = plt.subplots(figsize=(6, 4))
    for b in batches:
        color = None
        for mode, style in (("shared", "o-"), ("flat", "s--")):
            pts = sorted((p, ms[(mode, p, b)] - ms[("noattn", p, b)]) for (m, p, bb) in ms
                         if m == mode and bb == b and ("noattn", p, b) in ms)
            pts = [(p, t) for p, t in pts if t > 0]  # (inside the noise at small batches)
            if pts:
                line, = ax.plot([p for p, _ in pts], [t for _, t in pts], style, color=color,
                                label="%s, batch %d" % (mode, b))
                color = line.get_color()
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("shared prefix (tokens)")
    ax.set_ylabel("attention ms per step (step - noattn)")
    ax.set_title(title.replace("batch decode by attention mode", "attention time per decode step"))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(os.path.join(out, name + "-attention.png"), dpi=110)
    plt.close(fig)


def kv_memory(a, prefixes, batches, out):
    per_token = a.layers * 2 * a.kv_heads * a.head_dim * a.kv_bytes
    fig, ax = plt.subplots(figsize=(6, 4))
    for p in prefixes:
        shared = [(p + b * a.gen) * per_token / 2**20 for b in batches]
        flat = [b * (p + a.gen) * per_token / 2**20 for b in batches]
        line, = ax.plot(batches, shared, "o-", label="tree, prefix %d" % p)
        ax.plot(batches, flat, "s--", color=line.get_color(), label="a copy per sequence, prefix %d" % p)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (sequences)")
    ax.set_ylabel("KV MiB")
    ax.set_title("KV memory (%d layers, %d KV heads of %d, %d-byte elements, %d new tokens)" %
                 (a.layers, a.kv_heads, a.head_dim, a.kv_bytes, a.gen), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "decode-kv.png"), dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--side-by-side")
    ap.add_argument("--sweep")
    ap.add_argument("--gpu", help="a scripts/gpu_check.sh decode CSV: gpu-decode-modes.png, gpu-decode-attention.png")
    ap.add_argument("--gpu-name", default="GPU")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--kv-bytes", type=int, default=2)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots"))
    a = ap.parse_args()
    if not a.side_by_side and not a.sweep and not a.gpu:
        ap.error("give --side-by-side CSV, --sweep CSV and/or --gpu CSV")
    os.makedirs(a.out, exist_ok=True)
    if a.gpu:
        sweep(read(a.gpu), a.out, "gpu-decode", "clade batch decode by attention mode, CUDA on an %s" % a.gpu_name)
        if not a.side_by_side and not a.sweep:
            print("plots in %s" % a.out)
            return
    prefixes, batches = set(), set()
    for path, fn in ((a.side_by_side, side_by_side), (a.sweep, sweep)):
        if path:
            rows = read(path)
            fn(rows, a.out)
            prefixes |= {int(r["prefix"]) for r in rows}
            batches |= {int(r["batch"]) for r in rows}
    kv_memory(a, sorted(prefixes), sorted(batches), a.out)
    print("plots in %s" % a.out)


if __name__ == "__main__":
    main()
