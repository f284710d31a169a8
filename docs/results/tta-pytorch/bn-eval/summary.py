#!/usr/bin/env python3
"""Per setting of --bn-eval: epochs and seconds to 55%, final accuracy, and the share of the
run's wall time spent recalibrating and evaluating (the `phases` of each run's end record)."""
import glob
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
rows = {}
for path in sorted(glob.glob(os.path.join(HERE, "ssgd-*-s*.jsonl"))) + sorted(glob.glob(os.path.join(HERE, "sma-*-s*.jsonl"))):
    name = os.path.basename(path).rsplit("-s", 1)[0].replace("-", " ", 1)
    recs = [json.loads(line) for line in open(path)]
    end = next((r for r in recs if r.get("event") == "end"), None)
    if end is None:
        continue
    evals = [r for r in recs if r.get("event") == "eval"]
    hit = next((r for r in evals if r["test_accuracy"] >= 0.55), None)
    ph = end.get("phases") or {}
    wall = sum(ph.values()) or 1.0
    rows.setdefault(name, []).append((hit and hit["epoch"], hit and hit["wall_seconds"], end["final_accuracy"],
                                      100 * ph.get("recalibration", 0.0) / wall, 100 * ph.get("evaluation", 0.0) / wall))
print("| synchroniser, --bn-eval | seeds | epochs to 55% | seconds to 55% | final accuracy % | recalibration % of wall | evaluation % |")
print("|---|---|---|---|---|---|---|")
for name, rs in rows.items():
    f = lambda i, fmt: ", ".join("miss" if r[i] is None else fmt % r[i] for r in rs)  # noqa: E731
    final = ", ".join("%.1f" % (100 * r[2]) for r in rs)
    print(f"| {name} | {len(rs)} | {f(0, '%.1f')} | {f(1, '%.0f')} | {final} "
          f"| {statistics.median(r[3] for r in rs):.1f} | {statistics.median(r[4] for r in rs):.1f} |")
