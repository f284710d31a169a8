#!/usr/bin/env python3
"""crossbow's peak resident memory at the learners its tuner picked in avx512.json / avx2.json
(those runs' compare.py reported the tuner run's own peak, which includes the larger
configurations it tried): python3 memory.py > memory.md, from this folder."""
import json, os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "benches", "peers"))
from compare import run_rss  # noqa: E402
cb = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "target", "release", "crossbow")
print("| ISA | model | batch | learners | crossbow MB | crossbow's tuner run MB | PyTorch MB (torch alone) |")
print("|---|---|---:|---:|---:|---:|---:|")
for isa in ("avx512", "avx2"):
    body = json.load(open(f"{isa}.json"))
    for r in body["rows"]:
        k = statistics.mode(r["learners"])
        env = dict(os.environ, CROSSBOW_CPU_ISA=isa)
        _, rss = run_rss([cb, "bench", "--model", r["model"], "--batch-size", str(r["batch"]), "--learners", str(k),
                          "--devices", "cpu", "--threads", str(body["threads"]), "--iterations", "3", "--warmup", "1"], env)
        print(f"| {isa} | {r['model']} | {r['batch']} | {k} | {rss / 1e6:.0f} | {max(r['crossbow_rss']) / 1e6:.0f} | "
              f"{max(r['pytorch_rss']) / 1e6:.0f} ({body['torch_import_rss'] / 1e6:.0f}) |")
