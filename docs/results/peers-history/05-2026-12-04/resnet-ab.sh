# A/B: /tmp/cb-base (74cf059) vs /tmp/cb-new3, alternating; prints isa model bin img/s per round
for r in 1 2 3 4; do for isa in avx512 avx2; do for m in resnet20 resnet32; do for b in base new3; do
v=$(CROSSBOW_CPU_ISA=$isa /tmp/cb-$b bench --model $m --batch-size 32 --learners 1 --devices cpu --iterations 40 --warmup 3 2>&1 | tail -1 | awk -F'|' '{print $6}')
echo "$r $isa $m $b $v"
done; done; done; done
