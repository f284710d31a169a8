#!/usr/bin/env python3
"""Training throughput of PyTorch (CPU) on the models crossbow's `bench` measures.

The same layer shapes as crossbow (the modules of scripts/pytorch_models.py, whose
state_dict names and shapes are checked against crossbow's in CI), SGD with momentum 0.9 and
weight decay 5e-4 at lr 0.01 (crossbow bench's settings), random data generated once, one
forward + backward + step per iteration. Prints one JSON object:
{"model", "batch", "threads", "iterations", "seconds", "images_per_sec", "torch"}.

    python benches/peers/pytorch_bench.py --model resnet20 --batch-size 32 --threads 2
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


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args()
    if a.batch_size < 1 or a.threads < 1 or a.iterations < 1 or a.warmup < 0:
        p.error("--batch-size, --threads and --iterations must be at least 1, --warmup at least 0")
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(1)
    shape = INPUTS.get(a.model, (3, 32, 32))
    model = build(a.model, shape, 10)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(a.batch_size, *shape)
    y = torch.randint(0, 10, (a.batch_size,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.iterations):
        step()
    secs = time.perf_counter() - t0
    print(json.dumps({
        "model": a.model, "batch": a.batch_size, "threads": a.threads, "iterations": a.iterations,
        "seconds": secs, "images_per_sec": a.iterations * a.batch_size / secs, "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
