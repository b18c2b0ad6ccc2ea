#!/usr/bin/env python3
"""Summary of scripts/gpu_profile.sh's Nsight Compute reports.

For each case in DIR (ncu-CASE-times.csv): every kernel of the last
decode step (the launches after the second-to-last argmax_parts_kernel up
to the last one) with its launches, summed and mean time, grid and block;
then, where DIR has ncu-CASE.csv, the chief figures of the first
attention launch profiled there (time, cycles, throughput against the
peaks, occupancy and what limits it).

usage: scripts/ncu_summary.py DIR [CASE...]   (cases: b256 mha b1 by default)
       scripts/ncu_summary.py --count REGEX FILE   (the launches in FILE whose
       kernel name matches REGEX; -1 when FILE holds no report)
"""
import collections
import csv
import os
import re
import sys

METRICS = [
    "Duration", "Elapsed Cycles", "SM Active Cycles", "Compute (SM) Throughput", "Memory Throughput",
    "DRAM Throughput", "L2 Hit Rate", "Warp Cycles Per Issued Instruction", "Registers Per Thread",
    "Dynamic Shared Memory Per Block", "Grid Size", "Block Size", "Waves Per SM", "Block Limit Registers",
    "Block Limit Shared Mem", "Theoretical Occupancy", "Achieved Occupancy", "Achieved Active Warps Per SM",
]


def report_rows(path):
    """ncu --csv --page details rows (the report follows the program's output);
    None when the file holds no report."""
    with open(path) as f:
        lines = f.read().splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if at is None:
        return None
    return list(csv.DictReader(lines[at:]))


def kernel_name(full):
    return re.sub(r"\(.*", "", full)[:60]


def step_times(path):
    kernels = {}
    for r in report_rows(path) or []:
        k = kernels.setdefault(int(r["ID"]), {"name": kernel_name(r["Kernel Name"]), "grid": r["Grid Size"],
                                              "block": r["Block Size"], "ns": 0.0})
        if r["Metric Name"] == "gpu__time_duration.sum":
            scale = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
                     "s": 1e9, "second": 1e9}.get(r["Metric Unit"])
            if scale is None:
                sys.exit(f"ncu_summary.py: {path}: a time in '{r['Metric Unit']}'")
            k["ns"] = float(r["Metric Value"].replace(",", "")) * scale
    ids = sorted(kernels)
    marks = [j for j, i in enumerate(ids) if kernels[i]["name"].endswith("argmax_parts_kernel")]
    if len(marks) < 2:
        return None
    step = [kernels[i] for i in ids[marks[-2] + 1:marks[-1] + 1]]
    agg = collections.OrderedDict()
    for k in step:
        a = agg.setdefault(k["name"], {"n": 0, "ns": 0.0, "grid": k["grid"], "block": k["block"]})
        a["n"] += 1
        a["ns"] += k["ns"]
    return agg, len(step)


def main():
    usage = "usage: " + __doc__.split("usage: ")[1].strip()
    if len(sys.argv) < 2:
        sys.exit(usage)
    if sys.argv[1] == "--count":
        if len(sys.argv) != 4:
            sys.exit(usage)
        rows = report_rows(sys.argv[3])
        pattern = re.compile(sys.argv[2])
        print(-1 if rows is None else len({r["ID"] for r in rows if pattern.search(r.get("Kernel Name") or "")}))
        return
    d = sys.argv[1]
    cases = sys.argv[2:] or ["b256", "mha", "b1"]
    for c in cases:
        times = os.path.join(d, f"ncu-{c}-times.csv")
        if not os.path.exists(times):
            print(f"## {c}: no {times}")
            continue
        err = os.path.join(d, f"ncu-{c}.err")
        cmd = ""
        if os.path.exists(err):
            with open(err) as f:
                cmd = re.sub(r"^# [a-z0-9]+: ", "", f.readline().strip())
        print(f"## {c}: {cmd}")
        got = step_times(times)
        if got is None:
            print("(fewer than two argmax_parts_kernel launches: no whole step)")
            continue
        agg, n = got
        for name, a in sorted(agg.items(), key=lambda kv: -kv[1]["ns"]):
            print(f"{name:<60} n={a['n']:3d} sum={a['ns'] / 1e3:8.1f} us  mean={a['ns'] / a['n'] / 1e3:7.2f} us"
                  f"  grid={a['grid']} block={a['block']}")
        print(f"step: {sum(a['ns'] for a in agg.values()) / 1e3:.1f} us in {n} launches")
        sections = os.path.join(d, f"ncu-{c}.csv")
        rows = (report_rows(sections) or []) if os.path.exists(sections) else []
        attn = [r for r in rows if "attention" in r["Kernel Name"]]
        if attn:
            first = attn[0]["ID"]
            print(f"# {kernel_name(attn[0]['Kernel Name'])}, one launch:")
            seen = set()
            for r in attn:
                if r["ID"] == first and r["Metric Name"] in METRICS and r["Metric Name"] not in seen:
                    seen.add(r["Metric Name"])
                    print(f"  {r['Metric Name']:<40} {r['Metric Value']} {r['Metric Unit']}")
        print()


if __name__ == "__main__":
    main()
