#!/usr/bin/env python3
"""PyTorch on the CPU, trained as its users train it, to a target test accuracy: the peer of
`crossbow train` for time to accuracy (issue 49; the driver is `tta_compare.py`).

The same models as crossbow's (`scripts/pytorch_models.py`: LeNet-5, the CIFAR ResNets of
He et al.), the same data and split, the same augmentation (4-pixel padded crop + flip for
32x32 colour images), normalisation (per-channel mean and std of the training set; ImageNet's
for image folders, as crossbow's defaults), SGD with momentum 0.9 and weight decay 5e-4 on
every parameter (PyTorch's default), the same learning-rate schedules (set per iteration
from the epoch at its start, as crossbow does), a `DataLoader` with worker processes, and
NCHW or channels_last.

Time is wall time from the first training iteration (after the data are loaded and the
model is built, as crossbow's `wall_seconds`), training and evaluation both counted. The
test set is evaluated every `--eval-every` epochs and at the end; the run stops at the first
evaluation at or above `--target` unless `--run-to-end`. Prints one JSON object (also to
`--json`): the curve, epochs and seconds to the target, final accuracy (the mean of the
evaluations in the last `--final-epochs` epochs), images/s and peak resident memory.

With `--checkpoint PATH` the run saves its state (model, optimiser, curve, seconds so far,
random generators) to PATH at the end of every epoch and, when PATH exists, continues from it:
a run cut short loses at most the epoch it was in. The continuation is statistically the same
run, not bit for bit (the DataLoader's workers start afresh from the restored generator).

    tta.py --model resnet20 --dataset cifar10 --data-dir data/cifar10-4k --batch-size 64 \\
        --lr 0.1 --epochs 30 --target 0.55 --eval-every 0.5 --threads 2 --seed 1
"""

import argparse
import glob
import json
import math
import os
import resource
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from pytorch_models import build  # noqa: E402

IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


def lr_at(schedule, base, epoch, epochs):
    """crossbow's schedules (crates/replica/src/schedule.rs): constant, multistep:E1,E2[:G],
    warmup:W[:START]:E1,E2[:G], cosine[:TOTAL[:MIN]]."""
    parts = schedule.split(":")
    steps = lambda ms, g: g ** sum(1 for m in ms if epoch >= m)  # noqa: E731
    ms_of = lambda s: [float(x) for x in s.split(",")]  # noqa: E731
    if parts[0] == "constant":
        return base
    if parts[0] == "multistep":
        g = float(parts[2]) if len(parts) > 2 else 0.1
        return base * steps(ms_of(parts[1]), g)
    if parts[0] == "warmup":
        w = float(parts[1])
        start, ms, g = 0.1, None, 0.1
        if len(parts) == 3:
            ms = ms_of(parts[2])
        elif len(parts) >= 4:
            start, ms = float(parts[2]), ms_of(parts[3])
            g = float(parts[4]) if len(parts) > 4 else 0.1
        f = start + (1 - start) * epoch / w if w > 0 and epoch < w else 1.0
        return base * f * steps(ms, g)
    if parts[0] == "cosine":
        total = float(parts[1]) if len(parts) > 1 else epochs
        mn = float(parts[2]) if len(parts) > 2 else 0.0
        t = min(max(epoch / total, 0.0), 1.0)
        return base * (mn + (1 - mn) * 0.5 * (1 + math.cos(math.pi * t)))
    raise SystemExit(f"--schedule {schedule}: unknown (constant, multistep, warmup, cosine)")


def read_cifar_bin(files):
    raw = b"".join(open(f, "rb").read() for f in files)
    rec = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3073)
    return rec[:, 1:].reshape(-1, 3, 32, 32), rec[:, 0].astype(np.int64)


def read_idx(images, labels):
    def load(p):
        import gzip

        data = (gzip.open if p.endswith(".gz") else open)(p, "rb").read()
        dims = data[3]
        shape = struct.unpack(">" + "I" * dims, data[4 : 4 + 4 * dims])
        return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)

    x = load(images)
    return x.reshape(x.shape[0], 1, x.shape[1], x.shape[2]), load(labels).astype(np.int64)


def find(d, *names):
    for n in names:
        hits = glob.glob(os.path.join(d, n))
        if hits:
            return hits[0]
    raise SystemExit(f"--data-dir {d}: none of {names}")


