#!/usr/bin/env python3
"""Final accuracy (mean of the evaluations in the last 2 epochs, as tta_compare.py's table) per
side and seed, from the files beside this script, and crossbow's difference from PyTorch seed
by seed (the same seed on both sides is not the same data order: the pairing only lines the
runs up)."""
import glob, json, math, os, re, statistics
here = os.path.dirname(os.path.abspath(__file__))

def final(curve):
    end = curve[-1][0]
    return statistics.mean(a for e, a in curve if e >= end - 2 - 1e-9)

runs = {}
for p in sorted(glob.glob(os.path.join(here, "crossbow-*.jsonl"))):
    cfg, seed = re.match(r"(.+)-s(\d+)\.jsonl$", os.path.basename(p)).groups()
    recs = [json.loads(l) for l in open(p)]
    if not any(r.get("event") == "end" for r in recs):
        continue
    runs.setdefault(cfg, {})[int(seed)] = final([(r["epoch"], r["test_accuracy"]) for r in recs if r.get("event") == "eval"])
for p in sorted(glob.glob(os.path.join(here, "pytorch-*.json"))):
    cfg, seed = re.match(r"(.+)-s(\d+)\.json$", os.path.basename(p)).groups()
    r = json.load(open(p))
    runs.setdefault(cfg, {})[int(seed)] = final([(c["epoch"], c["test_accuracy"]) for c in r["curve"]])
for cfg, by_seed in runs.items():
    v = [100 * by_seed[s] for s in sorted(by_seed)]
    print(f"{cfg:22} n={len(v):2}  median {statistics.median(v):.2f}  mean {statistics.mean(v):.2f}"
          f"  sd {statistics.stdev(v) if len(v) > 1 else 0:.2f}  range {min(v):.2f}-{max(v):.2f}")
torch = runs.get("pytorch-lr0.025", {})
for cfg in (c for c in runs if c.startswith("crossbow")):
    seeds = sorted(set(runs[cfg]) & set(torch))
    if len(seeds) < 2:
        continue
    d = [100 * (runs[cfg][s] - torch[s]) for s in seeds]
    se = statistics.stdev(d) / math.sqrt(len(d))
    print(f"{cfg} - pytorch-lr0.025 over {len(d)} seeds: mean {statistics.mean(d):+.2f} points"
          f" (standard error {se:.2f}), crossbow higher on {sum(x > 0 for x in d)}, equal on {sum(x == 0 for x in d)}")
