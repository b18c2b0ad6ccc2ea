#!/usr/bin/env python3
"""scripts/ab_summary.py on a committed gpu_ab.sh report (the H200's of
2026-11-27, whose figures bench/README.md tables by hand) and on reports
it must refuse. usage: test_ab_summary.py SOURCE_ROOT"""
import importlib.util
import io
import os
import sys

root = sys.argv[1]
spec = importlib.util.spec_from_file_location("ab_summary", os.path.join(root, "scripts", "ab_summary.py"))
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)
failures = 0


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print("FAIL:", what)


with open(os.path.join(root, "bench", "results", "gpu-h200-ab2-1127.txt")) as f:
    runs = ab.parse(f)
check(list(runs)[:2] == ["X", "CLADE_CUDA_MMA_EXP2=0"], f"settings in order: {list(runs)}")
rows = {line.split(" | ")[0].lstrip("| "): line for line in ab.table(runs).splitlines()[2:]}
# bench/README.md's A/B of call 2: b256 x 8192 shared 0.889 / 0.884, flat
# 5.234 / 5.226; the multi-head model's shared 0.394 / 0.395.
check("| 0.889 / 0.884 | 5.234 / 5.226 |" in rows.get("X", ""), "X's batch 256 cells: " + rows.get("X", "none"))
check("| 0.394 / 0.395 | 2.640 / 2.640 |" in rows.get("X", ""), "X's multi-head cells")
check("| 1.107 / 1.097 |" in rows.get("CLADE_CUDA_MMA_EXP2=0", ""), "EXP2=0's batch 256 shared cells")
check(len(rows) == 5, f"{len(rows)} settings tabled")

bad = {
    "a row before any setting": "mode,batch,prefix,attn_ms\nshared,1,2048,0.1\n",
    "no setting at all": "# a comment\n",
    "a row with too many fields": "# X round 1\nmode,batch,prefix,attn_ms\nshared,1,2048,0.1,9\n",
    "a setting line without a number": "# X round one\n",
}
for what, text in bad.items():
    try:
        ab.parse(io.StringIO(text))
        check(False, f"{what}: parsed")
    except ValueError as e:
        check("line" in str(e) or "report" in str(e), f"{what}: message {e}")

print("all checks passed" if not failures else f"{failures} check(s) failed")
sys.exit(1 if failures else 0)
