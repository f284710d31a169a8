#!/bin/bash
# Alternating before/after, one model at a time; load average before each run.
cd /tmp/cpuprof
for round in 1 2; do
for m in resnet20 resnet32; do for bin in crossbow-base-cpu crossbow-cpu-final; do
  echo "## round $round $bin $m $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/$bin bench --model $m --batch-size 16,32,128 --learners 1,2 --devices cpu --threads 2 2>&1 | grep '^|'
done; done
done
echo "## end $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
