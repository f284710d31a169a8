#!/bin/bash
# Issue 27: both ISAs against PyTorch (NCHW and channels_last) on a Zen 4 (AVX-512) host, with
# everything since fe8a0d3: ragged rows, the strided direct kernels, phases, the op team.
# Usage: run.sh OUT (run 1 wrote to /work/exp/peers-isa-4, run 2 to /work/exp/peers-isa-4b;
# their files are here as run1-* and run2-*).
out=${1:?usage: run.sh OUT}
cd /work/main
for isa in avx2 avx512; do
  python3 benches/peers/compare.py --python ~/torchenv/bin/python --rounds 3 --iterations 12 \
    --crossbow /work/exp/peers-isa-4/crossbow --peak-flops /work/exp/peers-isa-4/peak-flops \
    --crossbow-isa $isa --json $out/compare-$isa.json \
    > $out/compare-$isa.md 2> $out/compare-$isa.log
done
echo done > $out/DONE
