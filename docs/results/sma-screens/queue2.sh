#!/usr/bin/env bash
# The pull screen's weak pulls at k = 8 tuned to the grid's smallest rate: one rate lower.
cd /work/main
BIN=/work/exp/bin/crossbow-6a16b95
while pgrep -f 'queue.sh' >/dev/null || pgrep -f screen-pull.sh >/dev/null; do sleep 60; done
nice -n 10 $BIN experiment tta --model resnet20 --dataset cifar10 --data-dir data/cifar10-4k --learners 8 --batch-size 16 \
  --seeds 3 --tune-seed 0 --target 0.55 --epochs 30 --eval-every 0.5 --run-to-end --final-epochs 3 --resume \
  --lr 0.00625 --sync sma/alpha=0.025,sma/alpha=0.05,sma/alpha=0.05/central-momentum=0 \
  --out /work/exp/screen-pull-low > /work/exp/screen-pull-low.log 2>&1
