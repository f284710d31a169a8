#!/usr/bin/env python3
"""Time to accuracy, crossbow against PyTorch on the same cores and data (issue 49).

Each side's learning rate and batch size are tuned on one grid with a tuning seed (PyTorch in
the faster of its memory formats at each batch size, by images/s over a short run first), by
seconds to the target (a miss ranks after every hit, then by final
accuracy); then both run at their picks on seeds 1..N, alternating (crossbow, PyTorch,
crossbow, ...), so a slow moment of a shared machine falls on both. Every run counts: medians
over all seeds with a miss as infinitely slow, ranges over the hits.

Seconds are wall time from each side's first training iteration to the end of the first
evaluation at or above the target (training and evaluation both; crossbow's `wall_seconds`
of its metrics, `tta.py`'s `seconds`). Peak resident memory: each child's own (`wait4`),
PyTorch's DataLoader workers beside it.

    cargo build --release -p crossbow-cli
    python3 benches/peers/tta_compare.py --python ~/torchenv/bin/python --model resnet20 \\
        --dataset cifar10 --data-dir data/cifar10-4k --target 0.55 --epochs 30 \\
        --batch-size 16,32,64 --lr 0.025,0.05,0.1 --seeds 3 --out tta-resnet20-4k --resume

Writes OUT/runs.jsonl (appended as runs end; `--resume` skips the runs it holds) and
OUT/table.md. crossbow runs its defaults (the tuner picks the learners, the model's default
synchroniser) unless `--crossbow-flags` adds its best configuration's.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def run_child(cmd):
    """Runs cmd; returns (exit code, stdout, peak RSS in MB of the child itself)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        o, e = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if p.returncode != 0:
        sys.stderr.write(f"{' '.join(cmd)}\nexit {p.returncode}\n{e[-2000:]}\n")
    return p.returncode, o, ru.ru_maxrss / 1024


def crossbow_run(a, b, lr, seed):
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "m.jsonl")
        cmd = [a.crossbow, "train", "--model", a.model, "--dataset", a.dataset, "--data-dir", a.data_dir,
               "--batch-size", str(b), "--lr", str(lr), "--schedule", a.schedule, "--epochs", str(a.epochs),
               "--eval-every", str(a.eval_every), "--seed", str(seed), "--devices", "cpu", "--threads",
               str(a.threads), "--metrics", metrics, "-q"]
        if not a.run_to_end:
            cmd += ["--target-accuracy", str(a.target)]
        cmd += a.crossbow_flags.split()
        rc, _, rss = run_child(cmd)
        recs = [json.loads(l) for l in open(metrics)] if os.path.exists(metrics) else []
    evals = [r for r in recs if r.get("event") == "eval"]
    curve = [{"epoch": e["epoch"], "seconds": e["wall_seconds"], "test_accuracy": e["test_accuracy"]} for e in evals]
    learners = evals[-1].get("learners") if evals else None
    # Where the run's wall time went (steps, input wait, recalibration, evaluation, checkpoints).
    phases = next((r.get("phases") for r in recs if r.get("event") == "end"), None)
    return finish({"side": "crossbow", "batch": b, "lr": lr, "seed": seed, "rc": rc, "peak_rss_mb": rss,
                   "learners": learners, "phases": phases, "curve": curve}, a)


def torch_run(a, b, lr, seed, fmt, probe_epochs=None):
    epochs = probe_epochs or a.epochs
    cmd = [a.python, os.path.join(HERE, "tta.py"), "--model", a.model, "--dataset", a.dataset, "--data-dir",
           a.data_dir, "--batch-size", str(b), "--lr", str(lr), "--schedule", a.schedule, "--epochs", str(epochs),
           "--eval-every", str(a.eval_every), "--seed", str(seed), "--threads", str(a.threads), "--target",
           str(a.target), "--memory-format", fmt, "--workers", str(a.workers)] + a.torch_flags.split()
    if a.run_to_end or probe_epochs:
        cmd.append("--run-to-end")
    rc, out, rss = run_child(cmd)
    try:
        r = json.loads(out.strip().splitlines()[-1])
    except (IndexError, ValueError):
        r = {"curve": []}
    return finish({"side": "pytorch", "batch": b, "lr": lr, "seed": seed, "rc": rc, "memory_format": fmt,
                   "peak_rss_mb": rss, "peak_rss_workers_mb": r.get("peak_rss_workers_mb"),
                   "images_per_sec": r.get("images_per_sec"), "curve": r.get("curve", [])}, a)


