#!/usr/bin/env bash
# The tuner with and without its noise margin on a real host: one epoch of LeNet-5 on
# Fashion-MNIST, S-SGD, b 64, lr 0.05, the tuner choosing the learners, seeds 1-6, the two
# alternated. OLD is a crossbow built before the margin (OLD_FLAGS="--tuner-significance 0"
# with today's build instead removes only the margin, not the pooled search windows).
# Measured on a 2-vCPU AMD EPYC Zen 3 (2026-12-07), OLD built with the tuner as at 4181a3d.
# Then: python3 summary.py
# Usage: OLD=/path/to/old/crossbow NEW=target/release/crossbow [FMNIST=...] run.sh
set -eu
cd "$(dirname "$0")"
NEW=${NEW:-../../../target/release/crossbow}
OLD=${OLD:?OLD must name the crossbow to compare with}
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
for s in 1 2 3 4 5 6; do
  for side in old new; do
    case $side in old) BIN=$OLD; flags=${OLD_FLAGS:-} ;; new) BIN=$NEW; flags= ;; esac
    rm -f "$side-s$s.jsonl"
    "$BIN" train --model lenet5 --dataset mnist --data-dir "$FMNIST" --batch-size 64 --lr 0.05 \
      --schedule cosine --epochs 1 --eval-every 0.5 --seed "$s" --devices cpu --threads 2 --sync ssgd \
      --metrics "$side-s$s.jsonl" -q $flags
  done
done
