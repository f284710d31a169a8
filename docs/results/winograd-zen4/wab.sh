#!/bin/bash
# wab.sh MODEL BATCH ROUNDS [ISA]: crossbow bench with Winograd on (CROSSBOW_WINOGRAD=1) and off,
# alternating in each round, the first of the pair alternating between rounds (the first run of
# a pair read up to 1.18x the second with the same code: docs/results/winograd-avx2/);
# run from the repository root after cargo build --release -p crossbow-cli
for r in $(seq 1 $3); do
  if [ $((r % 2)) = 1 ]; then order="1 0"; else order="0 1"; fi
  for wg in $order; do
    v=$(CROSSBOW_CPU_ISA=${4:-} CROSSBOW_WINOGRAD=$wg target/release/crossbow bench --model $1 --batch-size $2 --learners 1 --devices cpu --iterations 20 --warmup 3 2>&1 | tail -1 | awk -F'|' '{print $6}')
    echo "round $r winograd $wg $v"
  done
done
