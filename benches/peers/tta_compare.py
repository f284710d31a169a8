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
OUT/table.md. With `--resume` every run also checkpoints into OUT/ckpt/ (crossbow every 5
minutes and when stopped, `crossbow train --checkpoint-dir`; PyTorch at the end of every epoch,
`tta.py --checkpoint`), and a run cut short (a stopped session) continues from there with its
seconds so far; time since its last checkpoint is lost on both sides and not counted. Its peak
memory is the highest of its parts'.

Long rows (full-size CIFAR-10) tune on a shorter budget than they are measured on:
`--tune-epochs`, `--tune-schedule` and `--tune-target` set the tuning runs' length, schedule
and target (the picks rank by seconds to the tuning target); the seeds then run the full
`--epochs`/`--schedule` to `--target`. crossbow runs its defaults (the tuner picks the learners, the model's default
synchroniser) unless `--crossbow-flags` adds its best configuration's; with
`--crossbow-global-batch` its batch of the grid is the whole iteration's
(`--global-batch-size`: the learners the tuner picks split it), as PyTorch's is. With `--prune-tuning`
the grid runs from the largest batch down and a tuning run is stopped at its first evaluation
past its side's best seconds to the tuning target so far without having reached it: it ranks
below that run whatever it would do next, so the picks are exactly those of the whole grid,
for much less time (recorded as `pruned`; their final accuracies are then not comparable).
"""

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from compare import TORCH_ISA_ENV  # PyTorch's variables per instruction set, as compare.py caps it

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def run_child(cmd, prune=None):
    """Runs cmd; returns (exit code, stdout, peak RSS in MB of the child itself, pruned). With
    `prune` (a function polled every 2 s), the child is killed when it returns true."""
    pruned = False
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT)
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG if prune and not pruned else 0)
            if pid:
                break
            if prune():
                p.kill()
                pruned = True
            else:
                time.sleep(2)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        o, e = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if p.returncode != 0 and not pruned:
        sys.stderr.write(f"{' '.join(cmd)}\nexit {p.returncode}\n{e[-2000:]}\n")
    return p.returncode, o, ru.ru_maxrss / 1024, pruned


def budget(a, phase):
    """The length, schedule and target of a phase's runs: the tuning runs' own when given."""
    tune = phase == "tune"
    return argparse.Namespace(
        epochs=a.tune_epochs if tune and a.tune_epochs else a.epochs,
        schedule=a.tune_schedule if tune and a.tune_schedule else a.schedule,
        target=a.tune_target if tune and a.tune_target else a.target,
        run_to_end=a.run_to_end)


def ckpt_dir(a, phase, side, b, lr, seed, fmt=None):
    """Where a run checkpoints (with --resume), one folder per run; None without --resume."""
    if not a.resume:
        return None
    d = os.path.join(a.out, "ckpt", f"{phase}-{side}-b{b}-lr{lr}-s{seed}" + (f"-{fmt}" if fmt else ""))
    os.makedirs(d, exist_ok=True)
    return d


def evals_past(metrics, target, cap):
    """True when the metrics file's evaluations have passed `cap` seconds without reaching `target`."""
    try:
        evals = [r for r in map(json.loads, open(metrics)) if r.get("event") == "eval"]
    except (OSError, ValueError):  # not written yet, or a line being written
        return False
    return bool(evals) and all(e["test_accuracy"] < target for e in evals) and evals[-1]["wall_seconds"] > cap


