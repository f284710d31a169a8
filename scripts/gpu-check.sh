#!/usr/bin/env bash
# GPU check: runs, on a GPU machine (NVIDIA driver, PyTorch's pip CUDA libraries, no Rust,
# no network), the binaries scripts/build-gpu-bundle.sh built on the CPU machine. Two calls,
# each planned to fit in 5 minutes on one H200 (the GPU machine kills a call at 300 s):
#
#   scripts/gpu-check.sh correctness [BUNDLE_DIR]   (default .gpu-bin)
#   scripts/gpu-check.sh speed [BUNDLE_DIR]
#
# (`scripts/gpu-check.sh [all] [BUNDLE_DIR]` runs both in one call, DEADLINE default 580.)
# BUNDLE_DIR is relative to the current directory or else to the repository root.
#
# correctness:
#   libraries  LD_LIBRARY_PATH from PyTorch's pip-installed CUDA libraries (every
#              site-packages/nvidia/*/lib, cu12 and cu13 layouts; a libnccl.so link to
#              libnccl.so.2 in a scratch directory), the local .nvrtc/ venv's NVRTC as a last
#              resort; nvidia-smi (a GPU is there when it works).
#   doctor     `crossbow doctor --require-gpu` (plain `crossbow doctor` without a GPU): driver,
#              libraries loaded, GPUs, cuDNN, every op against the CPU on every GPU.
#   NVRTC      kernels-unit nvrtc: this machine's NVRTC compiles every kernel for sm_80, sm_90.
#   op tests   every op's `::cuda` and `::cuda_no_cudnn` tests, one process per op folder.
#   gpu-tests  each GPU test of gpu-tests in its own process (streams, ordering with its
#              negative control, module cache, offsets, drops, ResNet shapes; not the
#              emulator test, which CI runs).
#   engine     replica-unit engine::tests::graphs_*::cuda_async (CUDA graphs against plain
#              launches, bit for bit), exec::tests::fused_chains_*::cuda (fused batch norm,
#              residual and ReLU against the plain program, bit for bit) and
#              lagged_*::cuda_async (losses read one iteration
#              late: the same parameter bits, losses shifted), engine-tests four_learners_match_the_cpu_engine and
#              tuner_adds_and_removes_learners, `::cuda` and `::cuda_async`, one process each.
#   sanitizer  tuner_adds_and_removes_learners::cuda under compute-sanitizer (memcheck) on the
#              fallback kernels (CROSSBOW_DISABLE_CUDNN=1), timeout SANITIZER_TIMEOUT.
#   NCCL       kernels-unit cuda::nccl (loading, version, ids), then each replica-unit
#              nccl:: test in its own process: all-reduce vs host, engine nccl vs host, two
#              ranks of one GPU each.
# speed:
#   libraries  as above.
#   crossbow/PyTorch b32, b128  ResNet-32, `crossbow bench` learners 1, 2, 4, 8 and the tuner's
#              choice; PyTorch eager and torch.compile on the same GPU
#              (benches/peers/pytorch_gpu_bench.py).
#   variants   b32 only, 12 iterations: `crossbow bench` with 8 learners, with
#              CROSSBOW_CUDA_GRAPHS=0, with CROSSBOW_STAGING_BUFFERS=1, then with
#              --loss-read=now: the table's rows "N, CUDA graphs off", "N, 1 staging buffer"
#              and "N, loss read every iteration" (what each of the three brings).
#   SMA update sync-step-bench (criterion, SYNC_STEP_QUICK=1): SMA's learner and central
#              updates on ResNet-32's parameters, k = 8, fused kernels against the
#              vector ops they replace (what the fusion brings).
#   table      the throughput table with ratios ($OUT/throughput.md).
#
# With a GPU (nvidia-smi works) nothing passes by being skipped; a step fails, named in the
# summary, when: it counted zero tests; a `--list` fails (its stderr is in the step's log) or
# the filter matches nothing; a bundle binary it needs is missing (engine-tests, replica-unit
# and crossbow included); any test prints `skipped:`; the doctor fails or finds no GPU; cuDNN
# is missing or a log shows it fell back (`using the im2col fallback`, `uses the fallback
# kernels`, `running crossbow's own kernels`); compute-sanitizer is not found (SANITIZER=0
# opts out, saying so); NCCL refuses two_ranks_of_one_gpu_each (or it fails otherwise);
# PyTorch is not importable (speed); a measurement is missing from the table; a learner's CUDA
# graphs turned themselves off during the main bench (speed). The tests run
# with CROSSBOW_REQUIRE_GPU=1, CROSSBOW_REQUIRE_CUDNN=1 (not in the sanitizer step, which sets
# CROSSBOW_DISABLE_CUDNN=1), CROSSBOW_REQUIRE_NVRTC=1 and CROSSBOW_REQUIRE_NCCL=1.
#
# Time: one overall deadline per call (DEADLINE, default 290 s), each step at most
# STEP_TIMEOUT (150 s) and never beyond the deadline; a step that would start with less time
# left than its estimate is reported "not run: deadline" and fails the call. Each step's
# summary row is printed the moment it ends, with the estimate beside the measured seconds.
#
# Logs: everything is written as it goes into $OUT (default gpu-check-logs/ at the
# repository root): one log per step (PART-NN-step.log), summary.md (a section per call,
# appended row by row), and for speed the JSON results and throughput.md — so a call that is
# killed still leaves what it did.
#
# Without a driver (a dry run on the CPU machine) the GPU parts run and skip, saying so, the
# throughput steps run the same commands on the CPU with 1 iteration (PyTorch only if
# importable), and the call exits 0 saying "no GPU". Exit status: 0 = every step passed;
# 1 = a step failed or was not run; 2 = no bundle directory or a bad argument.
#
# Knobs (environment): OUT (gpu-check-logs), DEADLINE (290; 580 for all), STEP_TIMEOUT (150),
# SANITIZER_TIMEOUT (120), SANITIZER (1; 0 skips the sanitizer step, reported), PYTHON
# (python3), BENCH_ITERATIONS (30), BENCH_WARMUP (5), PYTORCH_MODES (eager,compile),
# CROSSBOW_BIN (default BUNDLE/crossbow).
set -uo pipefail
CALLER=$PWD

