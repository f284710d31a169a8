#!/usr/bin/env python3
"""crossbow's model zoo written as PyTorch modules, for loading `crossbow export` files.

Each module computes what crossbow's graph of the same name computes (crates/replica/src/
models.rs), with `state_dict()` keys and shapes equal to the names `crossbow export` writes
(crates/replica/src/export.rs, docs/export.md):

    import torch, safetensors.torch
    from pytorch_models import build
    model = build("resnet20", (3, 32, 32), 10)
    model.load_state_dict(safetensors.torch.load_file("model.safetensors"), strict=True)
    model.eval()

Commands (need torch, safetensors, numpy):

    pytorch_models.py golden DIR
        writes DIR/pytorch_<model>_keys.json, the (name, shape, dtype) list of each zoo
        model's state_dict: the golden lists crates/replica/tests/export_pytorch.rs checks.
    pytorch_models.py keys MODEL C,H,W CLASSES
        prints that list for one model.
    pytorch_models.py check DIR
        for each DIR/<name>.io.safetensors (an input batch and crossbow's eval-mode logits,
        written by `cargo test -p crossbow-replica --test export_pytorch -- --ignored`), loads
        DIR/<name>.safetensors with strict=True into the model its metadata names, runs the
        input through it in eval mode and prints the largest difference from crossbow's logits.
"""

import argparse
import json
import os
import sys

import torch
from torch import nn
import torch.nn.functional as F


