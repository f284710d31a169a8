#!/usr/bin/env bash
# Issue 47 item 2, pull screen at k = 4, the twin of screen-pull8.sh (30 epochs with a x0.1 drop
# at epoch 20, rates 0.025/0.05/0.1 tuned on seed 0 by final accuracy, seeds 1-3), so its rows
# sit beside sched-runs.jsonl's S-SGD, SMA 1/k and SMA alpha = 0.1 rows at k = 4: central
# momentum 0 (which removes most of the unstable band, stability.md) with 1/k and the authors'
# alpha = 0.1, and the weaker alpha = 0.025 with central momentum 0. Resumable (--resume).
BIN=${BIN:-target/release/crossbow}
OUT=${OUT:?OUT must name the output folder}
cd "$(dirname "$0")/../../.."
exec nice -n 10 "$BIN" experiment tta --model resnet20 --dataset cifar10 --data-dir data/cifar10-4k \
  --learners 4 --batch-size 16 --seeds 3 --tune-seed 0 --target 0.55 --epochs 30 --eval-every 0.5 \
  --run-to-end --tune-by final --final-epochs 3 --lr 0.025,0.05,0.1 --no-ssgd-linear-scaling \
  --sync sma/schedule=multistep:20/central-momentum=0,sma/schedule=multistep:20/alpha=0.1/central-momentum=0,sma/schedule=multistep:20/alpha=0.025/central-momentum=0 \
  --resume --out "$OUT"