def finish(r, a):
    """Epochs and seconds to the target, and final accuracy, read from the curve alike for both."""
    c = r["curve"]
    hit = next((p for p in c if p["test_accuracy"] >= a.target), None)
    end = c[-1]["epoch"] if c else 0.0
    tail = [p["test_accuracy"] for p in c if p["epoch"] >= end - a.final_epochs - 1e-9]
    r.update(reached=hit is not None, epochs_to_target=hit and hit["epoch"], seconds_to_target=hit and hit["seconds"],
             final_accuracy=sum(tail) / len(tail) if tail else 0.0, model=a.model, dataset=a.dataset,
             data_dir=a.data_dir, target=a.target, schedule=a.schedule, threads=a.threads)
    return r


def key(r):
    return (r["phase"], r["side"], r["batch"], r["lr"], r["seed"], r.get("memory_format"))


def rank(r):
    return (0 if r["reached"] else 1, r["seconds_to_target"] or 0.0, -r["final_accuracy"])


def median_with_misses(v):
    v = sorted(float("inf") if x is None else x for x in v)
    if not v:
        return None
    m = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    return None if m == float("inf") else m


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--crossbow", default=os.path.join(ROOT, "target", "release", "crossbow"))
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--model", default="resnet20")
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--data-dir", default="data/cifar10-4k")
    p.add_argument("--target", type=float, default=0.55)
    p.add_argument("--epochs", type=float, default=30)
    p.add_argument("--eval-every", type=float, default=0.5)
    p.add_argument("--final-epochs", type=float, default=2)
    p.add_argument("--schedule", default="constant")
    p.add_argument("--batch-size", default="16,32,64")
    p.add_argument("--lr", default="0.025,0.05,0.1")
    p.add_argument("--formats", default="nchw,channels_last")
    p.add_argument("--format-probe-epochs", type=float, default=1,
                   help="epochs of the short run that picks PyTorch's memory format per batch size")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--tune-seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--run-to-end", action="store_true")
    p.add_argument("--crossbow-flags", default="", help="extra `crossbow train` flags (its best configuration)")
    p.add_argument("--torch-flags", default="", help="extra tta.py flags (e.g. --image-size 32 --augment crop-flip)")
    p.add_argument("--out", default="tta-compare")
    p.add_argument("--resume", action="store_true")
    a = p.parse_args()
    if a.target > 1:
        a.target /= 100
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "runs.jsonl")
    runs = [json.loads(l) for l in open(path)] if a.resume and os.path.exists(path) else []
    if not a.resume and os.path.exists(path):
        os.remove(path)
    have = {key(r) for r in runs}

    def record(r, phase):
        r["phase"] = phase
        runs.append(r)
        have.add(key(r))
        with open(path, "a") as f:
            f.write(json.dumps(r) + "\n")
        print(f"{phase} {r['side']:8} b={r['batch']} lr={r['lr']} seed={r['seed']} {r.get('memory_format') or ''} "
              f"-> {'%.1f s' % r['seconds_to_target'] if r['reached'] else 'miss'}, final {100 * r['final_accuracy']:.1f}%"
              + (f", {r['images_per_sec']:.0f} img/s in steps" if phase == "format" and r.get("images_per_sec") else ""),
              flush=True)

    grid = [(int(b), float(lr)) for b in a.batch_size.split(",") for lr in a.lr.split(",")]
    formats = a.formats.split(",")
    # PyTorch's memory format per batch size: the faster in steps/s over a short run (the format
    # changes the speed, not what is computed), so the grid is tuned once, in the faster one.
    fmt_of = {}
    for b in sorted({b for b, _ in grid}):
        if len(formats) == 1:
            fmt_of[b] = formats[0]
            continue
        lr = sorted({lr for bb, lr in grid if bb == b})[0]
        for fmt in formats:
            if ("format", "pytorch", b, lr, a.tune_seed, fmt) not in have:
                record(torch_run(a, b, lr, a.tune_seed, fmt, probe_epochs=a.format_probe_epochs), "format")
        probes = [r for r in runs if r["phase"] == "format" and r["batch"] == b and r.get("images_per_sec")]
        fmt_of[b] = max(probes, key=lambda r: r["images_per_sec"])["memory_format"] if probes else formats[0]
    # Tuning, alternating sides.
    for b, lr in grid:
        probe = {"phase": "tune", "batch": b, "lr": lr, "seed": a.tune_seed}
        if key({**probe, "side": "crossbow"}) not in have:
            record(crossbow_run(a, b, lr, a.tune_seed), "tune")
        if key({**probe, "side": "pytorch", "memory_format": fmt_of[b]}) not in have:
            record(torch_run(a, b, lr, a.tune_seed, fmt_of[b]), "tune")
    tune = [r for r in runs if r["phase"] == "tune" and (r["side"] == "crossbow" or r.get("memory_format") == fmt_of[r["batch"]])]
    pick = {s: min((r for r in tune if r["side"] == s), key=rank) for s in ("crossbow", "pytorch")}
    for seed in range(1, a.seeds + 1):
        for side in ("crossbow", "pytorch"):
            c = pick[side]
            k = ("eval", side, c["batch"], c["lr"], seed, c.get("memory_format"))
            if k in have:
                continue
            if side == "crossbow":
                record(crossbow_run(a, c["batch"], c["lr"], seed), "eval")
            else:
                record(torch_run(a, c["batch"], c["lr"], seed, c["memory_format"]), "eval")
    rows = []
    for side in ("crossbow", "pytorch"):
        c = pick[side]
        ev = [r for r in runs if r["phase"] == "eval" and r["side"] == side and r["batch"] == c["batch"]
              and r["lr"] == c["lr"] and r.get("memory_format") == c.get("memory_format")]
        secs = [r["seconds_to_target"] for r in ev]
        hits = [s for s in secs if s is not None]
        rows.append((side, c, ev, median_with_misses(secs), (min(hits), max(hits)) if hits else None,
                     median_with_misses([r["epochs_to_target"] for r in ev]),
                     statistics.median([r["final_accuracy"] for r in ev]) if ev else 0.0,
                     statistics.median([r["peak_rss_mb"] for r in ev]) if ev else 0.0))
    lines = [f"# Time to {100 * a.target:g}%: {a.model} on {a.dataset} {a.data_dir}, {a.threads} threads, "
             f"schedule {a.schedule}, {a.epochs:g} epochs at most", "",
             "| side | pick (tuning seed) | reached | seconds to target: median [range] | epochs to target (median) "
             "| accuracy at the end (median) | peak RSS MB |",
             "|---|---|---|---|---|---|---|"]
    for side, c, ev, med, rng, ep, fin, rss in rows:
        what = f"b {c['batch']}, lr {c['lr']}" + (f", {c['memory_format']}" if c.get("memory_format") else "")
        # crossbow's learners at the end of each run (the tuner's pick; a list per device).
        learners = sorted({json.dumps(r["learners"]) for r in ev if r.get("learners")})
        if learners:
            what += f", learners {' / '.join(learners)}"
        lines.append(f"| {side} | {what} | {sum(r['reached'] for r in ev)}/{len(ev)} | "
                     f"{'%.1f' % med if med else 'miss'} {'[%.1f, %.1f]' % rng if rng else ''} | "
                     f"{'%.2f' % ep if ep else 'miss'} | {100 * fin:.1f}% | {rss:.0f} |")
    probes = [r for r in runs if r["phase"] == "format"]
    if probes:
        lines += ["", "PyTorch's memory format per batch size (images/s in steps, one short run each): " + "; ".join(
            f"b {b}: " + ", ".join(f"{r['memory_format']} {r['images_per_sec']:.0f}" for r in probes
                                  if r["batch"] == b and r.get("images_per_sec")) + f" -> {fmt_of[b]}"
            for b in sorted(fmt_of))]
    if rows[0][3] and rows[1][3]:
        lines += ["", f"PyTorch's median over crossbow's: **{rows[1][3] / rows[0][3]:.2f}x**"]
    lines += ["", "Accuracy at the end: the mean of the evaluations in a run's last "
              f"{a.final_epochs:g} epochs, " + ("at the end of the schedule." if a.run_to_end else
                                                 "where it stopped (at the target, or at the last epoch on a miss).")]
    lines += ["", f"({time.strftime('%Y-%m-%d')}, `{' '.join(sys.argv)}`)"]
    open(os.path.join(a.out, "table.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
