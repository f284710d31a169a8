#!/bin/bash
# bab.sh OLD NEW MODEL BATCH ROUNDS [ISA]: crossbow bench (1 learner, 20 iterations after 3 of
# warm-up) with two builds, alternating in each round, the first of the pair alternating between
# rounds (the first run of a pair reads high: docs/results/winograd-avx2/); prints img/s.
for r in $(seq 1 $5); do
  if [ $((r % 2)) = 1 ]; then order="$1 $2"; else order="$2 $1"; fi
  for bin in $order; do
    v=$(CROSSBOW_CPU_ISA=${6:-} $bin bench --model $3 --batch-size $4 --learners 1 --devices cpu --iterations 20 --warmup 3 2>&1 | tail -1 | awk -F'|' '{print $6}')
    echo "round $r $bin $v"
  done
done
