#!/bin/bash
# Issue 27: both ISAs against PyTorch (NCHW and channels_last) on a Zen 4 (AVX-512) host, build
# 8716fc2 (LeNet-5 on the AVX2 kernels where they pad less, batch-norm sums in memory order, ReLU split).
# Usage: run.sh OUT (its files are here as run1-* and run2-*).
out=${1:?usage: run.sh OUT}
cd /work/main
for isa in avx2 avx512; do
  python3 benches/peers/compare.py --python ~/torchenv/bin/python --rounds 3 --iterations 12 \
    --crossbow /work/exp/peers-isa-5/crossbow --peak-flops /work/exp/peers-isa-5/peak-flops \
    --crossbow-isa $isa --json $out/compare-$isa.json \
    > $out/compare-$isa.md 2> $out/compare-$isa.log
done
echo done > $out/DONE
