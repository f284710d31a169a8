#!/usr/bin/env bash
# The test of scripts/gpu-check.sh, on any machine (no GPU, no Rust build, no Python packages,
# no network; seconds): a fake bundle of shell scripts standing in for gpu-tests,
# kernels-unit, engine-tests, replica-unit and crossbow (they answer `--list --format terse`
# with a few tests and, when run, print `skipped: no CUDA driver` and `test result: ok.
# 0 passed; 0 failed; 1 ignored`), and a fake nvidia-smi first on PATH: one that describes an
# H200 (a GPU is "there") and one that fails (no driver). Checks that
#   - with a GPU, the correctness call fails naming every step that only skipped, ran no
#     test, or whose doctor found no GPU;
#   - with a GPU, a missing bundle binary, a failing `--list` (its stderr in the log) and a
#     filter that matches nothing fail their steps, naming them;
#   - with a GPU, tests that pass but print the im2col fallback or NCCL's refusal of two ranks
#     on one GPU fail their steps;
#   - without a GPU both calls exit 0 saying "no GPU"; a deadline too short for a step's
#     estimate fails the call with "not run: deadline"; a command past its step's timeout is
#     stopped and fails the step;
#   - every step writes its log and summary row into $OUT.
# Run from anywhere: scripts/test-gpu-check.sh (crates/cli/tests/gpu_check.rs runs it under
# cargo test). Exit 0 when every check holds. KEEP=1 keeps the temporary folder (fake
# bundle, outputs, OUT folders) and prints where it is.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
T=$(mktemp -d "${TMPDIR:-/tmp}/crossbow-test-gpu-check.XXXXXX")
if [ "${KEEP:-}" = 1 ]; then echo "test-gpu-check: keeping $T"; else trap 'rm -rf "$T"' EXIT; fi
unset KEEP DEADLINE STEP_TIMEOUT SANITIZER_TIMEOUT SANITIZER CROSSBOW_BIN BUNDLE OUT BENCH_ITERATIONS \
    BENCH_WARMUP PYTORCH_MODES CUDA_HOME

FAILS=0
fail() {
    echo "test-gpu-check: FAIL: $*"
    FAILS=$((FAILS + 1))
}

# ---- the fake bundle -----------------------------------------------------------------------
mkdir -p "$T/bundle" "$T/gpu-bin" "$T/nogpu-bin"
cat >"$T/bundle/fake-test" <<'EOF'
#!/usr/bin/env bash
# A libtest binary's stand-in: its name picks its tests. FAKE_MODE=pass: the tests pass
# (printing what a GPU run could print) instead of skipping.
name=$(basename "$0")
list() {
    case $name in
    kernels-unit)
        printf '%s: test\n' cuda::tests::nvrtc_compiles_every_kernel_sm80 cuda::tests::nvrtc_compiles_every_kernel_sm90 \
            conv2d::tests::forward_matches_cpu::cpu conv2d::tests::forward_matches_cpu::cuda \
            conv2d::tests::forward_matches_cpu::cuda_no_cudnn activation::tests::relu_matches_cpu::cuda \
            cuda::nccl::tests::nccl_loads_and_makes_distinct_ids cuda::nccl::tests::a_communicator_without_a_gpu_is_an_error
        ;;
    gpu-tests)
        [ -n "${FAKE_EMPTY_LIST:-}" ] && return 0
        printf '%s: test\n' mem_info_is_consistent driver_reports_the_device \
            conv_and_batch_norm_at_unaligned_offsets_on_the_emulator
        ;;
    engine-tests)
        for t in four_learners_match_the_cpu_engine tuner_adds_and_removes_learners; do
            printf 'tests::%s::%s: test\n' "$t" emu "$t" cuda "$t" cuda_async
        done
        ;;
    replica-unit)
        if [ -n "${FAKE_LIST_FAILS:-}" ]; then
            echo "error: listing exploded" >&2
            return 101
        fi
        printf 'comm::nccl::tests::%s: test\n' choices_parse_and_print nccl_matches_the_host_all_reduce_on_every_gpu \
            engine_with_nccl_matches_the_host_path two_ranks_of_one_gpu_each
        for t in graphs_replay_the_plain_bits graphs_turn_off_when_every_iteration_differs \
            lagged_loss_reads_shift_the_losses_not_the_parameters; do
            printf 'engine::tests::%s::%s: test\n' "$t" emu "$t" cuda_async
        done
        printf 'exec::tests::%s::%s: test\n' fused_chains_give_the_plain_bits_mixed emu \
            fused_chains_give_the_plain_bits_mixed cuda fused_chains_give_the_plain_bits_resnet cuda
        ;;
    esac
}
case " $* " in *" --list "*) list; exit ;; esac
case " $* " in *" ${FAKE_HANG_ON:-@} "*) exec sleep 30 ;; esac
echo "running 1 test"
if [ "${FAKE_MODE:-}" = pass ]; then
    case "$*" in
    *conv2d::*::cuda\ *) echo "crossbow: cuDNN cannot plan conv2d Conv2dGeom {..} (CUDNN_STATUS_NOT_SUPPORTED); using the im2col fallback" ;;
    *two_ranks_of_one_gpu_each*) echo "NCCL refuses two ranks on one GPU (cuda:0): rank 0 Some(\"NCCL error\")" ;;
    esac
    echo "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s"