PART=all
case "${1:-}" in
correctness | speed | all)
    PART=$1
    shift
    ;;
-h | --help)
    sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
esac
[ "$#" -le 1 ] || { echo "usage: $0 [correctness|speed|all] [BUNDLE_DIR]" >&2; exit 2; }
BUNDLE=${1:-${BUNDLE:-.gpu-bin}}
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || { echo "gpu-check: cannot write to OUT=$OUT" >&2; exit 2; }
fi
case "$BUNDLE" in /*) ;; *) [ -d "$CALLER/$BUNDLE" ] && BUNDLE=$CALLER/$BUNDLE ;; esac
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-logs}
mkdir -p "$OUT" || exit 2

if [ "$PART" = all ]; then DEADLINE=${DEADLINE:-580}; else DEADLINE=${DEADLINE:-290}; fi
STEP_TIMEOUT=${STEP_TIMEOUT:-150}
SANITIZER_TIMEOUT=${SANITIZER_TIMEOUT:-120}
PY=${PYTHON:-python3}

# ---- estimates -----------------------------------------------------------------------------
# Seconds each step is expected to take on one H200, printed beside the measurement and used
# to decide whether a step can still start before the deadline. How they were derived: the
# dry run on the 2-core CPU machine (a fake bundle: every step's overhead — listing, starting
# each process, the script itself — is under 1 s per step; `crossbow bench` of ResNet-32 at
# batch 32 on the CPU, learners 1 and 2, 1 iteration, and the tuner, took 23 s, of which the
# tuner's 15 iterations most), plus judgement for what only a GPU does: a process that opens
# the GPU pays 2-3 s (context, cuBLAS and cuDNN loaded; kernels from the disk cache the doctor
# fills), NVRTC compiles the 10 .cu sources (about 500 lines) in a few seconds per
# architecture, `import torch` takes 3-5 s and torch.compile of ResNet-32 30-60 s per shape,
# compute-sanitizer memcheck slows kernels 10-100x. Sums: correctness 273 s, speed 282 s.
EST_LIBRARIES=10 # python + import torch + nvidia-smi
EST_DOCTOR=30    # first NVRTC compile of every kernel for sm_90, self-test on both cuDNN paths
EST_NVRTC=25     # every kernel for sm_80 and for sm_90, disk-cache tests
EST_OPS=45       # 14 op folders x ~3 s (one process each)
EST_GPU_TESTS=35 # 14 tests x 2-3 s (one process each)
EST_ENGINE=48    # 6 processes; 20 iterations x 4 synchronisers with the CPU engine in lockstep; 2 graph tests; 2 fusion tests
EST_SANITIZER=60 # one tuner run under memcheck on the fallback kernels
EST_NCCL=20      # 1 + 8 processes; two LeNet-5 engine runs
EST_CB32=50      # 4 learner counts x 35 iterations + the tuner (up to 8 learners) + NVRTC
EST_VARIANT=6    # 8 learners x 12 iterations, one setting changed (three such steps)
EST_SYNC=7       # 2 criterion cases x 2 s, plus start-up
EST_PT32=70      # eager, then torch.compile (the compile dominates)
EST_CB128=70     # as b32 with 4x the images per iteration
EST_PT128=55     # torch.compile again for the new shape (some of the compile cache reused)
EST_TABLE=2

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/crossbow-gpu-check.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
T0=$(date +%s)
now() { date +%s; }
left() { echo $((DEADLINE - ($(now) - T0))); }
joined() { # the arguments joined with "; "
    local out="" x
    for x in "$@"; do out="${out:+$out; }$x"; done
    echo "$out"
}
slug() { echo "$1" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n' - | tr -s - | sed 's/^-//; s/-$//'; }

declare -a ROWS=() FAILED_STEPS=()
STEP_NAME="" STEP_LOG=/dev/null STEP_NO=0 STEP_T=$T0 STEP_END=$T0 STEP_EST=0 TAG=$PART
hr() { printf '\n== [%3ds] %s\n' "$(($(now) - T0))" "$*" | tee -a "$STEP_LOG"; }
say() { echo "$*" | tee -a "$STEP_LOG"; }

# One summary row, printed and appended to summary.md at once. row NAME STATUS SECS EST TEXT
row() {
    local r
    r=$(printf '| %-40s | %-4s | %4s s | estimate %3s s | %s |' "$1" "$2" "$3" "$4" "$5")
    ROWS+=("$r")
    echo "$r" >>"$OUT/summary.md"
    printf 'summary: %s\n' "$r" | tee -a "$STEP_LOG"
    if [ "$2" != PASS ]; then FAILED_STEPS+=("$1"); fi
}

# ---- steps ---------------------------------------------------------------------------------
# step_begin NAME ESTIMATE [TIMEOUT]: a new step with its log, its own end time (TIMEOUT,
# default STEP_TIMEOUT, from now, and never past the deadline); returns 1 (after its "not
# run: deadline" row) when less than ESTIMATE seconds are left.
P=0 F=0 S=0 COUNTED=1
declare -a PROBLEMS=() NOTES=() SKIPS=()
step_begin() {
    STEP_NAME=$1 STEP_EST=$2
    STEP_NO=$((STEP_NO + 1))
    STEP_LOG="$OUT/$TAG-$(printf %02d "$STEP_NO")-$(slug "$1").log"
    : >"$STEP_LOG"
    STEP_T=$(now)
    local budget=${3:-$STEP_TIMEOUT} l
    l=$(left)
    STEP_END=$((STEP_T + (budget < l ? budget : l)))
    P=0 F=0 S=0 COUNTED=1 PROBLEMS=() NOTES=() SKIPS=()
    hr "$TAG: $1 (estimate ${2}s; ${l}s left of ${DEADLINE}s)"
    if [ "$l" -lt "$2" ]; then
        row "$1" FAIL 0 "$2" "not run: deadline (${l}s left, estimate ${2}s)"
        return 1
    fi
    return 0
}
problem() { PROBLEMS+=("$*"); say "gpu-check: $STEP_NAME: $*"; }
note() { NOTES+=("$*"); say "gpu-check: $STEP_NAME: $*"; }
# step_end: the row. With a GPU, a test step that counted no test, or any `skipped:` line,
# fails it.
step_end() {
    local r="$P passed, $F failed"
    if [ "$COUNTED" = 1 ]; then
        [ "$S" -gt 0 ] && r="$r, $S skipped"
        if [ "$GPU" = 1 ] && [ "$((P + F))" -eq 0 ]; then problem "no test ran (0 passed, 0 failed)"; fi
        if [ "$GPU" = 1 ] && [ "$S" -gt 0 ]; then
            problem "$S skipped with a GPU present: ${SKIPS[*]:0:3}$([ "$S" -gt 3 ] && echo ' ...')"
        fi
    else
        r=""
    fi
    [ "${#NOTES[@]}" -gt 0 ] && r="${r:+$r; }$(joined "${NOTES[@]}")"
    if [ "${#PROBLEMS[@]}" -gt 0 ]; then
        row "$STEP_NAME" FAIL $(($(now) - STEP_T)) "$STEP_EST" "${r:+$r; }FAILED: $(joined "${PROBLEMS[@]}")"
    else
        row "$STEP_NAME" PASS $(($(now) - STEP_T)) "$STEP_EST" "${r:-ok}"
    fi
}

# run_cmd LABEL CMD...: runs CMD until the step's end time, its output shown and appended to
# the step's log as it comes; adds its test counts and `skipped:` lines to the step's; sets
# RC and CMD_OUT (a file with this command's output). It runs in the background and is
# waited for, so that a signal to this script is handled at once (see on_signal).
RC=0 CMD_OUT=/dev/null N_CMD=0 CMD_PID=""
run_cmd() {
    local label=$1 budget
    shift
    budget=$((STEP_END - $(now)))
    N_CMD=$((N_CMD + 1))
    CMD_OUT="$SCRATCH/cmd-$N_CMD.out"
    : >"$CMD_OUT"
    if [ "$budget" -le 0 ]; then
        RC=124
        problem "$label: not run: the step's time is up"
        return
    fi
    say "-- $label"
    local pidf="$SCRATCH/cmd-$N_CMD.pid" rcf="$SCRATCH/cmd-$N_CMD.rc"
    {
        timeout -k 5 "$budget" "$@" </dev/null 2>&1 &
        echo $! >"$pidf"
        wait $!
        echo $? >"$rcf"
    } | tee "$CMD_OUT" | tee -a "$STEP_LOG" &
    CMD_PID=$pidf
    wait $!
    CMD_PID=""
    RC=$(cat "$rcf" 2>/dev/null || echo 1)
    P=$((P + $(grep '^test result:' "$CMD_OUT" | grep -Eo '[0-9]+ passed' | awk '{s += $1} END {print s + 0}')))
    F=$((F + $(grep '^test result:' "$CMD_OUT" | grep -Eo '[0-9]+ failed' | awk '{s += $1} END {print s + 0}')))
    local sk
    sk=$(grep -c 'skipped:' "$CMD_OUT")
    if [ "$sk" -gt 0 ]; then
        S=$((S + sk))
        SKIPS+=("$label")
    fi
    if [ "$RC" -ne 0 ]; then
        problem "$label: exit status $RC$([ "$RC" -eq 124 ] || [ "$RC" -eq 137 ] && echo " (timed out after ${budget}s)")"
    fi
}

# list_tests BIN ERE: the tests of BIN (`--list --format terse`) whose names match ERE, in
# LISTED. A failing listing (its stderr goes to the log) or no match is a problem.
LISTED=""
list_tests() {
    local bin=$1 ere=$2 rc
    LISTED=""
    timeout 60 "$bin" --list --format terse >"$SCRATCH/list.out" 2>"$SCRATCH/list.err"
    rc=$?
    if [ -s "$SCRATCH/list.err" ]; then
        say "-- $(basename "$bin") --list, stderr:"
        tee -a "$STEP_LOG" <"$SCRATCH/list.err"
    fi
    if [ "$rc" -ne 0 ]; then
        problem "$(basename "$bin") --list failed (exit status $rc; its stderr is in $(basename "$STEP_LOG"))"
        return 1
    fi
    LISTED=$(sed -n 's/: test$//p' "$SCRATCH/list.out" | grep -E "$ere")
    if [ -z "$LISTED" ]; then
        problem "$(basename "$bin") --list: no test matches /$ere/"
        return 1
    fi
    return 0
}

# need_bin NAME: BUNDLE/NAME is there (0), or: required (kernels-unit, gpu-tests, or any with a
# GPU), a problem; otherwise a note (dry run). Returns 1 when missing.
need_bin() {
    [ -x "$BUNDLE/$1" ] && return 0
    if [ "$GPU" = 1 ] || [ "$1" = kernels-unit ] || [ "$1" = gpu-tests ]; then
        problem "bundle binary $1 is missing ($BUNDLE/$1; build with scripts/build-gpu-bundle.sh)"
    else
        note "no $1 in the bundle (not run; a failure with a GPU)"
    fi
    return 1
}

# cuDNN must not fall back where it is meant to run: the messages of conv2d/cudnn.rs ("cuDNN
# cannot plan conv2d ...; using the im2col fallback"), cuda/device.rs ("no cuDNN handle ...;
# this learner uses the fallback kernels") and cuda/cudnn.rs ("cuDNN refused ...; running
# crossbow's own kernels for it"). A batch-norm shape outside cuDNN's limits (eps < 1e-5, one
# value per channel) falls back without a message.
check_cudnn_fallback() {
    [ "$GPU" = 1 ] || return 0
    local hit
    hit=$(grep -hE 'using the im2col fallback|uses the fallback kernels|running crossbow.s own kernels' "$STEP_LOG" | head -1)
    [ -n "$hit" ] && problem "cuDNN fell back: $hit"
}

# With a GPU, a learner whose CUDA graphs turned themselves off (a capture the driver refused,
# work a graph cannot hold) fails the step: its figures would be plain launches' figures.
check_graphs_stayed_on() {
    [ "$GPU" = 1 ] || return 0
    local hit
    hit=$(grep -h 'CUDA graphs off, plain launches' "$STEP_LOG" | head -1)
    [ -n "$hit" ] && problem "CUDA graphs turned themselves off: $hit"
}

# Killed (the GPU machine's limit, Ctrl-C): stop the running command (its `timeout`, by its
# process id), keep what it wrote, and record the step as killed in summary.md.
on_signal() {
    if [ -n "$CMD_PID" ] && [ -s "$CMD_PID" ]; then
        kill -TERM "$(cat "$CMD_PID")" 2>/dev/null
        wait 2>/dev/null
    fi
    say "gpu-check: killed by SIG$1 during $STEP_NAME"
    printf '| %-40s | KILLED | %4s s | estimate %3s s | killed by SIG%s after %s s of the call |\n' "$STEP_NAME" \
        $(($(now) - STEP_T)) "$STEP_EST" "$1" $(($(now) - T0)) >>"$OUT/summary.md"
    exit 143
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT
trap 'on_signal HUP' HUP

if [ ! -d "$BUNDLE" ]; then
    echo "gpu-check: no bundle directory $BUNDLE; build it on the CPU machine with scripts/build-gpu-bundle.sh" >&2
    exit 2
fi
CROSSBOW_BIN=${CROSSBOW_BIN:-$BUNDLE/crossbow}
export CROSSBOW_KERNEL_CACHE="$SCRATCH/kernel-cache"

# ---- libraries and the GPU (both parts) ----------------------------------------------------
GPU=0 TORCH_OK=0 GPU_NAME="none" CUDNN_FOUND=0
libraries() {
    step_begin "libraries, nvidia-smi" "$EST_LIBRARIES" || return
    COUNTED=0
    [ -f "$BUNDLE/MANIFEST" ] && tee -a "$STEP_LOG" <"$BUNDLE/MANIFEST"
    local libs="" sp d nccl
    sp=$(timeout 60 "$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>>"$STEP_LOG")
    TORCH_OK=0
    if [ -n "$sp" ]; then
        TORCH_OK=1
        say "PyTorch $("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>>"$STEP_LOG") in $sp"
    else
        say "no PyTorch importable with $PY (its error is in the log)"
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
        say "no PyTorch with pip CUDA libraries found (python: $PY)"
    fi
    for d in .nvrtc/lib/python3*/site-packages/nvidia/cu13/lib; do
        [ -d "$d" ] && libs="$libs:$PWD/$d"
    done
    export LD_LIBRARY_PATH="${libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # cudarc loads each library by `libX.so` first, which a toolkit on the path may provide
    # in another version than the file crossbow chooses by the driver's CUDA version (the
    # versioned `libX.so.<major>`, newest major not above the driver's). A folder of links
    # `libX.so` -> the chosen file, first on the path, makes both load the same file.
    local majors="13 12" drv lib m f
    drv=$(timeout 30 nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -1)
    [ -n "$drv" ] && majors=$(for m in 13 12; do [ "$m" -le "$drv" ] && echo "$m"; done)
    mkdir -p "$SCRATCH/links"
    for lib in nvrtc cublas cudnn; do
        f=""
        [ "$lib" = cudnn ] && m=9 || m=$majors
        for m in $m; do
            for d in ${LD_LIBRARY_PATH//:/ }; do
                [ -e "$d/lib$lib.so.$m" ] && { f="$d/lib$lib.so.$m"; break 2; }
            done
        done
        if [ -n "$f" ]; then
            ln -sf "$(readlink -f "$f")" "$SCRATCH/links/lib$lib.so"
            say "lib$lib.so -> $(readlink -f "$f") (the file crossbow chooses; linked first on the path so cudarc loads it too)"
        fi
    done
    export LD_LIBRARY_PATH="$SCRATCH/links:$LD_LIBRARY_PATH"
    say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    for d in ${LD_LIBRARY_PATH//:/ }; do
        [ -e "$d/libcudnn.so.9" ] && CUDNN_FOUND=1
    done
    ldconfig -p 2>/dev/null | grep -q 'libcudnn\.so\.9 ' && CUDNN_FOUND=1
    say "-- nvidia-smi"
    if command -v nvidia-smi >/dev/null && timeout 30 nvidia-smi 2>&1 | tee -a "$STEP_LOG"; then
        GPU=1
        GPU_LINES=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>>"$STEP_LOG")
        GPU_NAME=$(echo "$GPU_LINES" | head -1)
        GPU_NAME=${GPU_NAME:-present}
        GPU_COUNT=$(echo "$GPU_LINES" | grep -c .)
        note "GPU: $GPU_NAME"
        [ "$CUDNN_FOUND" = 1 ] ||
            problem "no libcudnn.so.9 on the library path: convolution and batch norm would fall back to im2col"
        if [ "$TORCH_OK" = 1 ]; then
            :
        elif [ "$PART" = correctness ]; then
            note "PyTorch is not importable with $PY: CUDA libraries from the system's paths only"
        else
            problem "PyTorch is not importable with $PY (the comparison needs it)"
        fi
    else
        GPU=0
        note "no GPU: no NVIDIA driver (nvidia-smi missing or failing); GPU parts skip (dry run)"
    fi
    step_end
}

