#!/bin/bash
# usage: wait.sh BIN MODEL BATCH  -> img/s and the idle/serial shares
perf record -q -e cpu-clock -o /tmp/w.perf $1 bench --model $2 --batch-size $3 --learners 1 --devices cpu --iterations 40 --warmup 3 2>&1 | tail -1 | awk -F'|' '{printf "%s img/s  ", $6}'
perf report -i /tmp/w.perf --no-children --sort sym 2>/dev/null | grep -v '^#' | python3 -c "
import sys
w=0;k=0;p=0
for l in sys.stdin:
    f=l.split(None,2)
    if len(f)<3: continue
    v=float(f[0].rstrip('%')); s=f[2]
    if any(x in s for x in ['clock_gettime','begin_short_backtrace','Team::run','sched_yield','__schedule','sub_timespec','do_syscall','Timespec']): w+=v
    if 'run_padded' in s or 'params_avx' in s or 'run_avx' in s: k+=v
print('waiting %.1f%%  conv kernels %.1f%%'%(w,k))
"