class LeNet5(nn.Module):
    """conv 6@5x5 (pad 2 on inputs under 32 pixels high) -> pool -> conv 16@5x5 -> pool ->
    FC 120 -> FC 84 -> FC classes, ReLU after every layer but the last, 2x2 max pooling."""

    def __init__(self, input_shape, classes):
        super().__init__()
        c, h, w = input_shape
        pad = 2 if h < 32 else 0
        self.conv1 = nn.Conv2d(c, 6, 5, padding=pad)
        self.conv2 = nn.Conv2d(6, 16, 5)
        h, w = (h + 2 * pad - 4) // 2, (w + 2 * pad - 4) // 2
        h, w = (h - 4) // 2, (w - 4) // 2
        self.fc1 = nn.Linear(16 * h * w, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def _downsample(cin, out, stride):
    """crossbow's projection shortcut: 1x1 conv (no bias) + batch norm, where the shape changes."""
    if stride == 1 and cin == out:
        return None
    return nn.Sequential(nn.Conv2d(cin, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out))


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN, plus the identity or a projection, then ReLU (torchvision names)."""

    def __init__(self, cin, out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out)
        self.conv2 = nn.Conv2d(out, out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out)
        self.downsample = _downsample(cin, out, stride)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        s = x if self.downsample is None else self.downsample(x)
        return F.relu(y + s)


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: 1x1, 3x3 (with the stride), 1x1 x4 (torchvision names)."""

    def __init__(self, cin, width, stride):
        super().__init__()
        out = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.downsample = _downsample(cin, out, stride)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        s = x if self.downsample is None else self.downsample(x)
        return F.relu(y + s)


class ResNetCifar(nn.Module):
    """CIFAR ResNet of depth 6n+2 (He et al. 2016, section 4.2) with crossbow's projection
    (option B) shortcuts: conv3x3 16 -> 3 stages of n blocks (16/32/64) -> average -> FC."""

    def __init__(self, depth, input_shape, classes):
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"CIFAR ResNet depth must be 6n+2, got {depth}")
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(input_shape[0], 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        cin = 16
        for stage, width in enumerate([16, 32, 64]):
            blocks = []
            for b in range(n):
                blocks.append(BasicBlock(cin, width, 2 if stage > 0 and b == 0 else 1))
                cin = width
            setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class ResNet50(nn.Module):
    """ResNet-50 v1.5: the key set and shapes of torchvision's resnet50."""

    def __init__(self, input_shape, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(input_shape[0], 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for stage, (blocks, width) in enumerate(zip([3, 4, 6, 3], [64, 128, 256, 512])):
            layer = []
            for b in range(blocks):
                layer.append(Bottleneck(cin, width, 2 if stage > 0 and b == 0 else 1))
                cin = width * 4
            setattr(self, f"layer{stage + 1}", nn.Sequential(*layer))
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class VGG16Bn(nn.Module):
    """crossbow's VGG-16 with batch norm: 13 conv3x3 (no bias)-BN-ReLU in stages
    64/128/256/512/512, 2x2 max pooling after a stage while the map is at least 2 high, then
    dropout -> FC 512 -> ReLU -> BN -> dropout -> FC classes. Module indices follow
    torchvision's `features` / `classifier` Sequentials."""

    def __init__(self, input_shape, classes):
        super().__init__()
        c, h, w = input_shape
        layers = []
        for widths in [[64, 64], [128, 128], [256, 256, 256], [512, 512, 512], [512, 512, 512]]:
            for width in widths:
                layers += [nn.Conv2d(c, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
                c = width
            if h >= 2:
                layers.append(nn.MaxPool2d(2, 2))
                h, w = h // 2, w // 2
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Dropout(0.5),
            nn.Linear(c * h * w, 512),
            nn.ReLU(),
            nn.BatchNorm1d(512),
            nn.Dropout(0.5),
            nn.Linear(512, classes),
        )

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def build(model, input_shape, classes):
    """The module for a crossbow model name (`lenet5`, `resnet20`, ..., `vgg16`, `resnet50`)."""
    name = model.lower().replace("-", "").replace("_", "")
    input_shape = tuple(int(d) for d in input_shape)
    if name in ("lenet5", "lenet"):
        return LeNet5(input_shape, classes)
    if name in ("vgg16", "vgg16bn"):
        return VGG16Bn(input_shape, classes)
    if name == "resnet50":
        return ResNet50(input_shape, classes)
    if name.startswith("resnet") and name[6:].isdigit():
        return ResNetCifar(int(name[6:]), input_shape, classes)
    raise ValueError(f"unknown model {model!r}")


DTYPES = {torch.float32: "F32", torch.int64: "I64"}

# The golden lists the Rust tests check: (model, per-sample input shape, classes).
GOLDEN = [
    ("lenet5", (1, 28, 28), 10),
    ("resnet20", (3, 32, 32), 10),
    ("vgg16", (3, 32, 32), 100),
    ("resnet50", (3, 224, 224), 1000),
]


def state_dict_keys(model, input_shape, classes):
    """[{name, shape, dtype}] of the model's state_dict, in its order."""
    sd = build(model, input_shape, classes).state_dict()
    return [{"name": k, "shape": list(v.shape), "dtype": DTYPES[v.dtype]} for k, v in sd.items()]


def cmd_golden(args):
    os.makedirs(args.dir, exist_ok=True)
    for model, shape, classes in GOLDEN:
        doc = {
            "model": model,
            "input": list(shape),
            "classes": classes,
            "generated_by": "python3 scripts/pytorch_models.py golden crates/replica/tests/data",
            "torch": torch.__version__.split("+")[0],
            "state_dict": state_dict_keys(model, shape, classes),
        }
        path = os.path.join(args.dir, f"pytorch_{model}_keys.json")
        head = {k: v for k, v in doc.items() if k != "state_dict"}
        with open(path, "w") as f:
            # One tensor a line, so that a change reads well in a diff.
            f.write(json.dumps(head)[:-1] + ', "state_dict": [\n')
            f.write(",\n".join(" " + json.dumps(t) for t in doc["state_dict"]))
            f.write("\n]}\n")
        print(f"{path}: {len(doc['state_dict'])} tensors")


def cmd_keys(args):
    shape = [int(d) for d in args.input.split(",")]
    json.dump(state_dict_keys(args.model, shape, args.classes), sys.stdout, indent=1)
    print()


def cmd_check(args):
    from safetensors import safe_open
    from safetensors.torch import load_file

    torch.manual_seed(0)
    ios = sorted(f for f in os.listdir(args.dir) if f.endswith(".io.safetensors"))
    if not ios:
        sys.exit(f"no *.io.safetensors in {args.dir}")
    worst = 0.0
    for io_name in ios:
        stem = io_name[: -len(".io.safetensors")]
        model_path = os.path.join(args.dir, stem + ".safetensors")
        with safe_open(model_path, framework="pt") as f:
            meta = f.metadata()
        shape = [int(d) for d in meta["crossbow.input_shape"].split(",")]
        model = build(meta["crossbow.model"], shape, int(meta["crossbow.classes"]))
        model.load_state_dict(load_file(model_path), strict=True)
        model.eval()
        if args.f64:
            model.double()
        io = load_file(os.path.join(args.dir, io_name))
        with torch.no_grad():
            ours = model(io["input"].double() if args.f64 else io["input"])
        theirs = io["logits"]
        if ours.shape != theirs.shape:
            sys.exit(f"{stem}: PyTorch logits {tuple(ours.shape)}, crossbow {tuple(theirs.shape)}")
        diff = (ours.double() - theirs.double()).abs().max().item()
        scale = theirs.abs().max().item()
        same_argmax = bool((ours.argmax(1) == theirs.argmax(1)).all())
        worst = max(worst, diff / max(scale, 1.0))
        print(
            f"{stem}: {meta['crossbow.model']} input {tuple(io['input'].shape)}: max |logit| {scale:.4g}, "
            f"max abs diff {diff:.3g} (relative {diff / max(scale, 1e-30):.3g}), same argmax: {same_argmax}"
        )
    if worst > args.tol:
        sys.exit(f"largest relative difference {worst:.3g} is over the tolerance {args.tol}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("golden", help="write the golden state_dict key lists")
    g.add_argument("dir")
    g.set_defaults(fn=cmd_golden)
    k = sub.add_parser("keys", help="print one model's state_dict key list")
    k.add_argument("model")
    k.add_argument("input", help="per-sample input shape C,H,W")
    k.add_argument("classes", type=int)
    k.set_defaults(fn=cmd_keys)
    c = sub.add_parser("check", help="load exported models and compare logits with crossbow's")
    c.add_argument("dir")
    c.add_argument("--tol", type=float, default=1e-4, help="largest accepted max|diff| / max(1, max|logit|)")
    c.add_argument("--f64", action="store_true", help="run PyTorch's forward pass in float64")
    c.set_defaults(fn=cmd_check)
    args = p.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
