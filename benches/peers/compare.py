#!/usr/bin/env python3
"""crossbow against PyTorch on the same CPU cores: the same models, batch sizes and thread
count, run alternately for several rounds, with the machine's peak measured in the same run.

Both sides are measured the same way: warm-up, then several timed windows, reporting the
median window (crossbow: its `bench` with the auto-tuner choosing the learners, as `crossbow
train` does by default; PyTorch: `pytorch_bench.py`, eager mode, run both in NCHW and in
channels_last, the better of the two being PyTorch's figure for the round). For each model and
batch size it prints the median over rounds of each side, the range over rounds, their ratio,
each as a fraction of the peak FLOP/s of all cores (training = 3 x the forward FLOPs
`crossbow models` reports), the GFLOP per image, and each side's peak resident memory
(the child process's own, from wait4; crossbow's in a short run at the learners its tuner
picked; PyTorch's next to what importing torch alone takes).

    cargo build --release -p crossbow-cli -p crossbow-benches
    python3 -m venv ~/torchenv && ~/torchenv/bin/pip install torch   # outside the repository
    python3 benches/peers/compare.py --python ~/torchenv/bin/python --rounds 3
    python3 benches/peers/compare.py --python ~/torchenv/bin/python --rounds 3 --crossbow-isa avx2   # AVX2 path on an AVX-512 host
    python3 benches/peers/compare.py --python ~/torchenv/bin/python --rounds 3 --crossbow-isa avx2 --torch-isa avx2   # both sides AVX2

CI does not run this (it needs PyTorch and a quiet machine).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def run_rss(cmd, env=None):
    """(stdout, peak resident memory of the process in bytes): the child's own rusage, from
    wait4, so that each run's figure is its own (RUSAGE_CHILDREN would be the largest so far)."""
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read().decode(errors="replace"), fe.read().decode(errors="replace")
    if p.returncode != 0:
        sys.exit(f"compare: {' '.join(cmd)} failed ({p.returncode}):\n{out}{err}")
    return out, usage.ru_maxrss * 1024  # Linux reports kilobytes


def run(cmd, env=None):
    return run_rss(cmd, env)[0]


def peak(binary):
    """(unit, all-core peak FLOP/s) from peak-flops."""
    out = run([binary])
    m = re.findall(r"peak (\S+) FMA f32, (\d+) cores?\s*:\s*([\d.]+) GFLOP/s", out)
    if not m:
        sys.exit(f"compare: cannot read {binary}'s output:\n{out}")
    unit, _, g = max(m, key=lambda t: int(t[1]))
    return unit, float(g) * 1e9


def forward_flops(crossbow, models):
    out = run([crossbow, "models", "--model", ",".join(models), "--batch-size", "1"])
    flops = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 3 and cells[0] in models:
            flops[cells[0]] = float(cells[3]) * 1e6
    return flops


def crossbow_ips(crossbow, model, batch, threads, iterations):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.json")
        _, rss = run_rss([crossbow, "bench", "--model", model, "--batch-size", str(batch), "--learners", "1",
                          "--devices", "cpu", "--threads", str(threads), "--iterations", str(iterations),
                          "--tuner", "--json", path])
        with open(path) as f:
            body = json.load(f)
    tuned = body.get("tuner") or []
    if tuned:
        return tuned[0]["images_per_sec"], tuned[0]["picked"], rss
    return body["rows"][0]["images_per_sec"], 1, rss


# PyTorch's own switches that cap its vector code: ATen's kernels and oneDNN's (convolutions).
TORCH_ISA_ENV = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
}


def torch_env(isa):
    """The environment PyTorch runs in: this one, capped at `isa` where given."""
    env = dict(os.environ)
    env.pop("CROSSBOW_CPU_ISA", None)
    env.update(TORCH_ISA_ENV.get(isa or "", {}))
    return env


