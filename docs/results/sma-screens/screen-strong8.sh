#!/usr/bin/env bash
# Issue 47 item 2: in the k = 8 pull screen (screen-pull8.sh) every weaker pull than 1/k was
# worse, so one stronger: alpha = 0.25 with both momenta (with the corrections summed into z,
# alpha*k > 1 overshoots the learners' mean; the linearised dynamics are stable for
# lr*h < 0.73 here, and unstable at every rate for alpha = 0.5 or for central momentum 0:
# cargo run -p crossbow-sma --example stability -- 0.9 8 0.25 0.9 local-momentum).
# alpha = 0.25 picked 0.05, the top of its first grid (0.0125-0.05), so the grid goes to 0.1.
# Stronger still without the overshoot: z moved by the mean of the corrections
# (opt.central-step=mean), alpha = 0.5 and 1 (at 1 every learner restarts from z each
# iteration and z is the learners' mean: model averaging every step, with local momentum;
# with central momentum 0 as well this is S-SGD with the central model one step behind).
# The schedule screen's setting (screen-sched8.sh). Resumable.
BIN=${BIN:-/work/exp/bin/crossbow-8a48588}
OUT=${OUT:-/work/exp/screen-strong8}
cd "$(dirname "$0")/../../.."
exec nice -n 10 "$BIN" experiment tta --model resnet20 --dataset cifar10 --data-dir data/cifar10-4k \
  --learners 8 --batch-size 16 --seeds 3 --tune-seed 0 --target 0.55 --epochs 30 --eval-every 0.5 \
  --run-to-end --tune-by final --final-epochs 3 --lr 0.0125,0.025,0.05,0.1 --no-ssgd-linear-scaling \
  --sync sma/schedule=multistep:20/alpha=0.25,sma/schedule=multistep:20/alpha=0.5/opt.central-step=mean,sma/schedule=multistep:20/alpha=1/opt.central-step=mean,sma/schedule=multistep:20/alpha=1/opt.central-step=mean/central-momentum=0 \
  --resume --out "$OUT"
