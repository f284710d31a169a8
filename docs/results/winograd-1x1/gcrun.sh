#!/bin/bash
# gcrun.sh ISA FILTER BIN... : prints name and median throughput
isa=$1; f=$2; shift 2
for b in "$@"; do
  CROSSBOW_CPU_ISA=$isa $b --bench "$f" --noplot 2>&1 | python3 -c '
import sys,re
name=None
for l in sys.stdin:
    m=re.match(r"^(conv2d\S+/\S+ .*?)(\s{2,}|$)", l)
    if m and "time:" not in l: name=m.group(1).strip()
    if "thrpt:" in l and "[" in l and "%" not in l and name:
        v=re.findall(r"([0-9.]+) ([GM])elem/s", l)
        print(f"{sys.argv[1]:>12} {name:45s} {v[1][0]} {v[1][1]}"); name=None
' $(basename $b)
done