# The environment of every GPU test process.
gpu_env() {
    GPU_ENV=(NVIDIA_TF32_OVERRIDE=0)
    if [ "$GPU" = 1 ]; then
        GPU_ENV+=(CROSSBOW_REQUIRE_GPU=1 CROSSBOW_REQUIRE_CUDNN=1)
    fi
}

# ---- correctness ---------------------------------------------------------------------------
doctor() {
    step_begin "doctor" "$EST_DOCTOR" || return
    COUNTED=0
    if [ ! -x "$CROSSBOW_BIN" ]; then
        if [ "$GPU" = 1 ]; then
            problem "bundle binary crossbow is missing ($CROSSBOW_BIN)"
        else
            note "no crossbow in the bundle (not run; a failure with a GPU)"
        fi
    elif [ "$GPU" = 1 ]; then
        run_cmd "crossbow doctor --require-gpu" env "${GPU_ENV[@]}" "$CROSSBOW_BIN" doctor --require-gpu
        grep -q 'no GPU on this machine' "$CMD_OUT" && problem "the doctor found no GPU"
        grep -q 'cuDNN not used' "$CMD_OUT" && problem "the doctor: $(grep -m1 'cuDNN not used' "$CMD_OUT" | sed 's/^ *//')"
        grep -q 'error: ' "$CMD_OUT" && problem "the doctor: $(grep -m1 'error: ' "$CMD_OUT" | sed 's/^.*error: //')"
    else
        run_cmd "crossbow doctor" "$CROSSBOW_BIN" doctor
        grep -q 'no GPU on this machine' "$CMD_OUT" && note "the doctor: no GPU (exit $RC)"
    fi
    step_end
}

