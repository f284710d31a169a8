#!/usr/bin/env bash
# Issue 14, wave 6: before/after A/B of crossbow's own step, then crossbow against PyTorch,
# then peak resident memory. BASE = release build of e26ea73 (before the direct kernels),
# NEW = release build of this commit; PY = a Python with torch.
set -u
BASE=${BASE:-/tmp/crossbow-base}; NEW=${NEW:-/tmp/crossbow-new}; PY=${PY:-/tmp/torchenv/bin/python}
OUT=${OUT:-docs/results/cpu-wave6}
cd "$(dirname "$0")/../../.."
for r in 1 2; do
  for bin in "$BASE" "$NEW"; do
    echo "== round $r $bin load $(cut -d' ' -f1 /proc/loadavg)"
    "$bin" bench --model lenet5,resnet20,resnet32 --batch-size 16,32,128 --learners 1,2 --devices cpu --threads 2 --iterations 20 --warmup 3 --json "$OUT/ab-$(basename "$bin")-$r.json" | grep '^| [lr]'
  done
done
echo "== compare load $(cut -d' ' -f1 /proc/loadavg)"
python3 benches/peers/compare.py --python "$PY" --crossbow "$NEW" --rounds 3 --json "$OUT/peers.json"
echo "== rss load $(cut -d' ' -f1 /proc/loadavg)"
/usr/bin/time -v "$NEW" bench --model resnet32 --batch-size 32 --learners 2 --devices cpu --threads 2 --iterations 20 --warmup 3 2>&1 | grep -E "Maximum resident|^\| resnet"
/usr/bin/time -v "$PY" benches/peers/pytorch_bench.py --model resnet32 --batch-size 32 --threads 2 --iterations 20 2>&1 | grep -E "Maximum resident|img"
echo "== end load $(cut -d' ' -f1 /proc/loadavg)"
