#!/usr/bin/env bash
# Builds, on the CPU machine, what scripts/gpu-check.sh runs on a GPU machine, into the
# git-ignored .gpu-bin/ (stripped of debug info; the total must stay well under 64 MiB):
#
#   gpu-tests      crates/kernels/tests/gpu.rs (every op on the GPU vs the CPU, both paths)
#   kernels-unit   crossbow-kernels' unit tests (gpu-check runs its nvrtc_* tests: do the
#                  GPU machine's NVRTC compile every kernel?)
#   engine-tests   crossbow-sma's unit tests with CUDA (the engine with 4 learners and each
#                  synchroniser, learners added and removed; gpu-check runs two of them)
#   replica-unit   crossbow-replica's unit tests with CUDA (gpu-check runs comm::nccl::*:
#                  NCCL all-reduce vs host, the engine with NCCL, two ranks of one GPU each)
#   crossbow       the CLI: `crossbow doctor` and the throughput step (without it gpu-check
#                  fails those steps on a GPU)
#   MANIFEST       commit, toolchain, sizes, newest glibc symbol required
#
# Release profile, built for any x86-64 CPU: refuses to run with -C target-cpu=native.
# Respects CARGO_TARGET_DIR. Usage: scripts/build-gpu-bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=.gpu-bin
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
case " ${RUSTFLAGS:-} ${CARGO_ENCODED_RUSTFLAGS:-} " in
*target-cpu=native*)
    echo "build-gpu-bundle: RUSTFLAGS contains target-cpu=native; the GPU machine's CPU may differ" >&2
    exit 2
    ;;
esac
if grep -qs "target-cpu=native" .cargo/config.toml .cargo/config; then
    echo "build-gpu-bundle: .cargo/config sets target-cpu=native; the GPU machine's CPU may differ" >&2
    exit 2
fi

rm -rf "$OUT"
mkdir -p "$OUT"
start=$(date +%s)

# "name path" of each test executable in cargo's JSON messages.
executables() {
    if command -v python3 >/dev/null; then
        python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["target"]["name"], m["executable"])'
    else
        grep '"reason":"compiler-artifact"' | grep '"executable":"/' |
            sed -n 's/.*"target":{[^}]*"name":"\([^"]*\)".*"executable":"\([^"]*\)".*/\1 \2/p'
    fi
}

echo "== cargo test --release --no-run -p crossbow-kernels --features cuda"
json=$(cargo test --release --no-run -p crossbow-kernels --features cuda \
    --message-format=json-render-diagnostics)
while read -r name path; do
    case "$name" in
    gpu) cp "$path" "$OUT/gpu-tests" ;;
    crossbow_kernels) cp "$path" "$OUT/kernels-unit" ;;
    esac
done < <(printf '%s\n' "$json" | executables)
for f in gpu-tests kernels-unit; do
    [ -f "$OUT/$f" ] || { echo "build-gpu-bundle: no $f executable in cargo's output" >&2; exit 1; }
done

echo "== cargo test --release --no-run -p crossbow-sma --features crossbow-kernels/cuda"
json=$(cargo test --release --no-run -p crossbow-sma --features crossbow-kernels/cuda --lib \
    --message-format=json-render-diagnostics)
while read -r name path; do
    [ "$name" = crossbow_sma ] && cp "$path" "$OUT/engine-tests"
done < <(printf '%s\n' "$json" | executables)
[ -f "$OUT/engine-tests" ] || { echo "build-gpu-bundle: no engine-tests executable in cargo's output" >&2; exit 1; }

echo "== cargo test --release --no-run -p crossbow-replica --features crossbow-kernels/cuda (NCCL tests)"
json=$(cargo test --release --no-run -p crossbow-replica --features crossbow-kernels/cuda --lib \
    --message-format=json-render-diagnostics)
while read -r name path; do
    [ "$name" = crossbow_replica ] && cp "$path" "$OUT/replica-unit"
done < <(printf '%s\n' "$json" | executables)
[ -f "$OUT/replica-unit" ] || { echo "build-gpu-bundle: no replica-unit executable in cargo's output" >&2; exit 1; }

echo "== cargo bench --no-run -p crossbow-benches --bench sync_step (fused against unfused SMA)"
json=$(cargo bench --no-run -p crossbow-benches --bench sync_step --message-format=json-render-diagnostics)
while read -r name path; do
    [ "$name" = sync_step ] && cp "$path" "$OUT/sync-step-bench"
done < <(printf '%s\n' "$json" | executables)
[ -f "$OUT/sync-step-bench" ] || { echo "build-gpu-bundle: no sync-step-bench executable in cargo's output" >&2; exit 1; }

echo "== cargo build --release -p crossbow-cli --features cuda"
if cargo build --release -p crossbow-cli --features cuda; then
    cp "$TARGET/release/crossbow" "$OUT/crossbow"
else
    echo "build-gpu-bundle: warning: the crossbow CLI did not build; gpu-check will fail its doctor and throughput steps on a GPU" >&2
fi

if command -v strip >/dev/null; then
    for f in "$OUT"/*; do strip --strip-debug "$f"; done
fi

{
    echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (+ local changes)')"
    echo "built:   $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m) $(uname -r)"
    echo "rustc:   $(rustc -V)"
    for f in "$OUT"/*; do
        [ "$(basename "$f")" = MANIFEST ] && continue
        glibc=$(objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
        printf 'file:    %-13s %9d bytes  needs %s\n' "$(basename "$f")" "$(stat -c %s "$f")" "${glibc:-?}"
    done
} > "$OUT/MANIFEST"
cat "$OUT/MANIFEST"

bytes=$(du -cb "$OUT"/* | tail -1 | cut -f1)
awk -v b="$bytes" -v d="$OUT" -v t="$(($(date +%s) - start))" 'BEGIN { printf "bundle %s: %.1f MiB, built in %d s\n", d, b / 1048576, t }'
if [ "$bytes" -gt $((48 * 1024 * 1024)) ]; then
    echo "build-gpu-bundle: the bundle is over 48 MiB (limit 64 MiB); shrink it" >&2
    exit 1
fi