nvrtc() {
    step_begin "NVRTC compile (sm_80, sm_90)" "$EST_NVRTC" || return
    if need_bin kernels-unit && list_tests "$BUNDLE/kernels-unit" 'nvrtc'; then
        local e=()
        [ "$GPU" = 1 ] && e=(CROSSBOW_REQUIRE_NVRTC=1)
        run_cmd "nvrtc" env "${e[@]}" "$BUNDLE/kernels-unit" nvrtc --test-threads 1
    fi
    step_end
}

op_tests() {
    step_begin "op tests (every op, both paths)" "$EST_OPS" || return
    if need_bin kernels-unit && list_tests "$BUNDLE/kernels-unit" '::cuda[a-z_]*$'; then
        local all=$LISTED g names
        for g in $(echo "$all" | cut -d: -f1 | sort -u); do
            names=$(echo "$all" | grep "^$g::")
            # shellcheck disable=SC2086
            run_cmd "$g" env "${GPU_ENV[@]}" "$BUNDLE/kernels-unit" --exact $names --test-threads 1 --nocapture
        done
        check_cudnn_fallback
    fi
    step_end
}

gpu_tests() {
    step_begin "gpu-tests (one process each)" "$EST_GPU_TESTS" || return
    if need_bin gpu-tests && list_tests "$BUNDLE/gpu-tests" '.'; then
        local name
        for name in $(echo "$LISTED" | grep -vE 'emulator|_emu$'); do
            run_cmd "$name" env "${GPU_ENV[@]}" "$BUNDLE/gpu-tests" --exact "$name" --nocapture
        done
        check_cudnn_fallback
    fi
    step_end
}

