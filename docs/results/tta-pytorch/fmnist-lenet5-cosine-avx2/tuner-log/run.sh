#!/usr/bin/env bash
# crossbow's side of ../ (its defaults: the tuner picks the learners, S-SGD) at the row's pick,
# b 64, lr 0.025, cosine over 15 epochs, with the tuner's every decision in the metrics file;
# seeds 2 (twice), 3, 4, 5. Then: python3 summary.py
# Usage: BIN=target/release/crossbow [FMNIST=/usr/share/datasets/fashion-mnist] run.sh
set -eu
cd "$(dirname "$0")"
BIN=${BIN:-../../../../../target/release/crossbow}
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
for run in 2-a 2-b 3 4 5; do
  m=s$run.jsonl
  [ -f "$m" ] && grep -q '"event":"end"' "$m" && continue
  rm -f "$m"
  CROSSBOW_CPU_ISA=avx2 "$BIN" train --model lenet5 --dataset mnist --data-dir "$FMNIST" --batch-size 64 \
    --lr 0.025 --schedule cosine --epochs 15 --eval-every 0.5 --seed "${run%%-*}" --threads 2 --metrics "$m" -q
done
