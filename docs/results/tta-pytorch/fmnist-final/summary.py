#!/usr/bin/env python3
"""Final accuracy (mean of the evaluations in the last 2 epochs, as tta_compare.py's table) and
epochs to 89% per configuration and seed, from the metrics files beside this script."""
import glob, json, os, re, statistics
here = os.path.dirname(os.path.abspath(__file__))
rows = {}
for p in sorted(glob.glob(os.path.join(here, "*.jsonl"))):
    cfg, seed = re.match(r"(.+)-s(\d)\.jsonl$", os.path.basename(p)).groups()
    ev = [r for r in map(json.loads, open(p)) if r.get("event") == "eval"]
    end = ev[-1]["epoch"]
    final = statistics.mean(e["test_accuracy"] for e in ev if e["epoch"] >= end - 2 - 1e-9)
    hit = next((e["epoch"] for e in ev if e["test_accuracy"] >= 0.89), None)
    rows.setdefault(cfg, []).append((int(seed), final, hit))
for cfg, rs in rows.items():
    print(f"{cfg:18} final " + ", ".join(f"{100 * f:.2f}" for _, f, _ in rs)
          + f" (median {100 * statistics.median(f for _, f, _ in rs):.2f}); epochs to 89%: "
          + ", ".join("miss" if h is None else f"{h:.1f}" for *_, h in rs))
