#!/usr/bin/env bash
# Issue 47 item 2: the screens after the pull screen, one after another (each resumable).
cd /work/main
BIN=/work/exp/bin/crossbow-6a16b95
COMMON="--model resnet20 --dataset cifar10 --data-dir data/cifar10-4k --learners 4,8 --batch-size 16 --seeds 3 --tune-seed 0 --target 0.55 --epochs 30 --eval-every 0.5 --run-to-end --tune-by final --final-epochs 3 --resume"
while pgrep -f screen-pull.sh >/dev/null || pgrep -f 'crossbow-83714a8 experiment' >/dev/null; do sleep 60; done
nice -n 10 $BIN experiment tta $COMMON --lr 0.2,0.4,0.7,1.0 --sync sma/sma-form=paper --out /work/exp/screen-form > /work/exp/screen-form.log 2>&1
nice -n 10 $BIN experiment tta $COMMON --lr 0.0125,0.025,0.05 \
  --sync ssgd/schedule=multistep:20,sma/schedule=multistep:20,sma/schedule=multistep:20/opt.ssgd-until=20,sma/alpha=0.05/schedule=multistep:20,ssgd/schedule=cosine,sma/schedule=cosine \
  --out /work/exp/screen-sched > /work/exp/screen-sched.log 2>&1
