#!/bin/bash
# Issue 27: both ISAs against PyTorch (NCHW and channels_last) on a Zen 4 (AVX-512) host, with
# everything since fe8a0d3: ragged rows, the strided direct kernels, phases, the op team.
cd /work/main
for isa in avx2 avx512; do
  python3 benches/peers/compare.py --python ~/torchenv/bin/python --rounds 3 --iterations 12 \
    --crossbow /work/exp/peers-isa-4/crossbow --peak-flops /work/exp/peers-isa-4/peak-flops \
    --crossbow-isa $isa --json /work/exp/peers-isa-4/compare-$isa.json \
    > /work/exp/peers-isa-4/compare-$isa.md 2> /work/exp/peers-isa-4/compare-$isa.log
done
echo done > /work/exp/peers-isa-4/DONE
