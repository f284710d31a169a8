#!/usr/bin/env python3
"""Prints criterion results (target/criterion) as a markdown table of throughput.

Usage: scripts/criterion-table.py GROUP_PREFIX [GROUP_PREFIX ...]

For each benchmark whose group starts with a prefix: the median time per iteration and the
throughput (elements/s, which the crossbow benches set to FLOPs or images) from criterion's
estimates of the latest run. When the latest run also measured the peak (the `peak_fma` group
of `benches/benches/gemm_conv.rs`: FMA on the widest vector unit, on 1 thread and on every
core), FLOP rows get a last column, their fraction of that peak: rows whose function is `Nt`
against the N-thread peak, single-threaded rows (the GEMM crates) against the 1-thread peak.
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


def peaks_from_run():
    """{threads: FLOP/s} from the peak_fma group of the latest run (whatever the prefixes)."""
    out = {}
    pdir = os.path.join(root, "peak_fma")
    for dirpath, _dirs, files in os.walk(pdir):
        if os.path.basename(dirpath) != "new" or "benchmark.json" not in files:
            continue
        with open(os.path.join(dirpath, "benchmark.json")) as f:
            b = json.load(f)
        with open(os.path.join(dirpath, "estimates.json")) as f:
            e = json.load(f)
        elems = (b.get("throughput") or {}).get("Elements")
        fn = b.get("function_id") or ""
        if elems and fn.endswith("t") and fn[:-1].isdigit():
            out[int(fn[:-1])] = elems / (e["median"]["point_estimate"] * 1e-9)
    return out


peaks = peaks_from_run()
head = "| group | function | input | median time | throughput (elements/s) |"
rule = "|---|---|---|---:|---:|"
if peaks:
    head += " % of peak |"
    rule += "---:|"
    print("peak (FMA, widest unit, same run): " + ", ".join(f"{t} thread(s) {p / 1e9:.1f} GFLOP/s" for t, p in sorted(peaks.items())))
    print()
print(head)
print(rule)
for g, fn, v, ns, rate in rows:
    t = f"{ns / 1e6:.3f} ms" if ns >= 1e5 else f"{ns / 1e3:.2f} us"
    r = f"{rate / 1e9:.2f} G" if rate and rate >= 1e9 else (f"{rate / 1e6:.2f} M" if rate and rate >= 1e6 else (f"{rate:.0f}" if rate else "-"))
    line = f"| {g} | {fn} | {v} | {t} | {r} |"
    if peaks:
        threads = int(fn[:-1]) if fn.endswith("t") and fn[:-1].isdigit() else 1
        flop_rows = g.startswith(("gemm", "conv2d", "peak_fma"))
        pk = peaks.get(threads)
        line += f" {100 * rate / pk:.0f}% |" if (flop_rows and rate and pk) else " - |"
    print(line)