def torch_ips(python, model, batch, threads, iterations, channels_last, isa=None):
    cmd = [python, os.path.join(HERE, "pytorch_bench.py"), "--model", model, "--batch-size", str(batch),
           "--threads", str(threads), "--iterations", str(iterations), "--windows", "3"]
    out, rss = run_rss(cmd + (["--channels-last"] if channels_last else []), env=torch_env(isa))
    return json.loads(out.strip().splitlines()[-1])["images_per_sec"], rss


def torch_import_rss(python, isa=None):
    """Peak resident memory of the interpreter with torch imported and nothing run: the part
    of PyTorch's figures that is its libraries, not the model's training."""
    return run_rss([python, "-c", "import torch; torch.zeros(1)"], env=torch_env(isa))[1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", required=True, help="the Python of a virtual environment with torch")
    p.add_argument("--crossbow", default=os.path.join(ROOT, "target", "release", "crossbow"))
    p.add_argument("--peak-flops", default=os.path.join(ROOT, "target", "release", "peak-flops"))
    p.add_argument("--models", default="lenet5,resnet20,resnet32")
    p.add_argument("--batch-sizes", default="16,32,128")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--json", help="also write every measurement here")
    p.add_argument("--crossbow-isa", choices=["avx512", "avx2", "portable"],
                   help="cap crossbow's kernels (and peak-flops) at this instruction set (CROSSBOW_CPU_ISA), "
                        "so an AVX-512 machine measures the AVX2 path too; PyTorch is not capped unless --torch-isa")
    p.add_argument("--torch-isa", choices=["avx512", "avx2"],
                   help="cap PyTorch at this instruction set (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA), so that "
                        "with --crossbow-isa avx2 both sides run AVX2 code, as on an AVX2-only machine")
    a = p.parse_args()
    if a.crossbow_isa:
        os.environ["CROSSBOW_CPU_ISA"] = a.crossbow_isa
    models = [m.strip() for m in a.models.split(",") if m.strip()]
    batches = [int(b) for b in a.batch_sizes.split(",")]
    for f in (a.crossbow, a.peak_flops, a.python):
        if not os.path.exists(f):
            sys.exit(f"compare: {f} does not exist (build with cargo build --release -p crossbow-cli -p crossbow-benches)")
    fwd = forward_flops(a.crossbow, models)
    peaks = []
    cb = {(m, b): [] for m in models for b in batches}
    pt = {(m, b): [] for m in models for b in batches}
    variants = {(m, b): {"nchw": [], "channels_last": []} for m in models for b in batches}
    picked = {}
    # Peak resident memory of each run (crossbow: its bench with the tuner trying 1 and more
    # learners; PyTorch: the smaller of its two variants' runs).
    cb_rss = {(m, b): [] for m in models for b in batches}
    pt_rss = {(m, b): [] for m in models for b in batches}
    for r in range(a.rounds):
        peaks.append(peak(a.peak_flops))
        for m in models:
            for b in batches:
                # Alternate which goes first, so that drift in the machine's state hits both.
                order = ("crossbow", "torch") if r % 2 == 0 else ("torch", "crossbow")
                for who in order:
                    if who == "crossbow":
                        ips, k, rss = crossbow_ips(a.crossbow, m, b, a.threads, a.iterations)
                        cb[(m, b)].append(ips)
                        cb_rss[(m, b)].append(rss)
                        picked.setdefault((m, b), []).append(k)
                    else:
                        v = variants[(m, b)]
                        nchw, rss_n = torch_ips(a.python, m, b, a.threads, a.iterations, False, a.torch_isa)
                        cl, rss_c = torch_ips(a.python, m, b, a.threads, a.iterations, True, a.torch_isa)
                        v["nchw"].append(nchw)
                        v["channels_last"].append(cl)
                        pt[(m, b)].append(max(nchw, cl))
                        pt_rss[(m, b)].append(min(rss_n, rss_c))
                v = variants[(m, b)]
                print(f"round {r + 1}/{a.rounds} {m} b{b}: crossbow {cb[(m, b)][-1]:.0f}, pytorch "
                      f"{pt[(m, b)][-1]:.0f} img/s (nchw {v['nchw'][-1]:.0f}, channels_last "
                      f"{v['channels_last'][-1]:.0f})", file=sys.stderr)
    base_rss = torch_import_rss(a.python, a.torch_isa)
    # crossbow's memory at the learners its tuner picked (the tuner's own run also tries more
    # learners, each with its batch, and holds their input batches: its peak is that of the
    # largest configuration tried, kept in the JSON as crossbow_tuner_rss).
    cb_pick_rss = {}
    for m in models:
        for b in batches:
            k = statistics.mode(picked[(m, b)])
            _, cb_pick_rss[(m, b)] = run_rss([a.crossbow, "bench", "--model", m, "--batch-size", str(b), "--learners",
                                              str(k), "--devices", "cpu", "--threads", str(a.threads),
                                              "--iterations", "3", "--warmup", "1"])
    unit = peaks[0][0]
    pk = statistics.median(g for _, g in peaks)
    print(f"peak ({unit} FMA, {a.threads} threads, median of {len(peaks)}): {pk / 1e9:.1f} GFLOP/s")
    print(f"{a.rounds} rounds, {a.iterations} iterations each, {a.threads} threads; medians"
          + (f"; crossbow capped at {a.crossbow_isa}" if a.crossbow_isa else "")
          + (f"; PyTorch capped at {a.torch_isa}" if a.torch_isa else "; PyTorch not capped"))
    print("PyTorch: per round the better of NCHW and channels_last (how often each won in brackets)")
    print(f"peak resident memory, MB: crossbow's bench at the learners its tuner picked most often; PyTorch "
          f"the largest over rounds of the smaller of its two variants, of which {base_rss / 1e6:.0f} MB is the "
          f"interpreter with torch imported and nothing run")
    print("| model | batch | crossbow img/s [range] (learners) | PyTorch img/s [range] (nchw/cl wins) | ratio "
          "[per-round range] | crossbow % of peak | PyTorch % of peak | GFLOP/image | memory MB crossbow / PyTorch |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for m in models:
        for b in batches:
            c, t = statistics.median(cb[(m, b)]), statistics.median(pt[(m, b)])
            f = 3 * fwd.get(m, float("nan"))
            ks = sorted(set(picked[(m, b)]))
            v = variants[(m, b)]
            cl_wins = sum(1 for n, cl in zip(v["nchw"], v["channels_last"]) if cl > n)
            ratios = [x / y for x, y in zip(cb[(m, b)], pt[(m, b)])]
            print(f"| {m} | {b} | {c:.0f} [{min(cb[(m, b)]):.0f}–{max(cb[(m, b)]):.0f}] ({'/'.join(map(str, ks))}) | "
                  f"{t:.0f} [{min(pt[(m, b)]):.0f}–{max(pt[(m, b)]):.0f}] ({len(ratios) - cl_wins}/{cl_wins}) | "
                  f"{c / t:.2f}x [{min(ratios):.2f}–{max(ratios):.2f}] | "
                  f"{100 * c * f / pk:.1f}% | {100 * t * f / pk:.1f}% | {f / 1e9:.3f} | "
                  f"{cb_pick_rss[(m, b)] / 1e6:.0f} / {max(pt_rss[(m, b)]) / 1e6:.0f} |")
            rows.append({"model": m, "batch": b, "crossbow": cb[(m, b)], "pytorch": pt[(m, b)],
                         "crossbow_rss": cb_pick_rss[(m, b)], "crossbow_tuner_rss": cb_rss[(m, b)],
                         "pytorch_rss": pt_rss[(m, b)],
                         "pytorch_nchw": v["nchw"], "pytorch_channels_last": v["channels_last"],
                         "learners": picked[(m, b)], "train_flop_per_image": f})
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"peak_flops": [g for _, g in peaks], "unit": unit, "threads": a.threads,
                       "crossbow_isa": a.crossbow_isa, "torch_isa": a.torch_isa,
                       "torch_import_rss": base_rss, "rows": rows}, fh,
                      indent=1)


if __name__ == "__main__":
    main()
