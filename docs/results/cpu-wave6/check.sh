#!/usr/bin/env bash
# Second check of the tightest ratios of BENCHMARKS.md §10 (formerly §10.4) with 5x longer windows and a fixed learner count
# (2, the tuner's usual pick), alternating crossbow and PyTorch three times.
set -u
NEW=${NEW:-/tmp/crossbow-new}; PY=${PY:-/tmp/torchenv/bin/python}
cd "$(dirname "$0")/../../.."
for r in 1 2 3; do
  for m in "resnet32 16" "lenet5 16"; do
    set -- $m
    it=100; [ "$1" = lenet5 ] && it=1000
    echo "round $r $1 b$2 crossbow: $("$NEW" bench --model "$1" --batch-size "$2" --learners 2 --devices cpu --threads 2 --iterations $it --warmup 5 2>/dev/null | grep "^| $1" | cut -d'|' -f6)"
    echo "round $r $1 b$2 pytorch: $("$PY" benches/peers/pytorch_bench.py --model "$1" --batch-size "$2" --threads 2 --iterations $it 2>/dev/null | tail -1)"
  done
done
