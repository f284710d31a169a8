#!/usr/bin/env python3
"""Training throughput of PyTorch (CPU) on the models crossbow's `bench` measures.

The same layer shapes as crossbow (the modules of scripts/pytorch_models.py, whose
state_dict names and shapes are checked against crossbow's in CI), SGD with momentum 0.9 and
weight decay 5e-4 at lr 0.01 (crossbow bench's settings), random data generated once, one
forward + backward + step per iteration, eager mode, NCHW or (`--channels-last`) the
channels_last memory format for the model and the input. After `--warmup` iterations it
times `--windows` windows of `--iterations` iterations each and reports the median window
(`images_per_sec`, the figure crossbow's tuner also reports) and the best one. Prints one JSON
object: {"model", "batch", "threads", "iterations", "windows", "memory_format", "seconds",
"images_per_sec", "best_images_per_sec", "window_images_per_sec", "torch"}.

    python benches/peers/pytorch_bench.py --model resnet20 --batch-size 32 --threads 2 --channels-last
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from pytorch_models import build  # noqa: E402

INPUTS = {"lenet5": (1, 28, 28)}  # every other model: 3x32x32, as crossbow's default inputs


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--windows", type=int, default=3, help="timed windows of --iterations each")
    p.add_argument("--channels-last", action="store_true", help="model and input in torch.channels_last")
    a = p.parse_args()
    if a.batch_size < 1 or a.threads < 1 or a.iterations < 1 or a.warmup < 0 or a.windows < 1:
        p.error("--batch-size, --threads, --iterations and --windows must be at least 1, --warmup at least 0")
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(1)
    shape = INPUTS.get(a.model, (3, 32, 32))
    model = build(a.model, shape, 10)
    model.train()
    x = torch.randn(a.batch_size, *shape)
    y = torch.randint(0, 10, (a.batch_size,))
    fmt = "channels_last" if a.channels_last else "contiguous"
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    windows, seconds = [], 0.0
    for _ in range(a.windows):
        t0 = time.perf_counter()
        for _ in range(a.iterations):
            step()
        secs = time.perf_counter() - t0
        seconds += secs
        windows.append(a.iterations * a.batch_size / secs)
    print(json.dumps({
        "model": a.model, "batch": a.batch_size, "threads": a.threads, "iterations": a.iterations,
        "windows": a.windows, "memory_format": fmt,
        "seconds": seconds,
        "images_per_sec": statistics.median(windows), "best_images_per_sec": max(windows),
        "window_images_per_sec": windows, "torch": torch.__version__,
    }))

if __name__ == "__main__":
    main()
