#!/bin/bash
# usage: ab.sh MODEL BATCH ROUNDS [ISA]
m=$1; b=$2; n=$3; isa=${4:-}
for i in $(seq 1 $n); do
  for v in $ORDER; do
    r=$(CROSSBOW_CPU_ISA=$isa /tmp/crossbow-$v bench --model $m --batch-size $b --learners 1 --devices cpu --iterations 40 --warmup 3 2>&1 | tail -1 | awk -F'|' '{print $6}')
    echo "$v $r"
  done
done | python3 -c "
import sys,math
rows=[l.split() for l in sys.stdin]
old=[float(r[1]) for r in rows if r[0]=='old']; new=[float(r[1]) for r in rows if r[0]=='new']
rat=[n/o for o,n in zip(old,new)]
print('$m b$b isa=${isa:-native}', 'old',old,'new',new,'ratios',[round(r,3) for r in rat],'geomean',round(math.exp(sum(map(math.log,rat))/len(rat)),3))
"