def crossbow_run(a, u, b, lr, seed, ck, cap=None):
    with tempfile.TemporaryDirectory() as tmp:
        d = ck or tmp
        metrics, cdir = os.path.join(d, "m.jsonl"), os.path.join(d, "crossbow")
        resumed = ck is not None and os.path.isdir(cdir) and any(f.endswith(".safetensors") for f in os.listdir(cdir))
        if resumed:
            # A run cut short: continue from its newest checkpoint, appending to its own metrics.
            cmd = [a.crossbow, "train", "--resume", cdir, "--metrics", metrics, "-q"]
        else:
            if os.path.exists(metrics):
                os.remove(metrics)
            cmd = [a.crossbow, "train", "--model", a.model, "--dataset", a.dataset, "--data-dir", a.data_dir,
                   "--global-batch-size" if a.crossbow_global_batch else "--batch-size", str(b), "--lr", str(lr),
                   "--schedule", u.schedule, "--epochs", str(u.epochs),
                   "--eval-every", str(a.eval_every), "--seed", str(seed), "--devices", "cpu", "--threads",
                   str(a.threads), "--metrics", metrics, "-q"]
            if not u.run_to_end:
                cmd += ["--target-accuracy", str(u.target)]
            if ck:
                cmd += ["--checkpoint-dir", cdir, "--checkpoint-every", "5m", "--keep-checkpoints", "1"]
            cmd += a.crossbow_flags.split()
        rc, _, rss, pruned = run_child(cmd, prune=cap and (lambda: evals_past(metrics, u.target, cap)))
        recs = [json.loads(l) for l in open(metrics)] if os.path.exists(metrics) else []
    evals = [r for r in recs if r.get("event") == "eval"]
    curve = [{"epoch": e["epoch"], "seconds": e["wall_seconds"], "test_accuracy": e["test_accuracy"]} for e in evals]
    learners = evals[-1].get("learners") if evals else None
    # Where the run's wall time went (steps, input wait, recalibration, evaluation, checkpoints).
    phases = next((r.get("phases") for r in recs if r.get("event") == "end"), None)
    # What the tuner's probing cost (absent when the run kept one learner layout throughout).
    end = next((r for r in recs if r.get("event") == "end"), {})
    probing = ({"extra_seconds": end["probing"]["extra_seconds"], "wall_seconds": end.get("wall_seconds")}
               if end.get("probing") else None)
    # A run that stopped on divergence (its loss exploded; `--on-divergence stop`) is over: a
    # result, not reached, as PyTorch's diverged runs are (they train on at chance).
    diverged = any(r.get("event") == "diverged" for r in recs)
    complete = any(r.get("event") == "end" for r in recs) or diverged
    return finish({"side": "crossbow", "batch": b, "lr": lr, "seed": seed, "rc": rc, "peak_rss_mb": rss,
                   "learners": learners, "phases": phases, "probing": probing, "curve": curve, "resumed": resumed,
                   "complete": complete or pruned, "pruned": pruned, "diverged": diverged}, a, u)


def torch_run(a, u, b, lr, seed, fmt, ck, probe_epochs=None, cap=None):
    epochs = probe_epochs or u.epochs
    cmd = [a.python, os.path.join(HERE, "tta.py"), "--model", a.model, "--dataset", a.dataset, "--data-dir",
           a.data_dir, "--batch-size", str(b), "--lr", str(lr), "--schedule", u.schedule, "--epochs", str(epochs),
           "--eval-every", str(a.eval_every), "--seed", str(seed), "--threads", str(a.threads), "--target",
           str(u.target), "--memory-format", fmt, "--workers", str(a.workers)] + a.torch_flags.split()
    if u.run_to_end or probe_epochs:
        cmd.append("--run-to-end")
    if cap:
        cmd += ["--max-seconds", str(cap)]
    resumed = False
    if ck:
        path = os.path.join(ck, "torch.pt")
        resumed = os.path.exists(path)
        cmd += ["--checkpoint", path]
    rc, out, rss, _ = run_child(cmd)
    try:
        r = json.loads(out.strip().splitlines()[-1])
        complete = rc == 0
    except (IndexError, ValueError):
        r, complete = {"curve": []}, False
    return finish({"side": "pytorch", "batch": b, "lr": lr, "seed": seed, "rc": rc, "memory_format": fmt,
                   "peak_rss_mb": rss, "peak_rss_workers_mb": r.get("peak_rss_workers_mb"),
                   "images_per_sec": r.get("images_per_sec"), "curve": r.get("curve", []), "resumed": resumed,
                   "complete": complete, "pruned": bool(r.get("capped"))}, a, u)


