#!/usr/bin/env bash
# ab.sh BASE_BIN NEW_BIN MODEL BATCH N: N pairs of `crossbow bench --tuner` runs (AVX2 path,
# 2 threads), the two binaries in alternating order, each run beside the noisy neighbour
# hog.py (HOG=0: without it). Prints the learners picked, the median images/s of the ten
# iterations after settling, the iterations to settle and the tuner's decisions.
set -u
BASE=$1; NEW=$2; M=$3; B=$4; N=$5
HERE=$(cd "$(dirname "$0")" && pwd)
J=$(mktemp)
for i in $(seq 1 "$N"); do
  if [ $((i % 2)) = 1 ]; then order="base confirm"; else order="confirm base"; fi
  for v in $order; do
    bin=$BASE; [ "$v" = confirm ] && bin=$NEW
    H=
    if [ "${HOG:-1}" = 1 ]; then python3 "$HERE/hog.py" $((i * 7)) 300 & H=$!; fi
    CROSSBOW_CPU_ISA=avx2 timeout 300 "$bin" bench --model "$M" --batch-size "$B" --learners 1 --devices cpu \
      --threads 2 --iterations 12 --tuner --json "$J" > /dev/null 2>&1
    [ -n "$H" ] && { kill "$H"; wait "$H" 2>/dev/null; }
    python3 -c "
import json;d=json.load(open('$J'));t=d['tuner'][0];print('$v $M $B pair $i: picked',t['picked'],round(t['images_per_sec']),'settle',t['iterations_to_settle'], ' | '.join(x.split('->')[0].split(': ',2)[2] for x in t['decisions']))"
  done
done
rm -f "$J"
