#!/usr/bin/env bash
# Is crossbow's final-accuracy gap on the Fashion-MNIST cosine row (one learner: 91.2-91.3%
# against PyTorch's 91.4%, 3 seeds) systematic or seed noise? Ten seeds of each side at the
# same settings: LeNet-5, b 64, cosine over 15 epochs, run to the end, evaluation every half
# epoch; crossbow one learner (no tuner) at PyTorch's pick (lr 0.025) and at its own (0.05),
# PyTorch at lr 0.025, NCHW (its pick on this row). Accuracy, not time: the machine may be busy,
# so each side runs one thread (and PyTorch one loader worker), which changes the speed, not the
# algorithm.
# Then: python3 summary.py
# Usage: BIN=target/release/crossbow PY=~/torchenv/bin/python [FMNIST=/usr/share/datasets/fashion-mnist] run.sh
set -eu
cd "$(dirname "$0")"
BIN=${BIN:-../../../../target/release/crossbow}
PY=${PY:?PY must name a python with torch and torchvision}
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
for s in 1 2 3 4 5 6 7 8 9 10; do
  for lr in 0.025 0.05; do
    m=crossbow-lr$lr-s$s.jsonl
    [ -f "$m" ] && grep -q '"event":"end"' "$m" && continue
    rm -f "$m"
    "$BIN" train --model lenet5 --dataset mnist --data-dir "$FMNIST" --batch-size 64 --lr "$lr" \
      --schedule cosine --epochs 15 --eval-every 0.5 --seed "$s" --devices cpu --threads 1 \
      --learners-per-device 1 --metrics "$m" -q
  done
  j=pytorch-lr0.025-s$s.json
  [ -f "$j" ] && continue
  "$PY" ../../../../benches/peers/tta.py --model lenet5 --dataset mnist --data-dir "$FMNIST" --batch-size 64 \
    --lr 0.025 --schedule cosine --epochs 15 --eval-every 0.5 --seed "$s" --threads 1 --target 0.89 \
    --memory-format nchw --workers 1 --run-to-end --json "$j.part" > /dev/null && mv "$j.part" "$j"
done
