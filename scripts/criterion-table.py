#!/usr/bin/env python3
"""Prints criterion results (target/criterion) as a markdown table of throughput.

Usage: scripts/criterion-table.py GROUP_PREFIX [GROUP_PREFIX ...]

For each benchmark whose group starts with a prefix: the median time per iteration and the
throughput (elements/s, which the crossbow benches set to FLOPs or images) from criterion's
estimates of the latest run.
"""
import json
import os
import sys

root = os.path.join(os.path.dirname(__file__), "..", "target", "criterion")
prefixes = sys.argv[1:] or [""]
rows = []
for dirpath, _dirs, files in os.walk(root):
    if os.path.basename(dirpath) != "new" or "benchmark.json" not in files:
        continue
    with open(os.path.join(dirpath, "benchmark.json")) as f:
        b = json.load(f)
    if not any(b["group_id"].startswith(p) for p in prefixes):
        continue
    with open(os.path.join(dirpath, "estimates.json")) as f:
        e = json.load(f)
    ns = e["median"]["point_estimate"]
    thr = b.get("throughput") or {}
    elems = thr.get("Elements") or thr.get("Bytes")
    rate = elems / (ns * 1e-9) if elems else None
    rows.append((b["group_id"], b.get("function_id") or "", b.get("value_str") or "", ns, rate))
rows.sort()
print("| group | function | input | median time | throughput (elements/s) |")
print("|---|---|---|---:|---:|")
for g, fn, v, ns, rate in rows:
    t = f"{ns / 1e6:.3f} ms" if ns >= 1e5 else f"{ns / 1e3:.2f} us"
    r = f"{rate / 1e9:.2f} G" if rate and rate >= 1e9 else (f"{rate / 1e6:.2f} M" if rate and rate >= 1e6 else (f"{rate:.0f}" if rate else "-"))
    print(f"| {g} | {fn} | {v} | {t} | {r} |")
