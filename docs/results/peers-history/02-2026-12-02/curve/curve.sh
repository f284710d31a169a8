#!/bin/bash
# Issue 27 item 2: images/s against batch 8-128, 1 and 2 learners, both ISAs, one run.
cd /work/main
pkill -STOP -f /work/exp/cb
for round in 1; do
for isa in avx2 avx512; do
  CROSSBOW_CPU_ISA=$isa /work/exp/peers27/crossbow bench --model resnet20 --batch-size 8,16,32,64,128 \
    --learners 1,2 --devices cpu --iterations 30 --warmup 5 --json /work/exp/peers27/curve-$isa-$round.json \
    > /work/exp/peers27/curve-$isa-$round.md 2>&1
done
done
pkill -CONT -f /work/exp/cb
echo done > /work/exp/peers27/CURVE_DONE
