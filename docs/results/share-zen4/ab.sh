#!/bin/bash
# A/B of the whole step: old (static halves) /tmp/cb-base vs new (items shared out) /tmp/cb-new,
# alternating, both ISAs, 1 learner of 2 threads.
out=/work/exp/share-ab/ab.txt
: > $out
for round in 1 2 3 4; do
  for isa in avx512 avx2; do
    for mb in "resnet20 16" "resnet20 32" "resnet32 32" "resnet32 128"; do
      set -- $mb
      for v in base new; do
        r=$(CROSSBOW_CPU_ISA=$isa /tmp/cb-$v bench --model $1 --batch-size $2 --learners 1 --devices cpu --iterations 12 --warmup 3 2>/dev/null | grep "| $1 " | awk -F'|' '{print $6}')
        echo "$round $isa $1 $2 $v $r" >> $out
      done
    done
  done
done
echo done >> $out