class Tensors(Dataset):
    """uint8 images in memory, normalised and augmented per sample in the workers."""

    def __init__(self, x, y, mean, std, augment):
        self.x, self.y, self.augment = torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y), augment
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        img = (self.x[i].float() / 255.0 - self.mean) / self.std
        if self.augment:
            img = F.pad(img, (4, 4, 4, 4))
            dy, dx = torch.randint(0, 9, (2,)).tolist()
            img = img[:, dy : dy + 32, dx : dx + 32]
            if torch.rand(()) < 0.5:
                img = img.flip(2)
        return img, self.y[i]


def datasets(args):
    if args.dataset == "folder":
        from torchvision import datasets as tvd, transforms as T

        size = args.image_size
        norm = T.Normalize(*IMAGENET)
        aug = [T.RandomCrop(size, padding=4), T.RandomHorizontalFlip()] if args.augment == "crop-flip" else []
        train = tvd.ImageFolder(
            os.path.join(args.data_dir, "train"), T.Compose([T.Resize((size, size))] + aug + [T.ToTensor(), norm])
        )
        test = tvd.ImageFolder(os.path.join(args.data_dir, "val"), T.Compose([T.Resize((size, size)), T.ToTensor(), norm]))
        return train, test, (3, size, size), len(train.classes)
    if args.dataset == "cifar10":
        xtr, ytr = read_cifar_bin(sorted(glob.glob(os.path.join(args.data_dir, "data_batch_*.bin"))))
        xte, yte = read_cifar_bin([os.path.join(args.data_dir, "test_batch.bin")])
    elif args.dataset in ("fashion-mnist", "mnist"):
        # crossbow's `mnist` reads any idx-format set, Fashion-MNIST among them.
        d = args.data_dir
        xtr, ytr = read_idx(find(d, "train-images-idx3-ubyte*"), find(d, "train-labels-idx1-ubyte*"))
        xte, yte = read_idx(find(d, "t10k-images-idx3-ubyte*"), find(d, "t10k-labels-idx1-ubyte*"))
    else:
        raise SystemExit(f"--dataset {args.dataset}: cifar10, mnist (any idx-format set, e.g. Fashion-MNIST) or folder")
    if args.train_size:
        xtr, ytr = xtr[: args.train_size], ytr[: args.train_size]
    if args.test_size:
        xte, yte = xte[: args.test_size], yte[: args.test_size]
    # crossbow's `--normalize auto`: the training set's per-channel mean and std.
    f = xtr.astype(np.float64) / 255.0
    mean = f.mean(axis=(0, 2, 3)).tolist()
    std = f.std(axis=(0, 2, 3)).tolist()
    colour32 = xtr.shape[1] == 3 and xtr.shape[2] == 32
    augment = args.augment == "crop-flip" or (args.augment == "auto" and colour32)
    classes = int(max(ytr.max(), yte.max())) + 1
    return Tensors(xtr, ytr, mean, std, augment), Tensors(xte, yte, mean, std, False), tuple(xtr.shape[1:]), classes


def evaluate(model, loader, channels_last):
    model.eval()
    correct, loss, n = 0, 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            out = model(x)
            loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
            n += len(y)
    model.train()
    return correct / max(n, 1), loss / max(n, 1)


