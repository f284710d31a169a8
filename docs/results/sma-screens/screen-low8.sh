#!/usr/bin/env bash
# Issue 47 item 2: at k = 8 every SMA variant of the schedule and pull screens tuned to the
# grid's smallest rate (0.025), so the grid is extended down: SMA 1/k with central momentum
# 0.9 and 0 at 0.0125, seeds 0 (tuning) and 1-3, in the same setting (screen-sched8.sh).
BIN=${BIN:-/work/exp/bin/crossbow-8a48588}
OUT=${OUT:-/work/exp/screen-low8}
cd "$(dirname "$0")/../../.."
exec nice -n 10 "$BIN" experiment tta --model resnet20 --dataset cifar10 --data-dir data/cifar10-4k \
  --learners 8 --batch-size 16 --seeds 3 --tune-seed 0 --target 0.55 --epochs 30 --eval-every 0.5 \
  --run-to-end --tune-by final --final-epochs 3 --lr 0.0125 --no-ssgd-linear-scaling \
  --sync sma/schedule=multistep:20,sma/schedule=multistep:20/central-momentum=0 \
  --resume --out "$OUT"
