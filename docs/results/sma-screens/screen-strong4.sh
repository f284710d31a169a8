#!/usr/bin/env bash
# Issue 47 item 2: SMA's best form at k = 8 (screen-strong8.sh: alpha = 0.5 with z moved by the
# mean of the corrections, opt.central-step=mean) screened at k = 4 before the full-size k = 4
# runs take it, in the schedule screen's setting (screen-sched.sh: 30 epochs, x0.1 at epoch 20;
# S-SGD, post-local SGD and SMA 1/k at k = 4 are in sched-runs.jsonl). Its linearised dynamics:
# cargo run -p crossbow-sma --example stability -- 0.9 4 0.5 0.9 local-momentum mean
# Rates 0.0125-0.1 tuned on seed 0 by final accuracy, seeds 1-3 at the pick. Resumable.
BIN=${BIN:-/work/exp/bin/crossbow-8a48588}
OUT=${OUT:-/work/exp/screen-strong4}
cd "$(dirname "$0")/../../.."
exec nice -n 10 "$BIN" experiment tta --model resnet20 --dataset cifar10 --data-dir data/cifar10-4k \
  --learners 4 --batch-size 16 --seeds 3 --tune-seed 0 --target 0.55 --epochs 30 --eval-every 0.5 \
  --run-to-end --tune-by final --final-epochs 3 --lr 0.0125,0.025,0.05,0.1 --no-ssgd-linear-scaling \
  --sync sma/schedule=multistep:20/alpha=0.5/opt.central-step=mean \
  --resume --out "$OUT"
