#!/usr/bin/env bash
# The README's first command (`crossbow train`: LeNet-5 on the built-in synthetic digits, the
# tuner choosing the learners, 4 epochs) five times with its default synchroniser (S-SGD)
# alternated with five under SMA (`--sync sma`), on a quiet machine; one log per run here.
# Usage: BIN=target/release/crossbow docs/results/default-run/run.sh; then the last line of
# each log is the run's summary (final accuracy, learners kept, seconds).
set -eu
cd "$(dirname "$0")"
BIN=${BIN:-../../../target/release/crossbow}
for i in 1 2 3 4 5; do
  for s in ssgd sma; do
    "$BIN" train --sync "$s" > "$s-$i.log" 2>&1
    echo "$s $i: $(tail -1 "$s-$i.log")"
  done
done
