#!/bin/bash
# Issue 27: both ISAs against PyTorch (NCHW and channels_last), the experiment paused meanwhile.
cd /work/main
pkill -STOP -f /work/exp/cb
for isa in avx2 avx512; do
  python3 benches/peers/compare.py --python ~/torchenv/bin/python --rounds 3 --iterations 12 \
    --crossbow /work/exp/peers27/crossbow --peak-flops /work/exp/peers27/peak-flops \
    --crossbow-isa $isa --json /work/exp/peers27/compare-$isa.json \
    > /work/exp/peers27/compare-$isa.md 2> /work/exp/peers27/compare-$isa.log
done
pkill -CONT -f /work/exp/cb
echo done > /work/exp/peers27/DONE
