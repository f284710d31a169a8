#!/usr/bin/env bash
# Is batch-norm recalibration (a quarter of crossbow's run on the cifar10-4k row, with
# evaluation) worth its time? S-SGD (ResNet-20's default synchroniser), 2 learners of 16 (the
# tuner's pick in the row), rate 0.025 (crossbow's tuned pick), 30 epochs, evaluation every half
# epoch, seeds 1-3, with the evaluation's batch-norm statistics recalibrated on z over 20
# batches (the default), over 5, or the mean of the learners' running statistics (free).
# Then the same question under SMA, whose central model z no learner holds (its statistics
# are recalibrated from z's own forward passes): 4 learners of 16, SMA 1/k (the default form),
# rate 0.025 (the k = 4 schedule screen's pick), recalibrate:20 against recalibrate:5.
# Usage: BIN=target/release/crossbow docs/results/tta-pytorch/bn-eval/run.sh
set -u
cd "$(dirname "$0")"
BIN=${BIN:-../../../../target/release/crossbow}
run() { # synchroniser, learners, seed, --bn-eval
  local m=$1-${4/:/}-s$3.jsonl
  [ -f "$m" ] && grep -q '"event":"end"' "$m" && return
  "$BIN" train --model resnet20 --dataset cifar10 --data-dir ../../../../data/cifar10-4k \
    --learners-per-device "$2" --batch-size 16 --sync "$1" --lr 0.025 --epochs 30 --eval-every 0.5 --seed "$3" \
    --bn-eval "$4" --metrics "$m" -q > "${m%.jsonl}.log" 2>&1
}
for s in 1 2 3; do for bn in recalibrate:20 mean recalibrate:5; do run ssgd 2 "$s" "$bn"; done; done
for s in 1 2 3; do for bn in recalibrate:20 recalibrate:5; do run sma 4 "$s" "$bn"; done; done
