#!/usr/bin/env python3
"""One line per variant of the full-size test: final and best accuracy, and the epochs and
training seconds to each target, per seed, read from the runs' logs (runs/NAME-sSEED.log: one
line per evaluation, 'epoch E iter I Ts ... test acc A%').

Usage: python3 summary.py [--targets 86,87,88] [runs-folder]"""
import re, sys, glob, os, statistics
args = sys.argv[1:]
targets = [86.0, 87.0, 88.0]
if args[:1] == ["--targets"]:
    targets = [float(t) for t in args[1].split(",")]
    args = args[2:]
folder = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs")
line = re.compile(r"^epoch\s+([\d.]+)\s+iter\s+\d+\s+([\d.]+)s .*test acc\s+([\d.]+)%")
runs = {}
for path in sorted(glob.glob(os.path.join(folder, "*-s*.log"))):
    name, seed = re.match(r"(.+)-s(\d+)\.log$", os.path.basename(path)).groups()
    curve = [tuple(float(x) for x in m.groups()) for m in map(line.match, open(path)) if m]
    if curve:
        runs.setdefault(name, []).append((int(seed), curve))
def first(curve, t):
    for e, s, a in curve:
        if a >= t:
            return f"{e:.0f} ep/{s/60:.0f} min"
    return "-"
for name, seeds in runs.items():
    finals = [c[-1][2] for _, c in seeds]
    print(f"{name}: {len(seeds)} seed(s), final {' '.join(f'{f:.2f}' for f in finals)}"
          f" (median {statistics.median(finals):.2f}), best {' '.join(f'{max(a for *_, a in c):.2f}' for _, c in seeds)},"
          f" epochs {' '.join(f'{c[-1][0]:.0f}' for _, c in seeds)}")
    for t in targets:
        print(f"    to {t:.0f}%: " + ", ".join(f"s{s} {first(c, t)}" for s, c in seeds))
