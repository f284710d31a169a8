#!/usr/bin/env bash
# GPU check: runs, on a GPU machine (NVIDIA driver, PyTorch's pip CUDA libraries, no Rust,
# no network), the binaries scripts/build-gpu-bundle.sh built on the CPU machine, then
# prints one summary table. Run from the repository root (or anywhere: it cd's there):
#
#   scripts/gpu-check.sh [BUNDLE_DIR]        (default .gpu-bin)
#
# Steps:
#   1. LD_LIBRARY_PATH from PyTorch's pip-installed CUDA libraries: every
#      site-packages/nvidia/*/lib (cu12 layout: cuda_nvrtc, cublas, cudnn, ...; cu13 layout:
#      cu13/lib); the local .nvrtc/ venv's NVRTC as a last resort. `nvidia-smi`.
#   2. kernels-unit nvrtc: this machine's NVRTC compiles every kernel for sm_80 and sm_90.
#   3. With CROSSBOW_REQUIRE_GPU=1: kernels-unit ::cuda — every op's tests (references,
#      finite differences, agreement with the CPU) on the GPU, the `cuda` and `cuda_no_cudnn`
#      variants of `test_backends!` (cuDNN and fallback paths); then gpu-tests: ResNet
#      shapes, streams, copies, caches. A fresh kernel cache directory, so kernels are
#      compiled here, once.
#   4. Throughput: one learner, ResNet-32, batch 32 and 128 (`crossbow bench`, see
#      bench_images_per_sec below; skipped when the bundle has no crossbow binary).
#
# Without a driver (a dry run on the CPU machine) every GPU part is skipped, saying so, and
# the script still exits 0. Exit status: 0 = everything that ran passed (GPU parts may have
# been skipped for lack of a driver); 1 = a test or benchmark failed; 2 = the bundle is
# missing or incomplete.
#
# Knobs (environment): PYTHON (python3), STEP_TIMEOUT (seconds per step, 900), TEST_THREADS
# (test harness threads, default: the harness's), BENCH_ITERATIONS (20), BENCH_WARMUP (5),
# CROSSBOW_BIN (the CLI to benchmark, default BUNDLE/crossbow).
set -uo pipefail
cd "$(dirname "$0")/.."

BUNDLE=${1:-${BUNDLE:-.gpu-bin}}
STEP_TIMEOUT=${STEP_TIMEOUT:-900}
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/crossbow-gpu-check.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT

declare -a ROWS=()
FAILED=0
row() { ROWS+=("$1|$2"); }
hr() { printf '\n== %s\n' "$*"; }

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
if [ -n "$sp" ] && [ -d "$sp/nvidia" ]; then
    echo "PyTorch $("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null) in $sp"
    for d in "$sp"/nvidia/*/lib; do
        [ -d "$d" ] && libs="$libs:$d"
    done
else
    echo "no PyTorch with pip CUDA libraries found (python: $PY)"
fi
for d in .nvrtc/lib/python3*/site-packages/nvidia/cu13/lib; do
    [ -d "$d" ] && libs="$libs:$PWD/$d"
