for r in 1 2 3 4; do for isa in avx512 avx2; do for l in 1 2; do for b in new3 new4; do
v=$(CROSSBOW_CPU_ISA=$isa /tmp/cb-$b bench --model lenet5 --batch-size 32 --learners $l --devices cpu --iterations 400 --warmup 20 2>&1 | tail -1 | awk -F'|' '{print $6}')
echo "$r $isa l$l $b $v"
done; done; done; done
