#!/usr/bin/env bash
# Issue 49: time to accuracy, crossbow (its defaults: the tuner picks the learners, the
# model's default synchroniser) against PyTorch on the same 2 cores, data, schedule and
# stopping rule. Both sides tuned on one grid (batch 16/32/64 x rate 0.025/0.05/0.1) on seed 0,
# then 3 seeds at their picks, alternating sides; see benches/peers/tta_compare.py.
# Needs a quiet machine (nothing else running: PyTorch's threads lose badly to a busy core).
# Usage: PY=~/torchenv/bin/python FMNIST=/usr/share/datasets/fashion-mnist \
#        [ROWS="fmnist-lenet5-cosine fmnist-lenet5 cifar4k-resnet20"] docs/results/tta-pytorch/run.sh
set -eu
cd "$(dirname "$0")/../../.."
PY=${PY:?PY must name a python with torch and torchvision}
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
ROWS=${ROWS:-"fmnist-lenet5-cosine cifar4k-resnet20"}
OUT=docs/results/tta-pytorch
for row in $ROWS; do
  case $row in
    fmnist-lenet5) # Debian's dataset-fashion-mnist; crossbow reads idx files as `mnist`.
      python3 benches/peers/tta_compare.py --python "$PY" --model lenet5 --dataset mnist --data-dir "$FMNIST" \
        --target 0.89 --epochs 15 --eval-every 0.5 --seeds 3 --out "$OUT/$row" --resume ;;
    fmnist-lenet5-cosine) # the same row with a schedule that ends above the target, run to the end
      # of the schedule on every run, so final accuracy is compared at the end and not at the stop.
      python3 benches/peers/tta_compare.py --python "$PY" --model lenet5 --dataset mnist --data-dir "$FMNIST" \
        --target 0.89 --epochs 15 --schedule cosine --run-to-end --eval-every 0.5 --seeds 3 --out "$OUT/$row" --resume ;;
    cifar4k-resnet20)
      python3 benches/peers/tta_compare.py --python "$PY" --model resnet20 --dataset cifar10 \
        --data-dir data/cifar10-4k --target 0.55 --epochs 30 --eval-every 0.5 --seeds 3 --out "$OUT/$row" --resume ;;
    *) echo "unknown row $row" >&2; exit 2 ;;
  esac
done
