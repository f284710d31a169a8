#!/bin/bash
# wab.sh MODEL BATCH ROUNDS [ISA]: crossbow bench with Winograd on (CROSSBOW_WINOGRAD=1) and off,
# alternating in each round; run from the repository root after cargo build --release -p crossbow-cli
for r in $(seq 1 $3); do
  for wg in 1 0; do
    v=$(CROSSBOW_CPU_ISA=${4:-} CROSSBOW_WINOGRAD=$wg target/release/crossbow bench --model $1 --batch-size $2 --learners 1 --devices cpu --iterations 20 --warmup 3 2>&1 | tail -1 | awk -F'|' '{print $6}')
    echo "round $r winograd $wg $v"
  done
done
