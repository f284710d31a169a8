#!/bin/bash
out=/work/exp/share-ab/ab4.txt
: > $out
for round in 1 2 3 4 5 6; do
  for c in "avx512 resnet32 32" "avx2 resnet20 32"; do
    set -- $c
    for v in base new; do
      r=$(CROSSBOW_CPU_ISA=$1 /tmp/cb-$v bench --model $2 --batch-size $3 --learners 1 --devices cpu --iterations 60 --warmup 3 2>/dev/null | grep "| $2 " | awk -F'|' '{print $6}')
      echo "$round $1 $2 $3 $v $r" >> $out
    done
  done
done
echo done >> $out
