#!/usr/bin/env python3
"""Training throughput of PyTorch on a GPU, eager and torch.compile, on crossbow's models.

The same model definitions as benches/peers/pytorch_bench.py (scripts/pytorch_models.py,
whose state_dict names and shapes are checked against crossbow's in CI), SGD with momentum
0.9 and weight decay 5e-4 at lr 0.01 (crossbow bench's settings), random data generated
once on the device, one forward + backward + step per iteration, the device synchronised
before each clock read. TF32 is off (crossbow computes in full f32). Prints one JSON
object per mode: {"model", "batch", "device", "mode", "iterations", "seconds",
"images_per_sec", "torch"}.

    python benches/peers/pytorch_gpu_bench.py --model resnet32 --batch-size 32
    python benches/peers/pytorch_gpu_bench.py --model resnet32 --batch-size 4 --device cpu \
        --iterations 2 --warmup 1 --modes eager       # a dry run without a GPU
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from pytorch_models import build  # noqa: E402

INPUTS = {"lenet5": (1, 28, 28)}  # every other model: 3x32x32, as crossbow's default inputs
MODES = ("eager", "compile")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(a, device, mode):
    torch.manual_seed(1)
    shape = INPUTS.get(a.model, (3, 32, 32))
    model = build(a.model, shape, 10).to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(a.batch_size, *shape, device=device)
    y = torch.randint(0, 10, (a.batch_size,), device=device)
    fwd = torch.compile(model) if mode == "compile" else model

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(a.iterations):
        step()
    sync(device)
    secs = time.perf_counter() - t0
    return {
        "model": a.model,
        "batch": a.batch_size,
        "device": str(device),
        "mode": mode,
        "iterations": a.iterations,
        "seconds": secs,
        "images_per_sec": a.batch_size * a.iterations / secs,
        "torch": torch.__version__,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (a dry run) [default: cuda]")
    p.add_argument("--modes", default="eager,compile", help="comma-separated: eager, compile [default: both]")
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    a = p.parse_args()
    if a.batch_size < 1 or a.iterations < 1 or a.warmup < 0:
        p.error("--batch-size and --iterations must be at least 1, --warmup at least 0")
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        p.error(f"--modes: {','.join(bad) or 'empty'} is not one of {', '.join(MODES)}")
    device = torch.device(a.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            p.error(f"--device {a.device}: PyTorch sees no CUDA GPU")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    for mode in modes:
        print(json.dumps(measure(a, device, mode)), flush=True)


if __name__ == "__main__":
    main()