else
    echo "$name: skipped: no CUDA driver"
    echo "test result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s"
fi
EOF
chmod +x "$T/bundle/fake-test"
for b in gpu-tests kernels-unit engine-tests replica-unit; do
    cp "$T/bundle/fake-test" "$T/bundle/$b"
done
rm "$T/bundle/fake-test"
# The SMA update bench (criterion): says which GPU, then one `time:` line per case it measures.
cat >"$T/bundle/sync-step-bench" <<'EOF'
#!/usr/bin/env bash
echo "sync_step: GPU: fake ($*)"
for c in sma-local-momentum sma-local-momentum-unfused; do
    for k in 8; do
        printf 'sync_step/gpu/resnet32/%s/k%s\n                        time:   [1.0 us 1.1 us 1.2 us]\n' "$c" "$k"
    done
done
EOF
chmod +x "$T/bundle/sync-step-bench"
cat >"$T/bundle/crossbow" <<'EOF'
#!/usr/bin/env bash
# `crossbow doctor` as on a machine without a usable GPU, `crossbow bench` writing a small
# JSON result at once (it must not really benchmark).
case $1 in
doctor)
    echo "crossbow doctor (fake)"
    echo "driver:  no CUDA driver found (fake)"
    if [ "${FAKE_MODE:-}" = pass ]; then echo "all passed"; exit 0; fi
    case " $* " in *" --require-gpu "*)
        echo "crossbow: error: --require-gpu: no usable GPU: no CUDA driver found (fake)" >&2
        exit 1
        ;;
    esac
    echo "no GPU on this machine: nothing to test (exit 0)"
    ;;
bench)
    json="" batch=""
    while [ $# -gt 0 ]; do
        case $1 in --json) json=$2 ;; --batch-size) batch=$2 ;; --loss-read=*) echo "fake bench: ${1#--loss-read=} loss read" ;; esac
        shift
    done
    [ -n "${FAKE_GRAPHS_OFF:-}" ] && echo "crossbow: cuda:0 stream 3: CUDA graphs off, plain launches from now on: capturing a graph failed: fake" >&2
    echo "| resnet32 | $batch | 1 | fake | 100.0 | 1.00x |"
    printf '{"rows": [{"learners_per_device": 1, "images_per_sec": 100.0}], "tuner": [{"picked": 1, "images_per_sec": 90.0}]}\n' >"$json"
    ;;
*) echo "fake crossbow: $*" >&2; exit 2 ;;
esac
EOF
chmod +x "$T/bundle/crossbow"
echo "commit:  fake" >"$T/bundle/MANIFEST"

cat >"$T/gpu-bin/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
case "$*" in
*--query-gpu*) for _ in $(seq "${FAKE_GPUS:-1}"); do echo "NVIDIA H200, 550.54.15, 143771 MiB"; done ;;
*)
    echo "+-----------------------------------------------------------------------------------------+"
    echo "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |"
    echo "|   0  NVIDIA H200                    On  |   00000000:19:00.0 Off |                    0 |"
    echo "| N/A   31C    P0             76W /  700W |       1MiB / 143771MiB |      0%      Default |"
    echo "+-----------------------------------------------------------------------------------------+"
    ;;
esac
EOF
cat >"$T/nogpu-bin/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
exit 9
EOF
chmod +x "$T/gpu-bin/nvidia-smi" "$T/nogpu-bin/nvidia-smi"

