#!/usr/bin/env bash
# Issue 47 item 2, screen 1: the pull (alpha) and central momentum, ResNet-20 on cifar10-4k.
cd /work/main
exec nice -n 10 /work/exp/bin/crossbow-83714a8 experiment tta --model resnet20 --dataset cifar10 \
  --data-dir data/cifar10-4k --learners 4,8 --batch-size 16 --seeds 3 --tune-seed 0 \
  --target 0.55 --epochs 30 --eval-every 0.5 --run-to-end --tune-by final --final-epochs 3 \
  --lr 0.0125,0.025,0.05 \
  --sync ssgd,sma,sma/central-momentum=0,sma/alpha=0.1,sma/alpha=0.1/central-momentum=0,sma/alpha=0.05,sma/alpha=0.05/central-momentum=0,sma/alpha=0.025,sma/alpha=0.025/central-momentum=0 \
  --resume --out /work/exp/screen-pull