def config(args):
    """What a checkpoint must agree with to be continued."""
    keep = ("model", "dataset", "data_dir", "image_size", "augment", "train_size", "test_size", "batch_size", "lr",
            "momentum", "weight_decay", "schedule", "epochs", "target", "eval_every", "seed", "memory_format")
    return {k: getattr(args, k) for k in keep}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet20")
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--augment", default="auto", choices=["auto", "none", "crop-flip"])
    p.add_argument("--train-size", type=int)
    p.add_argument("--test-size", type=int)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--schedule", default="constant")
    p.add_argument("--epochs", type=float, default=30)
    p.add_argument("--target", type=float, default=0.55)
    p.add_argument("--eval-every", type=float, default=0.5)
    p.add_argument("--final-epochs", type=float, default=2)
    p.add_argument("--run-to-end", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--memory-format", default="nchw", choices=["nchw", "channels_last"])
    p.add_argument("--eval-batch-size", type=int, default=500)
    p.add_argument("--json")
    p.add_argument("--checkpoint", help="save state here every epoch; continue from it when it exists")
    p.add_argument("--max-seconds", type=float,
                   help="stop at the first evaluation past this many seconds without the target reached "
                        "(a tuning run that can no longer be the fastest; the output says capped)")
    args = p.parse_args()
    if args.target > 1:
        args.target /= 100
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.set_num_threads(args.threads)
    train, test, shape, classes = datasets(args)
    gen = torch.Generator()
    gen.manual_seed(args.seed)
    loader = DataLoader(
        train,
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        generator=gen,
    )
    test_loader = DataLoader(test, batch_size=args.eval_batch_size, num_workers=0)
    model = build(args.model, shape, classes)
    channels_last = args.memory_format == "channels_last"
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    per_epoch = len(loader) * args.batch_size
    model.train()
    curve, seen, next_eval, reached = [], 0, args.eval_every, None
    images_time, before = 0.0, 0.0
    if args.checkpoint and os.path.exists(args.checkpoint):
        st = torch.load(args.checkpoint, weights_only=False)
        if st["config"] != config(args):
            raise SystemExit(f"--checkpoint {args.checkpoint}: saved by a different run ({st['config']})")
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        curve, seen, next_eval, reached = st["curve"], st["seen"], st["next_eval"], st["reached"]
        images_time, before = st["images_time"], st["seconds"]
        torch.set_rng_state(st["rng"])
        np.random.set_state(st["np_rng"])
        gen.set_state(st["gen"])
    t0 = time.perf_counter() - before
    capped = False
    done = bool(curve) and bool(curve[-1].get("diverged") or seen / per_epoch >= args.epochs - 1e-9
                      or (reached is not None and not args.run_to_end))
    while not done:
        for x, y in loader:
            epoch = seen / per_epoch
            for g in opt.param_groups:
                g["lr"] = lr_at(args.schedule, args.lr, epoch, args.epochs)
            ts = time.perf_counter()
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            images_time += time.perf_counter() - ts
            seen += len(y)
            epoch = seen / per_epoch
            last = epoch >= args.epochs - 1e-9
            if not math.isfinite(loss.item()):
                curve.append({"epoch": epoch, "seconds": time.perf_counter() - t0, "test_accuracy": 0.0, "diverged": True})
                done = True
                break
            if epoch >= next_eval - 1e-9 or last:
                acc, tl = evaluate(model, test_loader, channels_last)
                curve.append({"epoch": epoch, "seconds": time.perf_counter() - t0, "test_accuracy": acc, "test_loss": tl})
                while next_eval <= epoch + 1e-9:
                    next_eval += args.eval_every
                if reached is None and acc >= args.target:
                    reached = curve[-1]
                    if not args.run_to_end:
                        done = True
                        break
                if reached is None and args.max_seconds is not None and curve[-1]["seconds"] > args.max_seconds:
                    capped = done = True
                    break
            if last:
                done = True
                break
        if args.checkpoint and not done:
            # End of an epoch: everything the next one needs, written whole or not at all.
            tmp = args.checkpoint + ".tmp"
            torch.save({"config": config(args), "model": model.state_dict(), "opt": opt.state_dict(),
                        "curve": curve, "seen": seen, "next_eval": next_eval, "reached": reached,
                        "images_time": images_time, "seconds": time.perf_counter() - t0,
                        "rng": torch.get_rng_state(), "np_rng": np.random.get_state(), "gen": gen.get_state()}, tmp)
            os.replace(tmp, args.checkpoint)
    end = curve[-1]["epoch"] if curve else 0.0
    tail = [c["test_accuracy"] for c in curve if c["epoch"] >= end - args.final_epochs - 1e-9]
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    out = {
        "side": "pytorch",
        "torch": torch.__version__,
        "model": args.model,
        "dataset": args.dataset,
        "batch": args.batch_size,
        "lr": args.lr,
        "schedule": args.schedule,
        "seed": args.seed,
        "memory_format": args.memory_format,
        "threads": args.threads,
        "workers": args.workers,
        "reached": reached is not None,
        "capped": capped,
        "epochs_to_target": reached["epoch"] if reached else None,
        "seconds_to_target": reached["seconds"] if reached else None,
        "final_accuracy": sum(tail) / len(tail) if tail else 0.0,
        "best_accuracy": max((c["test_accuracy"] for c in curve), default=0.0),
        "epochs": end,
        "seconds": time.perf_counter() - t0,
        "images_per_sec": seen / max(images_time, 1e-9),
        "peak_rss_mb": me,
        "peak_rss_workers_mb": kids,
        "curve": curve,
    }
    s = json.dumps(out)
    if args.json:
        with open(args.json, "w") as f:
            f.write(s + "\n")
    print(s)


if __name__ == "__main__":
    main()
