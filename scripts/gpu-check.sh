#!/usr/bin/env bash
# GPU check: runs, on a GPU machine (NVIDIA driver, PyTorch's pip CUDA libraries, no Rust,
# no network), the binaries scripts/build-gpu-bundle.sh built on the CPU machine, then
# prints one summary table. One command, planned to take under 8 minutes on one H200, no
# step longer than STEP_TIMEOUT (default 540 s). Run from anywhere (it cd's to the root):
#
#   scripts/gpu-check.sh [BUNDLE_DIR]        (default .gpu-bin)
#
# Steps:
#   1. LD_LIBRARY_PATH from PyTorch's pip-installed CUDA libraries (every
#      site-packages/nvidia/*/lib, cu12 and cu13 layouts; a libnccl.so link to libnccl.so.2
#      in a scratch directory); the local .nvrtc/ venv's NVRTC as a last resort. nvidia-smi.
#   2. `crossbow doctor`: driver, libraries actually loaded, GPUs, cuDNN, every op against
#      the CPU on every GPU (pass/fail table).
#   3. kernels-unit nvrtc: this machine's NVRTC compiles every kernel for sm_80 and sm_90.
#   4. With CROSSBOW_REQUIRE_GPU=1 (a skip fails), and CROSSBOW_REQUIRE_CUDNN=1 when
#      libcudnn.so.9 is on the path: every op's tests on the GPU (`::cuda`,
#      `::cuda_no_cudnn`), one process per op folder; then each test of gpu-tests (streams,
#      ordering with its negative control, module cache, offsets, drops, ResNet shapes) in
#      its own process, so one fault cannot abort the others.
#   5. engine-tests (their `::cuda` and `::cuda_async` variants, ignored by default; the
#      `::emu` ones pass with `--ignored` but take minutes): 4 learners with SMA, S-SGD, EA-SGD, independent on a small ResNet against the
#      CPU engine and a synchronous-launch run; learners added and removed — under
#      compute-sanitizer (memcheck) when it is installed.
#   5b. NCCL: library, version and ids; its all-reduce over every GPU against the host
#      all-reduce; the engine with --all-reduce nccl against host; two ranks of one GPU each
#      (CROSSBOW_REQUIRE_NCCL=1 when the libnccl.so link exists on a GPU machine).
#   6. Throughput: ResNet-32 at batch 32 and 128, learners 1, 2, 4, 8 and the tuner's
#      choice (`crossbow bench`), beside PyTorch eager and torch.compile on the same GPU
#      (benches/peers/pytorch_gpu_bench.py), with ratios.
#
# Without a driver (a dry run on the CPU machine) every GPU part is skipped, saying so, the
# throughput step runs the same commands on the CPU with 1 iteration (to check the CLI, the
# PyTorch script and the table), and the script exits 0. Exit status: 0 = everything that
# ran passed; 1 = a step failed; 2 = the bundle is missing or incomplete.
#
# Knobs (environment): PYTHON (python3), STEP_TIMEOUT (540), BENCH_ITERATIONS (30),
# BENCH_WARMUP (5), PYTORCH_MODES (eager,compile), CROSSBOW_BIN (default BUNDLE/crossbow).
set -uo pipefail
cd "$(dirname "$0")/.."

BUNDLE=${1:-${BUNDLE:-.gpu-bin}}
STEP_TIMEOUT=${STEP_TIMEOUT:-540}
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/crossbow-gpu-check.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
T0=$(date +%s)

declare -a ROWS=()
FAILED=0
row() { ROWS+=("$1|$2|$3"); }
hr() { printf '\n== [%3ds] %s\n' "$(($(date +%s) - T0))" "$*"; }

for f in gpu-tests kernels-unit; do
    if [ ! -x "$BUNDLE/$f" ]; then
        echo "gpu-check: $BUNDLE/$f is missing; build the bundle on the CPU machine with scripts/build-gpu-bundle.sh" >&2
        exit 2
    fi
done
[ -f "$BUNDLE/MANIFEST" ] && { hr "bundle $BUNDLE"; cat "$BUNDLE/MANIFEST"; }

# ---- 1. libraries and the GPU -------------------------------------------------------------
hr "CUDA libraries"
PY=${PYTHON:-python3}
libs=""
sp=$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null || true)
TORCH_OK=0
if [ -n "$sp" ]; then
    TORCH_OK=1
    echo "PyTorch $("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null) in $sp"