# check NAME WANT_RC PATHDIR BUNDLE PART [VAR=VALUE...]: runs gpu-check; OUT is $T/NAME,
# its output $T/NAME.out.
check() {
    local name=$1 want=$2 bin=$3 bundle=$4 part=$5 rc
    shift 5
    env "$@" PATH="$bin:$PATH" OUT="$T/$name" bash "$ROOT/scripts/gpu-check.sh" "$part" "$bundle" >"$T/$name.out" 2>&1
    rc=$?
    if [ "$want" != any ] && [ "$rc" != "$want" ]; then
        fail "$name: exit status $rc, want $want; the output's end:"
        tail -40 "$T/$name.out" | sed 's/^/    /'
    fi
    echo "test-gpu-check: $name: exit status $rc"
}
has() { # name ERE...: the output has a line matching each
    local name=$1 re
    shift
    for re in "$@"; do
        grep -qE -- "$re" "$T/$name.out" || fail "$name: no line matches /$re/"
    done
}
hasnt() {
    local name=$1 re
    shift
    for re in "$@"; do
        ! grep -qE -- "$re" "$T/$name.out" || fail "$name: a line matches /$re/: $(grep -m1 -E -- "$re" "$T/$name.out")"
    done
}
# The summary row of a step: FAIL or PASS.
row_is() { # name step status
    grep -E "^summary: \| $2[^|]*\| $3 " "$T/$1.out" >/dev/null || fail "$1: no '$3' summary row for '$2'"
}

# ---- with a GPU: skipping tests fail the call, naming the steps ----------------------------
check gpu-skips 1 "$T/gpu-bin" "$T/bundle" correctness
has gpu-skips 'GPU: NVIDIA H200' 'gpu-check correctness: FAILED' 'estimate +[0-9]+ s' \
    'skipped with a GPU present' 'no test ran' 'no usable GPU' 'the doctor: --require-gpu'
for s in doctor 'NVRTC compile' 'op tests' gpu-tests 'engine tests' 'NCCL'; do
    row_is gpu-skips "$s" FAIL
    grep -E '^gpu-check correctness: FAILED' "$T/gpu-skips.out" | grep -q "$s" ||
        fail "gpu-skips: the final line does not name $s"
done
hasnt gpu-skips '^-- conv_and_batch_norm_at_unaligned_offsets_on_the_emulator' '^-- .*a_communicator_without_a_gpu'
[ -s "$T/gpu-skips/summary.md" ] || fail "gpu-skips: no summary.md in OUT"
grep -q '| op tests (every op, both paths) *| FAIL' "$T/gpu-skips/summary.md" || fail "gpu-skips: summary.md lacks the op tests row"
ls "$T/gpu-skips"/correctness-0[1-9]-*.log >/dev/null 2>&1 || fail "gpu-skips: no step logs in OUT"
grep -q 'skipped: no CUDA driver' "$T/gpu-skips"/correctness-*-op-tests*.log || fail "gpu-skips: the op tests' log lacks their output"

# ---- with a GPU: a missing binary, a failing listing, a filter matching nothing ------------
cp -r "$T/bundle" "$T/bundle-missing"
rm "$T/bundle-missing/engine-tests"
check gpu-missing 1 "$T/gpu-bin" "$T/bundle-missing" correctness FAKE_LIST_FAILS=1 FAKE_EMPTY_LIST=1
has gpu-missing 'bundle binary engine-tests is missing' 'replica-unit --list failed \(exit status 101' \
    'gpu-tests --list: no test matches'
row_is gpu-missing 'engine tests' FAIL
row_is gpu-missing 'tuner under compute-sanitizer' FAIL
row_is gpu-missing 'gpu-tests' FAIL
grep -q 'listing exploded' "$T/gpu-missing"/correctness-*-nccl*.log || fail "gpu-missing: the listing's stderr is not in the NCCL log"

# ---- with a GPU: passing tests that fell back to im2col, or NCCL refusing two ranks --------
check gpu-pass 1 "$T/gpu-bin" "$T/bundle" correctness FAKE_MODE=pass SANITIZER=0 FAKE_GPUS=2
has gpu-pass 'cuDNN fell back: crossbow: cuDNN cannot plan conv2d' \
    'two_ranks_of_one_gpu_each: NCCL refuses two ranks on one GPU'
row_is gpu-pass 'op tests' FAIL
row_is gpu-pass 'NCCL' FAIL
row_is gpu-pass doctor PASS
row_is gpu-pass gpu-tests PASS
row_is gpu-pass 'engine tests' PASS
# One GPU: two ranks cannot share it (NCCL refuses), so that test is not run, and said.
check gpu-one 1 "$T/gpu-bin" "$T/bundle" correctness FAKE_MODE=pass SANITIZER=0
has gpu-one 'two_ranks_of_one_gpu_each: not run: one GPU'
hasnt gpu-one 'two_ranks_of_one_gpu_each: NCCL refuses'

