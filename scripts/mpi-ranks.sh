#!/usr/bin/env bash
# 1 process against 2 MPI ranks on this machine (BENCHMARKS.md §10): the same 2 learners on
# the same 2 cores, either as 2 CPU devices of 1 thread in one process (`--devices cpu:2`) or
# as 2 ranks of 1 CPU device of 1 thread (`mpirun -np 2 ... --devices cpu:1`). Alternating
# rounds (the machine is shared and noisy); prints one line per run and the medians.
#
#   cargo build --release -p crossbow-cli --features mpi
#   scripts/mpi-ranks.sh [ROUNDS] [OUT_DIR]        # defaults: 3, docs/results/mpi-ranks
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
out=${2:-docs/results/mpi-ranks}
bin=target/release/crossbow
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
tsv="$out/runs.tsv"
echo -e "model\tlayout\tround\timages_per_s\tallreduce_median_ms\tload1_before" >"$tsv"
common=(train --dataset synthetic-shapes --train-size 1600 --test-size 100 --batch-size 16
        --epochs 1 --eval-every 100 --bn-eval mean --threads 1 --workers 1 --learners-per-device 1 --quiet)
for model in resnet20 resnet32; do
    for r in $(seq 1 "$rounds"); do
        for layout in one-process two-ranks; do
            m="$out/$model-$layout-$r.jsonl"
            load=$(cut -d' ' -f1 /proc/loadavg)
            if [ "$layout" = one-process ]; then
                "$bin" "${common[@]}" --model "$model" --devices cpu:2 --metrics "$m" >/dev/null
            else
                mpirun --oversubscribe -np 2 "$bin" "${common[@]}" --model "$model" --devices cpu:1 --metrics "$m" >/dev/null
            fi
            ips=$(grep '"event":"end"' "$m" | python3 -c 'import json,sys; print("%.1f" % json.loads(sys.stdin.read())["images_per_sec"])')
            ar=$({ grep '"event":"rank_allreduce"' "$m" || true; } | python3 -c 'import json,sys; t=sys.stdin.read().strip(); print("%.3f" % (1e3*json.loads(t)["median_seconds"]) if t else "-")')
            echo -e "$model\t$layout\t$r\t$ips\t$ar\t$load" | tee -a "$tsv"
            rm -f "$out"/*.jsonl
        done
    done
done
python3 - "$tsv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
for model in ("resnet20", "resnet32"):
    med = {}
    for layout in ("one-process", "two-ranks"):
        rs = [r for r in rows if r["model"] == model and r["layout"] == layout]
        ips = statistics.median(float(r["images_per_s"]) for r in rs)
        ar = [float(r["allreduce_median_ms"]) for r in rs if r["allreduce_median_ms"] != "-"]
        med[layout] = ips
        print(f"{model}\t{layout}\tmedian images/s {ips:.1f}\tall-reduce median {statistics.median(ar) if ar else float('nan'):.3f} ms\tloads {[r['load1_before'] for r in rs]}")
    print(f"{model}\ttwo-ranks / one-process: {med['two-ranks'] / med['one-process']:.3f}")
PY