engine() {
    step_begin "engine tests (cuda, cuda_async)" "$EST_ENGINE" || return
    if need_bin engine-tests &&
        list_tests "$BUNDLE/engine-tests" '(four_learners_match_the_cpu_engine|tuner_adds_and_removes_learners)::cuda(_async)?$'; then
        local name
        for name in $LISTED; do
            run_cmd "$name" env "${GPU_ENV[@]}" "$BUNDLE/engine-tests" --exact "$name" --include-ignored --nocapture
        done
        # CUDA graphs (cuda::replay): the engine replays each learner's forward and backward as
        # a captured graph to the bits of plain launches, and turns graphs off when every
        # iteration differs (dropout).
        # Fused batch norm + residual + ReLU (exec::tests::fused_chains_*): the same bits as
        # the plain program, cuDNN path included.
        if need_bin replica-unit &&
            list_tests "$BUNDLE/replica-unit" '^(engine::tests::(graphs|lagged)_[a-z_]+::cuda_async|exec::tests::fused_chains_[a-z_]+::cuda)$'; then
            for name in $LISTED; do
                run_cmd "$name" env "${GPU_ENV[@]}" "$BUNDLE/replica-unit" --exact "$name" --nocapture
            done
        fi
        check_cudnn_fallback
    fi
    step_end
}