done
export LD_LIBRARY_PATH="${libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
for lib in libcuda.so.1 libnvrtc.so libcublas.so libcudnn.so.9; do
    hit=$(ldconfig -p 2>/dev/null | grep -m1 -o "/.*${lib%.so*}\.so[.0-9]*$" || true)
    for d in ${LD_LIBRARY_PATH//:/ }; do
        [ -z "$hit" ] && hit=$(ls "$d"/${lib%.so*}.so* 2>/dev/null | head -1)
    done
    printf '  %-14s %s\n' "$lib" "${hit:-not found}"
done

hr "nvidia-smi"
GPU=0
if command -v nvidia-smi >/dev/null && nvidia-smi; then
    GPU=1
    gpu_name=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
    row "GPU" "${gpu_name:-present}"
else
    echo "no NVIDIA driver / GPU: GPU parts are skipped (dry run)"
    row "GPU" "none: GPU parts skipped (dry run)"
fi

# Runs a test binary, records "passed/failed" counts; $1 = label, rest = command.
run_tests() {
    local label=$1
    shift
    local log="$SCRATCH/$(echo "$label" | tr -c 'a-zA-Z0-9' _).log"
    timeout "$STEP_TIMEOUT" "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    local passed failed skipped
    passed=$(grep -Eo '[0-9]+ passed' "$log" | awk '{s += $1} END {print s + 0}')
    failed=$(grep -Eo '[0-9]+ failed' "$log" | awk '{s += $1} END {print s + 0}')
    skipped=$(grep -c 'skipped:' "$log")
    local result="$passed passed, $failed failed"
    [ "$skipped" -gt 0 ] && result="$result ($skipped skipped)"
    if [ "$rc" -ne 0 ]; then
        FAILED=1
        [ "$failed" -eq 0 ] && result="$result; exit status $rc$([ "$rc" -eq 124 ] && echo ' (timed out)')"
    fi
    row "$label" "$result"
}

# ---- 2. NVRTC on this machine -------------------------------------------------------------
hr "NVRTC compiles every kernel (sm_80, sm_90) with this machine's libnvrtc"
if [ "$GPU" = 1 ]; then
    CROSSBOW_REQUIRE_NVRTC=1 run_tests "NVRTC compile (sm_80, sm_90)" "$BUNDLE/kernels-unit" nvrtc
else
    run_tests "NVRTC compile (sm_80, sm_90)" "$BUNDLE/kernels-unit" nvrtc
fi

# ---- 3. GPU tests -------------------------------------------------------------------------
hr "GPU tests (every op's tests on the GPU, cuDNN and fallback paths; ResNet shapes, streams, caches)"
export CROSSBOW_KERNEL_CACHE="$SCRATCH/kernel-cache"
threads=()
[ -n "${TEST_THREADS:-}" ] && threads=(--test-threads "$TEST_THREADS")
if [ "$GPU" = 1 ]; then
    # NVIDIA_TF32_OVERRIDE=0: no TF32 anywhere, whatever the libraries' defaults.
    NVIDIA_TF32_OVERRIDE=0 CROSSBOW_REQUIRE_GPU=1 run_tests "GPU op tests (every op, both paths)" \
        "$BUNDLE/kernels-unit" ::cuda --show-output "${threads[@]}"
    NVIDIA_TF32_OVERRIDE=0 CROSSBOW_REQUIRE_GPU=1 run_tests "GPU tests" "$BUNDLE/gpu-tests" --show-output "${threads[@]}"
else
    run_tests "GPU op tests (no driver: all skip)" "$BUNDLE/kernels-unit" ::cuda --show-output "${threads[@]}"
    run_tests "GPU tests (no driver: all skip)" "$BUNDLE/gpu-tests" --show-output "${threads[@]}"
fi

# ---- 4. throughput ------------------------------------------------------------------------
# The one place that knows the CLI: `crossbow bench` for one configuration, printing its
# images/s (nothing on failure). Adapt here if the CLI changes.
CROSSBOW_BIN=${CROSSBOW_BIN:-$BUNDLE/crossbow}
BENCH_FLAGS=(--model --batch-size --learners --devices --iterations --warmup --json)
bench_images_per_sec() { # model batch devices iterations warmup
    local json="$SCRATCH/bench-$1-$2-${3//[:,]/_}.json"
    timeout "$STEP_TIMEOUT" "$CROSSBOW_BIN" bench --model "$1" --batch-size "$2" --learners 1 \
        --devices "$3" --iterations "$4" --warmup "$5" --json "$json" >&2 || return 1
    "$PY" -c 'import json, sys; print("%.1f" % json.load(open(sys.argv[1]))["rows"][0]["images_per_sec"])' "$json" 2>/dev/null ||
        grep -o '"images_per_sec": *[0-9.]*' "$json" | head -1 | grep -o '[0-9.]*$'
}

hr "throughput: one learner, ResNet-32"
cli_ok=0
if [ -x "$CROSSBOW_BIN" ]; then
    help=$("$CROSSBOW_BIN" bench --help 2>&1) && cli_ok=1
    for f in "${BENCH_FLAGS[@]}"; do
        grep -q -- "$f" <<<"$help" || { cli_ok=0; echo "crossbow bench has no $f flag: adapt bench_images_per_sec in $0"; }
    done
fi
for batch in 32 128; do
    label="ResNet-32 batch $batch, 1 learner"
    if [ ! -x "$CROSSBOW_BIN" ]; then
        row "$label" "skipped: no crossbow binary in the bundle"
    elif [ "$cli_ok" = 0 ]; then
        FAILED=1
        row "$label" "FAILED: crossbow bench does not take the expected flags"
    elif [ "$GPU" = 0 ]; then
        # Dry run: the same command on the CPU, 2 iterations, to check the CLI and parsing.
        if ips=$(bench_images_per_sec resnet32 "$batch" cpu 2 1) && [ -n "$ips" ]; then
            row "$label" "skipped: no GPU (CPU smoke run of the same command: $ips images/s)"
        else
            FAILED=1
            row "$label" "FAILED: the CPU smoke run of crossbow bench (see the output above)"
        fi
    elif ips=$(bench_images_per_sec resnet32 "$batch" cuda:0 "${BENCH_ITERATIONS:-20}" "${BENCH_WARMUP:-5}") && [ -n "$ips" ]; then
        row "$label" "$ips images/s"
    else
        FAILED=1
        row "$label" "FAILED (see the output above)"
    fi
done

# ---- summary ------------------------------------------------------------------------------
hr "summary"
printf '| %-40s | %s\n' "step" "result"
printf '|%s|%s\n' "$(printf -- '-%.0s' {1..42})" "$(printf -- '-%.0s' {1..50})"
for r in "${ROWS[@]}"; do
    printf '| %-40s | %s\n' "${r%%|*}" "${r#*|}"
done
if [ "$GPU" = 0 ]; then
    echo "GPU parts were skipped: no NVIDIA driver on this machine (dry run)."
fi
if [ "$FAILED" -ne 0 ]; then
    echo "gpu-check: FAILED"
    exit 1
fi
echo "gpu-check: OK"
exit 0
