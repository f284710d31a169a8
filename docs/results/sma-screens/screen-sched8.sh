#!/usr/bin/env bash
# Issue 47 item 2, schedule screen at k = 8: S-SGD, post-local SGD and SMA 1/k with a rate drop
# at epoch 20 of 30, every variant on the same rate grid (no linear scaling for S-SGD: post-local
# SGD runs S-SGD until the drop, so both see the same rates). Resumable; frozen binary.
BIN=${BIN:-/work/exp/bin/crossbow-10e94e5}
OUT=${OUT:-/work/exp/screen-sched8}
cd "$(dirname "$0")/../../.."
exec nice -n 10 "$BIN" experiment tta --model resnet20 --dataset cifar10 --data-dir data/cifar10-4k \
  --learners 8 --batch-size 16 --seeds 3 --tune-seed 0 --target 0.55 --epochs 30 --eval-every 0.5 \
  --run-to-end --tune-by final --final-epochs 3 --lr 0.025,0.05,0.1 --no-ssgd-linear-scaling \
  --sync ssgd/schedule=multistep:20,sma/schedule=multistep:20/opt.ssgd-until=20,sma/schedule=multistep:20 \
  --resume --out "$OUT"