find_sanitizer() {
    local c
    for c in "$(command -v compute-sanitizer 2>/dev/null)" "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" \
        /usr/local/cuda/bin/compute-sanitizer ${SITE_NVIDIA:+$SITE_NVIDIA/*/compute-sanitizer/compute-sanitizer}; do
        [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
    done
    return 1
}

sanitizer() {
    step_begin "tuner under compute-sanitizer (no cuDNN)" "$EST_SANITIZER" "$SANITIZER_TIMEOUT" || return
    if [ "${SANITIZER:-1}" = 0 ]; then
        COUNTED=0
        note "not run: SANITIZER=0"
    elif need_bin engine-tests && list_tests "$BUNDLE/engine-tests" 'tuner_adds_and_removes_learners::cuda$'; then
        local san=() cs name
        SITE_NVIDIA=$("$PY" -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null)
        if cs=$(find_sanitizer); then
            san=("$cs" --tool memcheck --error-exitcode 3)
            note "$cs"
        elif [ "$GPU" = 1 ]; then
            COUNTED=0
            problem "compute-sanitizer not found (PATH, \$CUDA_HOME/bin, /usr/local/cuda/bin, site-packages/nvidia; SANITIZER=0 skips this step)"
        else
            note "no compute-sanitizer (dry run: the test runs without it)"
        fi
        if [ "${#san[@]}" -gt 0 ] || [ "$GPU" = 0 ]; then
            local e=(NVIDIA_TF32_OVERRIDE=0 CROSSBOW_DISABLE_CUDNN=1)
            [ "$GPU" = 1 ] && e+=(CROSSBOW_REQUIRE_GPU=1)
            for name in $LISTED; do
                run_cmd "$name" env "${e[@]}" "${san[@]}" "$BUNDLE/engine-tests" --exact "$name" --include-ignored --nocapture
            done
        fi
    fi
    step_end
}

nccl() {
    step_begin "NCCL (load, all-reduce, engine, 2 ranks)" "$EST_NCCL" || return
    local NCCL_ENV=("${GPU_ENV[@]}") name
    if [ "$GPU" = 1 ]; then
        NCCL_ENV+=(CROSSBOW_REQUIRE_NCCL=1)
        [ -e "$SCRATCH/nccl/libnccl.so" ] || problem "no libnccl.so.2 in PyTorch's pip libraries"
        [ "$TORCH_OK" = 1 ] && say "PyTorch's NCCL: $("$PY" -c 'import torch; print(".".join(map(str, torch.cuda.nccl.version())))' 2>&1)"
    fi
    # a_communicator_without_a_gpu_is_an_error skips by design where there is a GPU.
    if need_bin kernels-unit && list_tests "$BUNDLE/kernels-unit" '^cuda::nccl::'; then
        # shellcheck disable=SC2046
        run_cmd "kernels-unit cuda::nccl" env "${NCCL_ENV[@]}" "$BUNDLE/kernels-unit" --exact \
            $(echo "$LISTED" | grep -v 'a_communicator_without_a_gpu_is_an_error') --test-threads 1 --nocapture
    fi
    if need_bin replica-unit && list_tests "$BUNDLE/replica-unit" '(^|::)nccl::'; then
        echo "$LISTED" | grep -q '::two_ranks_of_one_gpu_each$' ||
            problem "replica-unit has no two_ranks_of_one_gpu_each test"
        for name in $LISTED; do
            # Two ranks of one communicator need two GPUs: NCCL (2.5 and later) refuses two on
            # one GPU ("Duplicate GPU detected", NVIDIA/nccl#103), so on a one-GPU machine the
            # test cannot pass and is not run (said, and not counted as passed).
            if [ "$GPU" = 1 ] && [ "${GPU_COUNT:-1}" -lt 2 ]; then
                case "$name" in *::two_ranks_of_one_gpu_each)
                    say "$name: not run: one GPU (NCCL refuses two ranks of one communicator on one GPU; needs 2 GPUs)"
                    continue
                    ;;
                esac
            fi
            run_cmd "$name" env "${NCCL_ENV[@]}" "$BUNDLE/replica-unit" --exact "$name" --nocapture
            case "$name" in
            *::two_ranks_of_one_gpu_each)
                if [ "$GPU" = 1 ] && grep -q 'NCCL refuses two ranks' "$CMD_OUT"; then
                    problem "two_ranks_of_one_gpu_each: $(grep -m1 'NCCL refuses two ranks' "$CMD_OUT")"
                fi
                ;;
            esac
        done
    fi
    step_end
}

# ---- speed ---------------------------------------------------------------------------------
need_crossbow() { # true when the bundle's crossbow is there; else a problem (GPU) or a note
    [ -x "$CROSSBOW_BIN" ] && return 0
    if [ "$GPU" = 1 ]; then
        problem "bundle binary crossbow is missing ($CROSSBOW_BIN)"
    else
        note "no crossbow in the bundle (not run; a failure with a GPU)"
    fi
    return 1
}

bench_crossbow() { # batch estimate
    step_begin "crossbow bench, batch $1" "$2" || return
    COUNTED=0
    if need_crossbow; then
        run_cmd "crossbow bench" env NVIDIA_TF32_OVERRIDE=0 "$CROSSBOW_BIN" bench --model resnet32 --batch-size "$1" \
            --learners "$LEARNERS" --devices "$DEV" --iterations "$IT" --warmup "$WU" --tuner --max-learners "$MAXL" \
            --json "$OUT/crossbow-$1.json"
        [ -s "$OUT/crossbow-$1.json" ] || problem "no $OUT/crossbow-$1.json written"
        check_graphs_stayed_on
    fi
    step_end
}

# batch estimate label json-suffix CHANGE: one setting changed, the most learners. CHANGE
# is VAR=VALUE (an environment variable) or --flag=value (a bench flag).
bench_variant() {
    step_begin "crossbow bench, batch $1, $3" "$2" || return
    COUNTED=0
    local envs=() flags=()
    case "$5" in --*) flags=("$5") ;; *) envs=("$5") ;; esac
    if need_crossbow; then
        run_cmd "crossbow bench ($3)" env NVIDIA_TF32_OVERRIDE=0 "${envs[@]}" "$CROSSBOW_BIN" bench \
            --model resnet32 --batch-size "$1" --learners "$MAXL" --devices "$DEV" --iterations "$IT_VARIANT" \
            --warmup "$WU" --json "$OUT/crossbow-$1-$4.json" "${flags[@]}"
        [ -s "$OUT/crossbow-$1-$4.json" ] || problem "no $OUT/crossbow-$1-$4.json written"
    fi
    step_end
}

sync_bench() { # estimate
    step_begin "SMA update, fused against unfused" "$1" || return
    COUNTED=0
    if need_bin sync-step-bench; then
        if [ "$GPU" = 1 ]; then
            run_cmd "sync_step" env "${GPU_ENV[@]}" SYNC_STEP_QUICK=1 "$BUNDLE/sync-step-bench" --bench --noplot \
                'sync_step/gpu/resnet32/sma-local-momentum(-unfused)?/k8$'
            grep -q '^sync_step: GPU:' "$CMD_OUT" || problem "sync_step ran no GPU case: $(grep -m1 'sync_step:' "$CMD_OUT")"
            [ "$(grep -c 'time:' "$CMD_OUT")" -ge 2 ] || problem "sync_step measured fewer than 2 cases"
        else
            note "not run: the bench's GPU cases need a GPU (dry run)"
        fi
    fi
    step_end
}

bench_pytorch() { # batch estimate
    step_begin "PyTorch ($MODES), batch $1" "$2" || return
    COUNTED=0
    if [ "$TORCH_OK" != 1 ]; then
        if [ "$GPU" = 1 ]; then
            problem "PyTorch is not importable with $PY"
        else
            note "not run: PyTorch is not importable (dry run)"
        fi
    else
        run_cmd "pytorch_gpu_bench.py" bash -c 'o=$1; shift; "$@" >"$o"' _ "$OUT/pytorch-$1.jsonl" \
            "$PY" benches/peers/pytorch_gpu_bench.py --model resnet32 --batch-size "$1" --device "$TDEV" \
            --iterations "$IT" --warmup "$WU" --modes "$MODES"
        tee -a "$STEP_LOG" <"$OUT/pytorch-$1.jsonl"
        [ -s "$OUT/pytorch-$1.jsonl" ] || problem "no PyTorch results"
    fi
    step_end
}

table() {
    step_begin "throughput table" "$EST_TABLE" || return
    COUNTED=0
    cat >"$SCRATCH/table.py" <<'EOF'
import json, os, sys
out, gpu, modes, batches = sys.argv[1], sys.argv[2] == "1", sys.argv[3].split(","), sys.argv[4:]
lines = ["| batch | crossbow learners | crossbow img/s | PyTorch eager img/s | torch.compile img/s | vs eager | vs compile |",
         "|---:|---|---:|---:|---:|---:|---:|"]
missing = []
for b in batches:
    peers = {}
    try:
        for line in open(os.path.join(out, f"pytorch-{b}.jsonl")):
            if line.strip().startswith("{"):
                r = json.loads(line)
                peers[r["mode"]] = r["images_per_sec"]
    except (OSError, ValueError):
        pass
    try:
        cb = json.load(open(os.path.join(out, f"crossbow-{b}.json")))
    except (OSError, ValueError):
        cb = {"rows": [], "tuner": []}
    rows = [(str(r["learners_per_device"]), r["images_per_sec"]) for r in cb.get("rows", [])]
    rows += [(f"tuner: {r['picked']}", r["images_per_sec"]) for r in cb.get("tuner", [])]
    for suffix, label in [("nographs", "CUDA graphs off"), ("staging1", "1 staging buffer"),
                          ("lossnow", "loss read every iteration")]:
        try:
            v = json.load(open(os.path.join(out, f"crossbow-{b}-{suffix}.json")))
            rows += [(f"{r['learners_per_device']}, {label}", r["images_per_sec"]) for r in v.get("rows", [])]
        except (OSError, ValueError):
            if b == batches[0]:
                missing.append(f"crossbow with {label} at batch {b}")
    if not rows:
        missing.append(f"crossbow at batch {b}")
    missing += [f"PyTorch {m} at batch {b}" for m in modes if m not in peers]
    e, c = peers.get("eager"), peers.get("compile")
    fmt = lambda v: "-" if v is None else f"{v:.0f}"
    ratio = lambda v, p: "-" if v is None or not p else f"{v / p:.2f}x"
    for name, v in rows:
        lines.append(f"| {b} | {name} | {v:.0f} | {fmt(e)} | {fmt(c)} | {ratio(v, e)} | {ratio(v, c)} |")
if not gpu:
    lines.append("\n(dry run on the CPU, 1 iteration: these figures are not GPU measurements)")
text = "\n".join(lines) + "\n"
open(os.path.join(out, "throughput.md"), "w").write(text)
print(text)
if missing:
    print("missing measurements: " + ", ".join(missing))
    sys.exit(1 if gpu else 0)
EOF
    # shellcheck disable=SC2086
    run_cmd "table" "$PY" "$SCRATCH/table.py" "$OUT" "$GPU" "$MODES" $BATCHES
    grep -q '^missing measurements:' "$CMD_OUT" && [ "$GPU" = 1 ] && problem "$(grep -m1 '^missing measurements:' "$CMD_OUT")"
    [ "$RC" -eq 127 ] && [ "$GPU" = 0 ] && { PROBLEMS=(); note "no $PY: no table (dry run)"; }
    step_end
}

# ---- the calls -----------------------------------------------------------------------------
section() {
    TAG=$1
    rm -f "$OUT/$TAG"-[0-9][0-9]-*.log
    {
        echo
        echo "## gpu-check $1 — $(date -u +%Y-%m-%dT%H:%M:%SZ), bundle $BUNDLE, deadline ${DEADLINE}s, step timeout ${STEP_TIMEOUT}s"
        echo
        echo "| step | | seconds | estimate | result |"
        echo "|---|---|---:|---:|---|"
    } >>"$OUT/summary.md"
}

section "$([ "$PART" = speed ] && echo speed || echo correctness)"
libraries
gpu_env
if [ "$PART" != speed ]; then
    doctor
    nvrtc
    op_tests
    gpu_tests
    engine
    sanitizer
    nccl
fi
if [ "$PART" != correctness ]; then
    [ "$PART" = all ] && section speed
    rm -f "$OUT"/crossbow-*.json "$OUT"/pytorch-*.jsonl "$OUT/throughput.md"
    if [ "$GPU" = 1 ]; then
        DEV=cuda:0 TDEV=cuda IT=${BENCH_ITERATIONS:-30} WU=${BENCH_WARMUP:-5} MODES=${PYTORCH_MODES:-eager,compile}
        IT_VARIANT=${BENCH_ITERATIONS:-12}
        LEARNERS=1,2,4,8 MAXL=8 BATCHES="32 128"
    else
        # Dry run: the same commands on the CPU, batch 32 only, 1 iteration, learners 1 and
        # 2, eager only.
        DEV=cpu TDEV=cpu IT=1 IT_VARIANT=1 WU=0 MODES=eager LEARNERS=1,2 MAXL=2 BATCHES=32
    fi
    for b in $BATCHES; do
        if [ "$b" = 32 ]; then ec=$EST_CB32 ep=$EST_PT32; else ec=$EST_CB128 ep=$EST_PT128; fi
        bench_crossbow "$b" "$ec"
        # What CUDA graphs and the rotating pinned upload buffers bring: the same bench with
        # one of them off (first batch only, fewer iterations).
        if [ "$b" = "${BATCHES%% *}" ]; then
            bench_variant "$b" "$EST_VARIANT" "CUDA graphs off" nographs CROSSBOW_CUDA_GRAPHS=0
            bench_variant "$b" "$EST_VARIANT" "1 staging buffer" staging1 CROSSBOW_STAGING_BUFFERS=1
            bench_variant "$b" "$EST_VARIANT" "loss read every iteration" lossnow --loss-read=now
            sync_bench "$EST_SYNC"
        fi
        bench_pytorch "$b" "$ep"
    done
    table
fi

# ---- summary -------------------------------------------------------------------------------
STEP_LOG=/dev/null
hr "summary ($PART)"
printf '| %-40s | %-4s | %6s | %-14s | %s |\n' step "" secs estimate result
for r in "${ROWS[@]}"; do echo "$r"; done
[ -f "$OUT/throughput.md" ] && [ "$PART" != correctness ] && cat "$OUT/throughput.md"
total=$(($(now) - T0))
echo "total: ${total} s (deadline ${DEADLINE} s); logs in $OUT"
if [ "$GPU" = 0 ]; then
    echo "no GPU: no NVIDIA driver on this machine; GPU parts were skipped (dry run)."
fi
if [ "${#FAILED_STEPS[@]}" -gt 0 ]; then
    msg="gpu-check $PART: FAILED: $(joined "${FAILED_STEPS[@]}")"
    echo "$msg"
    printf '\n%s (%d s)\n' "$msg" "$total" >>"$OUT/summary.md"
    exit 1
fi
echo "gpu-check $PART: OK"
printf '\ngpu-check %s: OK (%d s%s)\n' "$PART" "$total" "$([ "$GPU" = 0 ] && echo ', no GPU: dry run')" >>"$OUT/summary.md"
exit 0
