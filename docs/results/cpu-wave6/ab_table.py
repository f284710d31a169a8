#!/usr/bin/env python3
"""The before/after table of BENCHMARKS.md §2 (formerly §10.4, now in NOTES.md here) from run.sh's ab-*.json (medians of rounds)."""
import glob, json, os, statistics, sys
d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
def load(name):
    runs = {}
    for f in sorted(glob.glob(os.path.join(d, f"ab-{name}-*.json"))):
        for r in json.load(open(f))["rows"]:
            runs.setdefault((r["model"], r["batch"], r["learners_per_device"]), []).append(r["images_per_sec"])
    return runs
base, new = load("crossbow-base"), load("crossbow-new")
print("| model | batch | learners | before img/s (rounds) | after img/s (rounds) | after / before (medians) |")
print("|---|---:|---:|---:|---:|---:|")
ratios = []
for k in base:
    b, n = statistics.median(base[k]), statistics.median(new[k])
    ratios.append(n / b)
    fmt = lambda v: " / ".join(f"{x:.0f}" for x in v)
    print(f"| {k[0]} | {k[1]} | {k[2]} | {fmt(base[k])} | {fmt(new[k])} | {n / b:.2f}x |")
print(f"\ngeometric mean of the ratios: {statistics.geometric_mean(ratios):.2f}x")
