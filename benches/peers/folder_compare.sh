#!/bin/bash
# crossbow's image-folder input path against PyTorch's DataLoader + ImageFolder on the same
# files, alternating, ROUNDS times (issue 25; BENCHMARKS.md §6).
#   bash benches/peers/folder_compare.sh [FOLDER] [ROUNDS]
# FOLDER defaults to /tmp/imgfolder, made first if missing (make_image_folder example);
# PYTHON defaults to ~/torchenv/bin/python (torch + torchvision, see benches/peers/README.md).
set -euo pipefail
DIR=${1:-/tmp/imgfolder}
ROUNDS=${2:-2}
PY=${PYTHON:-$HOME/torchenv/bin/python}
if [ ! -d "$DIR/train" ]; then
  cargo run --release -q -p crossbow-data --example make_image_folder -- data/cifar10-4k "$DIR"
fi
cargo bench -q -p crossbow-benches --bench folder_loader --no-run
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r: crossbow"
  CROSSBOW_IMAGE_FOLDER="$DIR" cargo bench -q -p crossbow-benches --bench folder_loader 2>&1 | grep -E "^(decode|threads|streaming)"
  echo "== round $r: PyTorch"
  "$PY" benches/peers/folder_loader.py "$DIR" 2>&1 | grep -E "^(decode|workers)"
done
