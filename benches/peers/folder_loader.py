"""PyTorch's input pipeline on an image folder, measured as crossbow's `folder_loader` bench
measures its own (issue 25): torchvision's ImageFolder with the standard ImageNet training
transforms (RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize), a DataLoader
of batch 64 with 1, 2 and all worker processes, one epoch each (images/s); and PIL's decoding
alone (open + convert to RGB), one thread, the first 400 files.

    ~/torchenv/bin/python benches/peers/folder_loader.py /tmp/imgfolder

Every epoch decodes every file again: that is how PyTorch's loader works, so its "epoch" is
crossbow's "first epoch" (decode + resize + augment).
"""
import os
import sys
import time

import torch
from PIL import Image
from torchvision import datasets, transforms


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "/tmp/imgfolder"
    train = os.path.join(root, "train")
    paths = []
    for cls in sorted(os.listdir(train)):
        for f in sorted(os.listdir(os.path.join(train, cls))):
            paths.append(os.path.join(train, cls, f))
    blobs = []
    for p in paths[:400]:
        with open(p, "rb") as fh:
            blobs.append(fh.read())
    import io
    t = time.perf_counter()
    px = 0
    for b in blobs:
        im = Image.open(io.BytesIO(b)).convert("RGB")
        px += im.width * im.height
    s = time.perf_counter() - t
    print(f"decode         1 thread : {len(blobs) / s:7.1f} images/s ({px / s / 1e6:.1f} Mpixel/s, {len(blobs)} files, from memory) [PIL {Image.__version__}]")
    tf = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    ds = datasets.ImageFolder(train, transform=tf)
    cores = os.cpu_count() or 1
    for workers in sorted({1, 2, cores}):
        torch.manual_seed(0)
        dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers, drop_last=True)
        t = time.perf_counter()
        n = 0
        for x, y in dl:
            n += x.shape[0]
        s = time.perf_counter() - t
        print(f"workers {workers:2}: epoch (decode + RandomResizedCrop(224) + flip + ToTensor + Normalize, b64) {n / s:7.1f} images/s  [torch {torch.__version__}]")


if __name__ == "__main__":
    main()
