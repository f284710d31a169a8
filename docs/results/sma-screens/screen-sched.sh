#!/usr/bin/env bash
# Issue 47 item 2, schedule screen (k = 4): a rate drop at epoch 20 of 30 for S-SGD, SMA (1/k and
# alpha 0.1) and post-local SGD (S-SGD until the drop, SMA after). Resumable; frozen binary.
BIN=${BIN:-/work/exp/bin/crossbow-10e94e5}
OUT=${OUT:-/work/exp/screen-sched}
cd "$(dirname "$0")/../../.."
exec nice -n 10 "$BIN" experiment tta --model resnet20 --dataset cifar10 --data-dir data/cifar10-4k \
  --learners 4 --batch-size 16 --seeds 3 --tune-seed 0 --target 0.55 --epochs 30 --eval-every 0.5 \
  --run-to-end --tune-by final --final-epochs 3 --lr 0.025,0.05 \
  --sync ssgd/schedule=multistep:20,sma/schedule=multistep:20,sma/schedule=multistep:20/opt.ssgd-until=20,sma/alpha=0.1/schedule=multistep:20 \
  --resume --out "$OUT"