def finish(r, a, u):
    """Epochs and seconds to the target, and final accuracy, read from the curve alike for both."""
    c = r["curve"]
    hit = next((p for p in c if p["test_accuracy"] >= u.target), None)
    end = c[-1]["epoch"] if c else 0.0
    tail = [p["test_accuracy"] for p in c if p["epoch"] >= end - a.final_epochs - 1e-9]
    r.update(reached=hit is not None, epochs_to_target=hit and hit["epoch"], seconds_to_target=hit and hit["seconds"],
             final_accuracy=sum(tail) / len(tail) if tail else 0.0, model=a.model, dataset=a.dataset,
             data_dir=a.data_dir, target=u.target, schedule=u.schedule, epochs=u.epochs, threads=a.threads,
             isa=a.isa)
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
    p.add_argument("--tune-epochs", type=float, help="the tuning runs' length (default: --epochs)")
    p.add_argument("--tune-schedule", help="the tuning runs' schedule (default: --schedule)")
    p.add_argument("--tune-target", type=float, help="the tuning runs' target (default: --target)")
    p.add_argument("--crossbow-flags", default="", help="extra `crossbow train` flags (its best configuration)")
    p.add_argument("--crossbow-global-batch", action="store_true",
                   help="crossbow trains with --global-batch-size B (the grid's batch is every learner's together, "
                        "split among the learners the tuner picks) instead of --batch-size B per learner")
    p.add_argument("--torch-flags", default="", help="extra tta.py flags (e.g. --image-size 32 --augment crop-flip)")
    p.add_argument("--out", default="tta-compare")
    p.add_argument("--isa", choices=["avx2"],
                   help="cap both sides at this instruction set (crossbow: CROSSBOW_CPU_ISA; PyTorch: "
                        "ATEN_CPU_CAPABILITY and ONEDNN_MAX_CPU_ISA), so an AVX-512 machine measures what an "
                        "AVX2-only one (e.g. AMD Zen 2) would run")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--prune-tuning", action="store_true",
                   help="stop a tuning run once it is past its side's best time to the tuning target so far "
                        "without reaching it (it can no longer be picked; the picks are unchanged)")
    a = p.parse_args()
    if a.target > 1:
        a.target /= 100
    if a.tune_target and a.tune_target > 1:
        a.tune_target /= 100
    if a.isa:
        os.environ.update({"CROSSBOW_CPU_ISA": a.isa, **TORCH_ISA_ENV[a.isa]})
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "runs.jsonl")
    runs = [json.loads(l) for l in open(path)] if a.resume and os.path.exists(path) else []
    if not a.resume and os.path.exists(path):
        os.remove(path)
    have = {key(r) for r in runs}

    def record(r, phase, ck=None):
        # A run in several parts (cut short, then resumed): its peak memory is the highest of
        # its processes', kept beside its checkpoint between the parts.
        peak = os.path.join(ck, "peak-rss.json") if ck else None
        if peak and os.path.exists(peak):
            before = json.load(open(peak))
            for k in ("peak_rss_mb", "peak_rss_workers_mb"):
                if before.get(k) is not None:
                    r[k] = max(before[k], r.get(k) or 0.0)
        if ck and not r["complete"] and any(e.name != "peak-rss.json" for e in os.scandir(ck)):
            # Stopped part-way (a session's end): keep its checkpoint for the next --resume.
            with open(peak, "w") as f:
                json.dump({k: r.get(k) for k in ("peak_rss_mb", "peak_rss_workers_mb")}, f)
            raise SystemExit(f"{phase} {r['side']} b={r['batch']} lr={r['lr']} seed={r['seed']}: cut short with "
                             f"a checkpoint in {ck}; rerun with --resume to continue it")
        r["phase"] = phase
        runs.append(r)
        have.add(key(r))
        with open(path, "a") as f:
            f.write(json.dumps(r) + "\n")
        if ck:
            shutil.rmtree(ck, ignore_errors=True)
        print(f"{phase} {r['side']:8} b={r['batch']} lr={r['lr']} seed={r['seed']} {r.get('memory_format') or ''} "
              f"-> {'%.1f s' % r['seconds_to_target'] if r['reached'] else 'pruned' if r.get('pruned') else 'miss'}, "
              f"final {100 * r['final_accuracy']:.1f}%"
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
                record(torch_run(a, budget(a, "format"), b, lr, a.tune_seed, fmt, None,
                                 probe_epochs=a.format_probe_epochs), "format")
        probes = [r for r in runs if r["phase"] == "format" and r["batch"] == b and r.get("images_per_sec")]
        fmt_of[b] = max(probes, key=lambda r: r["images_per_sec"])["memory_format"] if probes else formats[0]
    def tuned(side):
        return [r for r in runs if r["phase"] == "tune" and r["side"] == side
                and (side == "crossbow" or r.get("memory_format") == fmt_of[r["batch"]])]

    def cap(side):
        """With --prune-tuning: the side's best seconds to the tuning target so far. A tuning run
        still short of the target past it ranks below that run whatever it does next, so it is
        stopped there (recorded as pruned): the picks are the same as without pruning."""
        if not a.prune_tuning:
            return None
        return min((r["seconds_to_target"] for r in tuned(side) if r["reached"]), default=None)

    # Tuning, alternating sides; with pruning the larger batches first (the faster per image on
    # a CPU), so that the caps are set early.
    for b, lr in sorted(grid, key=lambda g: -g[0]) if a.prune_tuning else grid:
        probe = {"phase": "tune", "batch": b, "lr": lr, "seed": a.tune_seed}
        if key({**probe, "side": "crossbow"}) not in have:
            ck = ckpt_dir(a, "tune", "crossbow", b, lr, a.tune_seed)
            record(crossbow_run(a, budget(a, "tune"), b, lr, a.tune_seed, ck, cap=cap("crossbow")), "tune", ck)
        if key({**probe, "side": "pytorch", "memory_format": fmt_of[b]}) not in have:
            ck = ckpt_dir(a, "tune", "pytorch", b, lr, a.tune_seed, fmt_of[b])
            record(torch_run(a, budget(a, "tune"), b, lr, a.tune_seed, fmt_of[b], ck, cap=cap("pytorch")), "tune", ck)
    tune = tuned("crossbow") + tuned("pytorch")
    pick = {s: min((r for r in tune if r["side"] == s), key=rank) for s in ("crossbow", "pytorch")}
    for seed in range(1, a.seeds + 1):
        for side in ("crossbow", "pytorch"):
            c = pick[side]
            k = ("eval", side, c["batch"], c["lr"], seed, c.get("memory_format"))
            if k in have:
                continue
            ck = ckpt_dir(a, "eval", side, c["batch"], c["lr"], seed, c.get("memory_format"))
            if side == "crossbow":
                record(crossbow_run(a, budget(a, "eval"), c["batch"], c["lr"], seed, ck), "eval", ck)
            else:
                record(torch_run(a, budget(a, "eval"), c["batch"], c["lr"], seed, c["memory_format"], ck), "eval", ck)
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
             f"schedule {a.schedule}, {a.epochs:g} epochs at most"
             + (f", both sides capped at {a.isa}" if a.isa else ""), ""]
    if a.tune_epochs or a.tune_schedule or a.tune_target:
        u = budget(a, "tune")
        lines += [f"Picks tuned on a shorter budget: {u.epochs:g} epochs, schedule {u.schedule}, ranked by seconds "
                  f"to {100 * u.target:g}%.", ""]
    pruned = [r for r in tune if r.get("pruned")]
    if pruned:
        lines += [f"{len(pruned)} of {len(tune)} tuning runs stopped once past their side's best time to the tuning "
                  "target (--prune-tuning): " + ", ".join(f"{r['side']} b {r['batch']} lr {r['lr']}" for r in pruned)
                  + ".", ""]
    lines += [
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
    # Where crossbow's time went (the seeds' median share of each run's wall time): which
    # part would eat the lead.
    cb = [r for r in rows[0][2] if r.get("phases")]
    if cb:
        def share(r, k):
            total = sum(r["phases"].values())
            return r["phases"][k] / total if total > 0 else 0.0
        parts = [f"{k.replace('_', ' ')} {100 * statistics.median(share(r, k) for r in cb):.1f}%"
                 for k in ("steps", "input_wait", "recalibration", "evaluation", "checkpoints", "other")]
        # Runs that kept one layout throughout probed nothing (0); runs of fixed learners too.
        probed = [r["probing"]["extra_seconds"] / r["probing"]["wall_seconds"] if r.get("probing") else 0.0
                  for r in cb]
        if any(r.get("probing") for r in cb):
            parts.append(f"tuner probing (extra step time at the learner counts it left) "
                         f"{100 * statistics.median(probed):+.1f}%")
        lines += ["", "crossbow's wall time, median share over the seeds: " + ", ".join(parts)]
    if rows[0][3] and rows[1][3]:
        lines += ["", f"PyTorch's median over crossbow's: **{rows[1][3] / rows[0][3]:.2f}x**"]
    lines += ["", "Accuracy at the end: the mean of the evaluations in a run's last "
              f"{a.final_epochs:g} epochs, " + ("at the end of the schedule." if a.run_to_end else
                                                 "where it stopped (at the target, or at the last epoch on a miss).")]
    lines += ["", f"({time.strftime('%Y-%m-%d')}, `{shlex.join(sys.argv)}`)"]
    open(os.path.join(a.out, "table.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