# ---- without a GPU: dry runs exit 0 saying "no GPU" ----------------------------------------
check dry-correctness 0 "$T/nogpu-bin" "$T/bundle" correctness
has dry-correctness '^no GPU' 'gpu-check correctness: OK'
hasnt dry-correctness 'FAIL'
check dry-speed 0 "$T/nogpu-bin" "$T/bundle" speed
has dry-speed '^no GPU' 'gpu-check speed: OK' 'crossbow bench, batch 32' 'crossbow bench, batch 32, CUDA graphs off' \
    'crossbow bench, batch 32, 1 staging buffer' 'crossbow bench, batch 32, loss read every iteration' \
    'fake bench: now loss read' 'SMA update, fused against unfused'
for f in crossbow-32.json crossbow-32-nographs.json crossbow-32-staging1.json crossbow-32-lossnow.json; do
    [ -s "$T/dry-speed/$f" ] || fail "dry-speed: no $f in OUT"
done
# A deadline shorter than a step's estimate: "not run: deadline", a failure.
check dry-deadline 1 "$T/nogpu-bin" "$T/bundle" correctness DEADLINE=12
has dry-deadline 'not run: deadline'
# A hanging test process: stopped at the step's timeout, the step fails, the next steps run.
check dry-timeout 1 "$T/nogpu-bin" "$T/bundle" correctness STEP_TIMEOUT=5 FAKE_HANG_ON=nvrtc
has dry-timeout 'nvrtc: exit status 124 \(timed out after [0-9]+s\)'
row_is dry-timeout 'NVRTC compile' FAIL
row_is dry-timeout 'op tests' PASS

# ---- with a GPU, speed: the fake bench runs at once; without PyTorch the call fails ----------
check gpu-speed any "$T/gpu-bin" "$T/bundle" speed BENCH_ITERATIONS=1 BENCH_WARMUP=0 PYTORCH_MODES=eager
has gpu-speed 'crossbow bench, batch 32' 'crossbow bench, batch 128'
row_is gpu-speed 'crossbow bench, batch 128' PASS
row_is gpu-speed 'crossbow bench, batch 32, CUDA graphs off' PASS
row_is gpu-speed 'crossbow bench, batch 32, 1 staging buffer' PASS
row_is gpu-speed 'crossbow bench, batch 32, loss read every iteration' PASS
row_is gpu-speed 'SMA update, fused against unfused' PASS
grep -q 'sma-local-momentum(-unfused)?/k8' "$T/gpu-speed"/speed-*.log ||
    fail "gpu-speed: the SMA update step did not pass its filter to the bench"
has gpu-speed '\| 32 \| 1, CUDA graphs off \|' '\| 32 \| 1, 1 staging buffer \|' '\| 32 \| 1, loss read every iteration \|'
hasnt gpu-speed 'batch 128, CUDA graphs off' 'batch 128, 1 staging buffer' 'batch 128, loss read every iteration'
# With a GPU the engine step runs the CUDA-graph and lagged-loss tests of replica-unit (and
# they skip here).
grep -q 'graphs_replay_the_plain_bits::cuda_async' "$T/gpu-skips"/correctness-*-engine*.log ||
    fail "gpu-skips: the engine step did not run the CUDA-graph tests"
grep -q 'lagged_loss_reads_shift_the_losses_not_the_parameters::cuda_async' "$T/gpu-skips"/correctness-*-engine*.log ||
    fail "gpu-skips: the engine step did not run the lagged-loss test"
grep -q 'fused_chains_give_the_plain_bits_resnet::cuda' "$T/gpu-skips"/correctness-*-engine*.log ||
    fail "gpu-skips: the engine step did not run the fused-chain tests"
grep -q 'fused_chains_give_the_plain_bits_mixed::emu' "$T/gpu-skips"/correctness-*-engine*.log &&
    fail "gpu-skips: the engine step ran an emulator test"
# Graphs that turn themselves off during the bench fail its step, quoting the line.
check gpu-speed-graphs-off 1 "$T/gpu-bin" "$T/bundle" speed BENCH_ITERATIONS=1 BENCH_WARMUP=0 PYTORCH_MODES=eager \
    FAKE_GRAPHS_OFF=1
has gpu-speed-graphs-off 'CUDA graphs turned themselves off: crossbow: cuda:0 stream 3: CUDA graphs off'
row_is gpu-speed-graphs-off 'crossbow bench, batch 32 ' FAIL
hasnt gpu-speed 'CUDA graphs turned themselves off'
if grep -q 'PyTorch is not importable' "$T/gpu-speed.out"; then
    has gpu-speed 'gpu-check speed: FAILED'
    row_is gpu-speed 'PyTorch \(eager\), batch 32' FAIL
fi

if [ "$FAILS" -gt 0 ]; then
    echo "test-gpu-check: $FAILS check(s) failed"
    exit 1
fi
echo "test-gpu-check: all checks passed"
