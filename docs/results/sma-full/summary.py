#!/usr/bin/env python3
"""One line per variant of the full-size test: final and best accuracy, and the epochs and
training seconds to each target, per seed, read from the runs' logs (runs/NAME-sSEED.log: one
line per evaluation, 'epoch E iter I Ts ... test acc A%').

Usage: python3 summary.py [--targets 86,87,88] [--svg curves.svg] [runs-folder]

With --svg, also draws every run's test accuracy against epochs (one colour per variant, one
line per seed) from epoch 20 on, where the variants part.
"""
import re, sys, glob, os, statistics
args = sys.argv[1:]
targets = [86.0, 87.0, 88.0]
svg = None
while args[:1] in (["--targets"], ["--svg"]):
    if args[0] == "--targets":
        targets = [float(t) for t in args[1].split(",")]
    else:
        svg = args[1]
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

if svg:
    W, H, L, R, T, B = 760, 460, 60, 190, 20, 45
    x0, x1 = 20.0, max(c[-1][0] for seeds in runs.values() for _, c in seeds)
    accs = [a for seeds in runs.values() for _, c in seeds for e, _, a in c if e >= x0]
    y0, y1 = float(int(min(accs))), float(int(max(accs)) + 1)
    X = lambda e: L + (e - x0) / (x1 - x0) * (W - L - R)
    Y = lambda a: T + (y1 - a) / (y1 - y0) * (H - T - B)
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>']
    for a in range(int(y0), int(y1) + 1):
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{Y(a):.1f}" y2="{Y(a):.1f}" stroke="#ddd"/>'
                   f'<text x="{L - 6}" y="{Y(a) + 4:.1f}" text-anchor="end">{a}%</text>')
    for e in range(int(x0), int(x1) + 1, 5):
        out.append(f'<text x="{X(e):.1f}" y="{H - B + 16}" text-anchor="middle">{e}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 8}" text-anchor="middle">epoch</text>')
    for i, (name, seeds) in enumerate(runs.items()):
        c = colours[i % len(colours)]
        for _, curve in seeds:
            pts = " ".join(f"{X(e):.1f},{Y(a):.1f}" for e, _, a in curve if e >= x0)
            out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1.2" opacity="0.8"/>')
        y = T + 14 + 18 * i
        out.append(f'<line x1="{W - R + 12}" x2="{W - R + 32}" y1="{y - 4}" y2="{y - 4}" stroke="{c}" stroke-width="2"/>'
                   f'<text x="{W - R + 38}" y="{y}">{name} ({len(seeds)} seed{"s" if len(seeds) > 1 else ""})</text>')
    out.append("</svg>")
    open(svg, "w").write("\n".join(out) + "\n")
    print(f"wrote {svg}")
