#!/bin/bash
# bab2.sh OLD NEW MODEL BATCH ROUNDS LEARNERS [ISA]
for r in $(seq 1 $5); do
  if [ $((r % 2)) = 1 ]; then order="$1 $2"; else order="$2 $1"; fi
  for bin in $order; do
    v=$(CROSSBOW_CPU_ISA=${7:-} $bin bench --model $3 --batch-size $4 --learners $6 --devices cpu --iterations 30 --warmup 3 2>&1 | tail -1 | awk -F'|' '{print $6}')
    echo "round $r $bin $v"
  done
done
