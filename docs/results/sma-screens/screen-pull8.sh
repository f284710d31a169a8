#!/usr/bin/env bash
# Issue 47 item 2, pull screen at k = 8 in the schedule screen's setting (screen-sched8.sh: 30
# epochs with a x0.1 drop at epoch 20, rates 0.025/0.05/0.1 tuned on seed 0, seeds 1-3), so
# its rows sit beside sched8-runs.jsonl's S-SGD and SMA 1/k rows: the authors' fixed pull
# alpha = 0.1, the weaker 0.025, and central momentum 0 (which removes most of the unstable
# band of the linearised dynamics, stability.md) with and without them. Resumable; frozen binary.
BIN=${BIN:-/work/exp/bin/crossbow-8a48588}
OUT=${OUT:-/work/exp/screen-pull8}
cd "$(dirname "$0")/../../.."
exec nice -n 10 "$BIN" experiment tta --model resnet20 --dataset cifar10 --data-dir data/cifar10-4k \
  --learners 8 --batch-size 16 --seeds 3 --tune-seed 0 --target 0.55 --epochs 30 --eval-every 0.5 \
  --run-to-end --tune-by final --final-epochs 3 --lr 0.025,0.05,0.1 --no-ssgd-linear-scaling \
  --sync sma/schedule=multistep:20/central-momentum=0,sma/schedule=multistep:20/alpha=0.1,sma/schedule=multistep:20/alpha=0.1/central-momentum=0,sma/schedule=multistep:20/alpha=0.025/central-momentum=0 \
  --resume --out "$OUT"
