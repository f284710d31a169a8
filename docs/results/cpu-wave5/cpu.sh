#!/bin/bash
# CPU time (user) of a fixed amount of work, one learner on one thread, alternating base/after.
for rep in 1 2 3; do for m in resnet20 resnet32; do for bin in crossbow-base-cpu crossbow-cpu-final; do
  /usr/bin/time -f "$m $bin user %U wall %e load $(cut -d' ' -f1 /proc/loadavg)" /tmp/$bin bench --model $m --batch-size 32 --learners 1 --devices cpu --threads 1 --iterations 10 --warmup 1 2>&1 | grep -E 'user|^\| resnet' | awk '{printf "%s ", $0} END {print ""}' | sed 's/| cpu:1 (1 threads each)//'
done; done; done
