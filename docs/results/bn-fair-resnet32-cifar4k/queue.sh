#!/bin/bash
# Issue 22 item 3: the ResNet-32 row set on cifar10-4k, resumable across sessions.
# Run from the repository root; EXP is where the experiment writes (default exp/), CROSSBOW the
# release binary. To continue the committed runs: mkdir -p exp && cp -r docs/results/bn-fair-resnet32-cifar4k exp/fair-resnet32
# First k = 1 and 4 (the ablations' configuration); later sessions extend LEARNERS to 1,2,4,8
# and --resume keeps every run already in runs.jsonl.
set -euo pipefail
EXP=${EXP:-exp}
CROSSBOW=${CROSSBOW:-target/release/crossbow}
LEARNERS=${LEARNERS:-1,4}
mkdir -p "$EXP/fair-resnet32"
nice -n 19 "$CROSSBOW" experiment tta --model resnet32 --dataset cifar10 --data-dir data/cifar10-4k \
  --learners "$LEARNERS" --batch-size 16 --seeds 5 --tune-seed 0 --target 0.55 --epochs 16 --eval-every 0.5 \
  --lr 0.0125,0.025,0.05,0.1 --sync sma,ssgd --resume --out "$EXP/fair-resnet32" >> "$EXP/fair-resnet32.log" 2>&1
