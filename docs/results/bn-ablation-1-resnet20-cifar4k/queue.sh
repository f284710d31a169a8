#!/bin/bash
# The ablation queue (issue 22): one experiment after another, each resumable.
# Run from the repository root; results go under $OUT (default exp/).
mkdir -p ${OUT:-exp}
GRID=0.0125,0.025,0.05,0.1
COMMON="--model resnet20 --dataset cifar10 --data-dir data/cifar10-4k --learners 4 --batch-size 16 --seeds 3 --tune-seed 0 --target 0.4 --epochs 12 --eval-every 0.5 --lr $GRID"
${CROSSBOW:-target/release/crossbow} experiment tta $COMMON --resume \
  --sync 'sma,ssgd,sma/central-momentum=0,sma/sma-form=paper,sma/sma-form=paper/central-momentum=0,sma/alpha=0.5,sma/schedule=warmup:1:0.1:1000,ssgd/schedule=warmup:1:0.1:1000,sma/bn-eval=mean' \
  --out ${OUT:-exp}/ablation-1 >> ${OUT:-exp}/ablation-1.log 2>&1
${CROSSBOW:-target/release/crossbow} experiment tta $COMMON --resume \
  --sync 'sma/opt.central-step=mean/opt.alpha-rule=0.5,sma/opt.central-step=mean/opt.alpha-rule=ramp:1,sma/opt.bn-params=local,sma/opt.bn-params=0.05,sma/opt.weight-decay-on=central,sma/bn-eval=learner' \
  --out ${OUT:-exp}/ablation-2 >> ${OUT:-exp}/ablation-2.log 2>&1
