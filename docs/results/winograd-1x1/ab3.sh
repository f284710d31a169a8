#!/bin/bash
# ab3.sh MODEL BATCH ROUNDS LEARNERS ISA BIN...
m=$1; b=$2; n=$3; l=$4; isa=$5; shift 5
for r in $(seq 1 $n); do
  bins="$@"; if [ $((r % 2)) = 0 ]; then bins=$(echo $bins | tr ' ' '\n' | tac | tr '\n' ' '); fi
  for bin in $bins; do
    v=$(CROSSBOW_CPU_ISA=$isa $bin bench --model $m --batch-size $b --learners $l --devices cpu --iterations 30 --warmup 3 2>&1 | tail -1 | awk -F'|' '{print $6}')
    echo "round $r $bin $v"
  done
done