fi
if [ -n "$sp" ] && [ -d "$sp/nvidia" ]; then
    for d in "$sp"/nvidia/*/lib; do
        [ -d "$d" ] && libs="$libs:$d"
    done
    nccl=$(ls "$sp"/nvidia/*/lib/libnccl.so.2 2>/dev/null | head -1)
    if [ -n "$nccl" ]; then
        mkdir -p "$SCRATCH/nccl" && ln -sf "$nccl" "$SCRATCH/nccl/libnccl.so" && libs="$libs:$SCRATCH/nccl"
    fi
else
    echo "no PyTorch with pip CUDA libraries found (python: $PY)"
fi
for d in .nvrtc/lib/python3*/site-packages/nvidia/cu13/lib; do
    [ -d "$d" ] && libs="$libs:$PWD/$d"
done
export LD_LIBRARY_PATH="${libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

hr "nvidia-smi"
GPU=0
if command -v nvidia-smi >/dev/null && nvidia-smi; then
    GPU=1
    gpu_name=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
    row "GPU" "${gpu_name:-present}" 0
else
    echo "no NVIDIA driver / GPU: GPU parts are skipped (dry run)"
    row "GPU" "none: GPU parts skipped (dry run)" 0
fi
CUDNN_ENV=()
if [ "$GPU" = 1 ]; then
    for d in ${LD_LIBRARY_PATH//:/ }; do
        [ -e "$d/libcudnn.so.9" ] && CUDNN_ENV=(CROSSBOW_REQUIRE_CUDNN=1)
    done
fi

# Runs a command, appends "passed/failed" counts to the step's totals; $1 = label, rest =
# command. Sets STEP_RC.
P=0 F=0 S=0 STEP_RC=0
run_counted() {
    local label=$1
    shift
    local log="$SCRATCH/$(echo "$label" | tr -c 'a-zA-Z0-9' _).log"
    timeout "$STEP_TIMEOUT" "$@" >"$log" 2>&1
    STEP_RC=$?
    cat "$log"
    P=$((P + $(grep -Eo '[0-9]+ passed' "$log" | awk '{s += $1} END {print s + 0}')))
    F=$((F + $(grep -Eo '[0-9]+ failed' "$log" | awk '{s += $1} END {print s + 0}')))
    S=$((S + $(grep -c 'skipped:' "$log")))
    if [ "$STEP_RC" -ne 0 ]; then
        FAILED=1
        echo "gpu-check: $label: exit status $STEP_RC$([ "$STEP_RC" -eq 124 ] && echo ' (timed out)')"
        FAULTS+=("$label")
    fi
}
step_row() { # label start
    local r="$P passed, $F failed"
    [ "$S" -gt 0 ] && r="$r ($S skipped)"
    [ "${#FAULTS[@]}" -gt 0 ] && r="$r; failing: ${FAULTS[*]}"
    row "$1" "$r" $(($(date +%s) - $2))
    P=0 F=0 S=0 FAULTS=()
}
FAULTS=()

# ---- 2. doctor ----------------------------------------------------------------------------
CROSSBOW_BIN=${CROSSBOW_BIN:-$BUNDLE/crossbow}
hr "crossbow doctor"
t=$(date +%s)
if [ -x "$CROSSBOW_BIN" ]; then
    timeout "$STEP_TIMEOUT" env "${CUDNN_ENV[@]}" "$CROSSBOW_BIN" doctor
    rc=$?
    if [ "$rc" -eq 0 ]; then row "doctor" "passed" $(($(date +%s) - t)); else
        FAILED=1
        row "doctor" "FAILED (exit status $rc; the failing ops are named above)" $(($(date +%s) - t))
    fi
else
    row "doctor" "skipped: no crossbow binary in the bundle" 0
fi

# ---- 3. NVRTC on this machine -------------------------------------------------------------
hr "NVRTC compiles every kernel (sm_80, sm_90) with this machine's libnvrtc"
t=$(date +%s)
if [ "$GPU" = 1 ]; then
    CROSSBOW_REQUIRE_NVRTC=1 run_counted "nvrtc" "$BUNDLE/kernels-unit" nvrtc
else
    run_counted "nvrtc" "$BUNDLE/kernels-unit" nvrtc
fi
step_row "NVRTC compile (sm_80, sm_90)" "$t"

# ---- 4. GPU tests, one process per group ------------------------------------------------
export CROSSBOW_KERNEL_CACHE="$SCRATCH/kernel-cache"
GPU_ENV=(NVIDIA_TF32_OVERRIDE=0)
[ "$GPU" = 1 ] && GPU_ENV+=(CROSSBOW_REQUIRE_GPU=1 "${CUDNN_ENV[@]}")

hr "every op's tests on the GPU (cuDNN and fallback paths), one process per op folder"
t=$(date +%s)
groups=$("$BUNDLE/kernels-unit" --list --format terse 2>/dev/null | sed -n 's/^\(.*::cuda[a-z_]*\): test$/\1/p' |
    cut -d: -f1 | sort -u)
for g in $groups; do
    names=$("$BUNDLE/kernels-unit" --list --format terse 2>/dev/null |
        sed -n "s/^\($g::.*::cuda[a-z_]*\): test\$/\1/p")
    # shellcheck disable=SC2086
    run_counted "$g" env "${GPU_ENV[@]}" "$BUNDLE/kernels-unit" --exact $names --test-threads 1 --nocapture
done
step_row "GPU op tests (every op, both paths)" "$t"

hr "gpu-tests, one process per test"
t=$(date +%s)
for name in $("$BUNDLE/gpu-tests" --list --format terse 2>/dev/null | sed -n 's/: test$//p'); do
    run_counted "$name" env "${GPU_ENV[@]}" "$BUNDLE/gpu-tests" --exact "$name" --nocapture
done
step_row "GPU tests (streams, caches, offsets, drops)" "$t"

# ---- 5. engine tests ------------------------------------------------------------------------
hr "engine on the GPU: 4 learners x SMA, S-SGD, EA-SGD, independent; learners added and removed"
t=$(date +%s)
if [ -x "$BUNDLE/engine-tests" ]; then
    run_counted "engine" env "${GPU_ENV[@]}" "$BUNDLE/engine-tests" four_learners_match_the_cpu_engine::cuda --include-ignored --nocapture
    sanitizer=()
    if [ "$GPU" = 1 ] && command -v compute-sanitizer >/dev/null; then
        sanitizer=(compute-sanitizer --tool memcheck --error-exitcode 3)
    fi
    run_counted "tuner${sanitizer:+ (compute-sanitizer)}" env "${GPU_ENV[@]}" "${sanitizer[@]}" \
        "$BUNDLE/engine-tests" tuner_adds_and_removes_learners::cuda --include-ignored --nocapture
    step_row "engine tests${sanitizer:+ (tuner under compute-sanitizer)}" "$t"
else
    row "engine tests" "skipped: no engine-tests binary in the bundle" 0
fi

# ---- 5b. NCCL ------------------------------------------------------------------------------
# NCCL through the libnccl.so link made in step 1: loading and version (kernels-unit
# cuda::nccl), then, one process per test (replica-unit engine::nccl): the all-reduce over
# every GPU against the host all-reduce (bit-identical on every GPU, within the order bound of
# the host's sum), the engine with --all-reduce nccl against host, and two ranks with one GPU
# each (on a one-GPU machine the same GPU: NCCL's refusal is reported, not a failure).
hr "NCCL: loading, all-reduce vs host, engine nccl vs host, two ranks of one GPU each"
t=$(date +%s)
NCCL_ENV=("${GPU_ENV[@]}")
if [ "$GPU" = 1 ] && [ -e "$SCRATCH/nccl/libnccl.so" ]; then
    NCCL_ENV+=(CROSSBOW_REQUIRE_NCCL=1)
    [ "$TORCH_OK" = 1 ] && echo "PyTorch's NCCL: $("$PY" -c 'import torch; print(".".join(map(str, torch.cuda.nccl.version())))' 2>/dev/null)"
fi
run_counted "nccl-load" env "${NCCL_ENV[@]}" "$BUNDLE/kernels-unit" cuda::nccl --test-threads 1 --nocapture
if [ -x "$BUNDLE/replica-unit" ]; then
    for name in $("$BUNDLE/replica-unit" --list --format terse 2>/dev/null | sed -n 's/^\(engine::nccl::.*\): test$/\1/p'); do
        run_counted "$name" env "${NCCL_ENV[@]}" "$BUNDLE/replica-unit" --exact "$name" --nocapture
    done
else
    echo "skipped: no replica-unit binary in the bundle"
fi
step_row "NCCL (load, all-reduce, engine, 2 ranks)" "$t"

# ---- 6. throughput against PyTorch --------------------------------------------------------
# crossbow bench for one batch size: learners 1, 2, 4, 8 and the tuner (max 8); writes JSON.
bench_crossbow() { # batch devices iterations warmup json learners max-learners
    timeout "$STEP_TIMEOUT" "$CROSSBOW_BIN" bench --model resnet32 --batch-size "$1" --learners "$6" \
        --devices "$2" --iterations "$3" --warmup "$4" --tuner --max-learners "$7" --json "$5" >&2
}
# PyTorch eager / torch.compile for one batch size: JSON lines.
bench_pytorch() { # batch device iterations warmup modes out
    timeout "$STEP_TIMEOUT" "$PY" benches/peers/pytorch_gpu_bench.py --model resnet32 --batch-size "$1" \
        --device "$2" --iterations "$3" --warmup "$4" --modes "$5" >"$6"
}
hr "throughput: ResNet-32, crossbow learners 1/2/4/8 and the tuner's choice vs PyTorch eager and torch.compile"
t=$(date +%s)
if [ ! -x "$CROSSBOW_BIN" ]; then
    row "throughput" "skipped: no crossbow binary in the bundle" 0
else
    if [ "$GPU" = 1 ]; then
        dev=cuda:0 tdev=cuda it=${BENCH_ITERATIONS:-30} wu=${BENCH_WARMUP:-5} modes=${PYTORCH_MODES:-eager,compile}
        learners=1,2,4,8 maxl=8
    else
        # Dry run: the same commands on the CPU, batch 32 only, 1 iteration, learners 1
        # and 2, eager only.
        dev=cpu tdev=cpu it=1 wu=0 modes=eager learners=1,2 maxl=2
    fi
    batches="32 128"
    [ "$GPU" = 0 ] && batches=32
    ok=1
    for b in $batches; do
        bench_crossbow "$b" "$dev" "$it" "$wu" "$SCRATCH/crossbow-$b.json" "$learners" "$maxl" || { ok=0; echo "gpu-check: crossbow bench failed (batch $b)"; }
        if [ "$TORCH_OK" = 1 ]; then
            bench_pytorch "$b" "$tdev" "$it" "$wu" "$modes" "$SCRATCH/pytorch-$b.jsonl" ||
                { ok=0; echo "gpu-check: pytorch_gpu_bench.py failed (batch $b)"; }
            cat "$SCRATCH/pytorch-$b.jsonl"
        fi
    done
    [ "$ok" = 1 ] || FAILED=1
    "$PY" - "$SCRATCH" "$GPU" $batches <<'EOF' | tee "$SCRATCH/table.md"
import json, os, sys
scratch, gpu, batches = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
print()
print("| batch | crossbow learners | crossbow img/s | PyTorch eager img/s | torch.compile img/s | vs eager | vs compile |")
print("|---:|---|---:|---:|---:|---:|---:|")
for b in batches:
    peers = {}
    try:
        for line in open(os.path.join(scratch, f"pytorch-{b}.jsonl")):
            r = json.loads(line)
            peers[r["mode"]] = r["images_per_sec"]
    except (OSError, ValueError):
        pass
    try:
        cb = json.load(open(os.path.join(scratch, f"crossbow-{b}.json")))
    except (OSError, ValueError):
        cb = {"rows": [], "tuner": []}
    rows = [(str(r["learners_per_device"]), r["images_per_sec"]) for r in cb.get("rows", [])]
    rows += [(f"tuner: {r['picked']}", r["images_per_sec"]) for r in cb.get("tuner", [])]
    e, c = peers.get("eager"), peers.get("compile")
    fmt = lambda v: "-" if v is None else f"{v:.0f}"
    ratio = lambda v, p: "-" if v is None or not p else f"{v / p:.2f}x"
    for name, v in rows:
        print(f"| {b} | {name} | {v:.0f} | {fmt(e)} | {fmt(c)} | {ratio(v, e)} | {ratio(v, c)} |")
if not gpu:
    print("\n(dry run on the CPU, 1 iteration: these figures are not GPU measurements)")
EOF
    row "throughput table" "$([ "$GPU" = 1 ] && echo measured || echo 'dry run on the CPU'); ok=$ok" $(($(date +%s) - t))
fi

# ---- summary ------------------------------------------------------------------------------
hr "summary"
printf '| %-44s | %6s | %s\n' "step" "secs" "result"
printf '|%s|%s|%s\n' "$(printf -- '-%.0s' {1..46})" "--------" "$(printf -- '-%.0s' {1..50})"
for r in "${ROWS[@]}"; do
    IFS='|' read -r a b c <<<"$r"
    printf '| %-44s | %6s | %s\n' "$a" "$c" "$b"
done
[ -f "$SCRATCH/table.md" ] && cat "$SCRATCH/table.md"
echo "total: $(($(date +%s) - T0)) s"
if [ "$GPU" = 0 ]; then
    echo "GPU parts were skipped: no NVIDIA driver on this machine (dry run)."
fi
if [ "$FAILED" -ne 0 ]; then
    echo "gpu-check: FAILED"
    exit 1
fi
echo "gpu-check: OK"
exit 0
