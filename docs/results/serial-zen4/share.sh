#!/bin/bash
# share.sh BIN MODEL BATCH [ISA]: img/s and the shares of copies
CROSSBOW_CPU_ISA=${4:-} perf record -q -e cpu-clock -o /tmp/s.perf $1 bench --model $2 --batch-size $3 --learners 1 --devices cpu --iterations 40 --warmup 3 2>&1 | tail -1 | awk -F'|' '{printf "%s img/s  ", $6}'
perf report -i /tmp/s.perf --no-children --sort sym 2>/dev/null | grep -v '^#' | python3 -c "
import sys
m=0;pad=0;cl=0;k=0;w=0
for l in sys.stdin:
    f=l.split(None,2)
    if len(f)<3: continue
    v=float(f[0].rstrip('%')); s=f[2]
    if 'memmove' in s or 'memcpy' in s: m+=v
    if 'pad_into' in s: pad+=v
    if 'backward_params_direct' in s: cl+=v
    if 'run_padded' in s or 'params_avx' in s: k+=v
    if any(x in s for x in ['clock_gettime','begin_short_backtrace','Team::run','sched_yield','__schedule','sub_timespec','Timespec']): w+=v
print('memmove %.2f  pad_into %.2f  params-closure %.2f  (copies %.2f)  kernels %.1f  waiting %.1f'%(m,pad,cl,m+pad+cl,k,w))
"
