#!/usr/bin/env bash
# Issue 49: time to accuracy, crossbow (its defaults: the tuner picks the learners, the
# model's default synchroniser) against PyTorch on the same 2 cores, data, schedule and
# stopping rule. Both sides tuned on one grid (batch 16/32/64 x rate 0.025/0.05/0.1) on seed 0,
# then 3 seeds at their picks, alternating sides; see benches/peers/tta_compare.py.
# Needs a quiet machine (nothing else running: PyTorch's threads lose badly to a busy core).
# Usage: PY=~/torchenv/bin/python FMNIST=/usr/share/datasets/fashion-mnist \
#        [CIFAR50K=path/to/cifar10-50k-jpeg] \
#        [ROWS="fmnist-lenet5-cosine fmnist-lenet5-cosine-best fmnist-lenet5 cifar4k-resnet20-r2 cifar4k-resnet20-best
#        cifar4k-resnet20 fmnist-lenet5-cosine-avx2 fmnist-lenet5-cosine-global cifar4k-resnet20-avx2
#        cifar50k-resnet20"] docs/results/tta-pytorch/run.sh
set -eu
cd "$(dirname "$0")/../../.."
PY=${PY:?PY must name a python with torch and torchvision}
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
CIFAR50K=${CIFAR50K:-}  # the cifar10-50k-jpeg image folder, for the cifar50k-resnet20 row
ROWS=${ROWS:-"fmnist-lenet5-cosine fmnist-lenet5-cosine-best cifar4k-resnet20-r2 cifar4k-resnet20-best"}
OUT=docs/results/tta-pytorch
for row in $ROWS; do
  case $row in
    fmnist-lenet5) # Debian's dataset-fashion-mnist; crossbow reads idx files as `mnist`.
      python3 benches/peers/tta_compare.py --python "$PY" --model lenet5 --dataset mnist --data-dir "$FMNIST" \
        --target 0.89 --epochs 15 --eval-every 0.5 --seeds 3 --out "$OUT/$row" --resume ;;
    fmnist-lenet5-cosine) # the same row with a schedule that ends above the target, run to the end
      # of the schedule on every run, so final accuracy is compared at the end and not at the stop.
      python3 benches/peers/tta_compare.py --python "$PY" --model lenet5 --dataset mnist --data-dir "$FMNIST" \
        --target 0.89 --epochs 15 --schedule cosine --run-to-end --eval-every 0.5 --seeds 3 --out "$OUT/$row" --resume ;;
    fmnist-lenet5-cosine-best) # crossbow's best configuration on that row: one learner (no tuner),
      # which ends highest in ../fmnist-final/; tuned on the same grid. (The committed runs.jsonl
      # took PyTorch's tuning runs from fmnist-lenet5-cosine/, measured the same day on the same
      # machine; its seeds were rerun here, alternating with crossbow's.)
      python3 benches/peers/tta_compare.py --python "$PY" --model lenet5 --dataset mnist --data-dir "$FMNIST" \
        --target 0.89 --epochs 15 --schedule cosine --run-to-end --eval-every 0.5 --seeds 3 \
        --crossbow-flags "--learners-per-device 1" --out "$OUT/$row" --resume ;;
    fmnist-lenet5-cosine-global) # the AVX2 default row with crossbow's batch of the grid as a global
      # batch (--global-batch-size: every iteration takes B images, split among the learners the
      # tuner picks), as PyTorch's batch is; tuned afresh on the same grid. (The committed
      # runs.jsonl took PyTorch's format and tuning runs from fmnist-lenet5-cosine-avx2/, the same
      # machine and day; its seeds were rerun here, alternating with crossbow's.)
      python3 benches/peers/tta_compare.py --python "$PY" --model lenet5 --dataset mnist --data-dir "$FMNIST" \
        --target 0.89 --epochs 15 --schedule cosine --run-to-end --eval-every 0.5 --seeds 3 --isa avx2 \
        --prune-tuning --crossbow-global-batch --out "$OUT/$row" --resume ;;
    cifar4k-resnet20)
      python3 benches/peers/tta_compare.py --python "$PY" --model resnet20 --dataset cifar10 \
        --data-dir data/cifar10-4k --target 0.55 --epochs 30 --eval-every 0.5 --seeds 3 --out "$OUT/$row" --resume ;;
    cifar4k-resnet20-r2|cifar4k-resnet20-best) # the cifar4k row again after recalibration ran on the
      # learners' cores (cabe1ae), with crossbow's defaults (-r2) and with its best configuration
      # (-best: S-SGD on 2 fixed learners, recalibration on 5 batches, which ../bn-eval/ found as
      # good as 20 for S-SGD). (The committed runs.jsonl took PyTorch's tuning runs from
      # cifar4k-resnet20/, the same machine; its seeds were rerun, alternating with crossbow's.)
      flags=""; [ "$row" = cifar4k-resnet20-best ] && flags="--learners-per-device 2 --sync ssgd --bn-eval recalibrate:5"
      python3 benches/peers/tta_compare.py --python "$PY" --model resnet20 --dataset cifar10 \
        --data-dir data/cifar10-4k --target 0.55 --epochs 30 --eval-every 0.5 --seeds 3 \
        --crossbow-flags "$flags" --out "$OUT/$row" --resume ;;
    fmnist-lenet5-cosine-avx2|cifar4k-resnet20-avx2) # the default rows with both sides capped at AVX2
      # (tta_compare --isa avx2: crossbow's CROSSBOW_CPU_ISA, PyTorch's ATEN_CPU_CAPABILITY and
      # ONEDNN_MAX_CPU_ISA), what an AVX2-only machine (AMD Zen 2) would run; tuned afresh, with
      # --prune-tuning (the same picks for less time). The ResNet-20 row's grid is cut to the
      # AVX-512 row's picks (b 16 and 64 at lr 0.025, crossbow's and PyTorch's): on the 2 vCPUs
      # of an AVX2-only Zen 3 the whole grid takes over an hour.
      case $row in
        fmnist-*) args=(--model lenet5 --dataset mnist --data-dir "$FMNIST" --target 0.89 --epochs 15
                        --schedule cosine --run-to-end) ;;
        *) args=(--model resnet20 --dataset cifar10 --data-dir data/cifar10-4k --target 0.55 --epochs 30
                 --batch-size 16,64 --lr 0.025) ;;
      esac
      python3 benches/peers/tta_compare.py --python "$PY" "${args[@]}" --eval-every 0.5 --seeds 3 --isa avx2 \
        --prune-tuning --out "$OUT/$row" --resume ;;
    cifar50k-resnet20) [ -n "$CIFAR50K" ] || { echo "row $row: set CIFAR50K to the cifar10-50k-jpeg folder" >&2; exit 2; }
      # The full-size row (issue 49): ResNet-20 on the 45,000/5,000 split of
      # cifar10-50k-jpeg as an image folder on both sides (crossbow's folder reader; PyTorch's
      # ImageFolder and transforms). The schedule is the one that takes crossbow's S-SGD at
      # k·b = 128 to 88.1% (median of 3 seeds, ../sma-full/): x0.1 at epochs 30 and 45 of 60.
      # Target 87%: every one of those seeds passed it (epochs 37-46), 0.5-1.6 points under its
      # final accuracy. The grid is tuned on a quarter of the schedule (15 epochs, x0.1 at 8 and 12,
      # ranked by seconds to 80%; --prune-tuning stops a tuning run once it is past its side's best
      # time so far, which leaves the picks unchanged); the seeds run the whole schedule (about
      # 30 min per crossbow run and 1-2 h per PyTorch run on 2 cores). Every run checkpoints
      # (--resume): rerun to continue. runs.jsonl keeps every finished run: commit it (git add -f)
      # to carry them to another machine; a run in flight continues only where its ckpt/ is.
      python3 benches/peers/tta_compare.py --python "$PY" --model resnet20 --dataset folder --data-dir "$CIFAR50K" \
        --crossbow-flags "--image-size 32 --augment crop-flip" --torch-flags "--image-size 32 --augment crop-flip" \
        --target 0.87 --epochs 60 --schedule multistep:30,45 --eval-every 1 --final-epochs 2 \
        --tune-epochs 15 --tune-schedule multistep:8,12 --tune-target 0.80 \
        --batch-size 16,64,128 --lr 0.05,0.1,0.2 --format-probe-epochs 0.2 --prune-tuning --seeds 3 \
        --out "$OUT/$row" --resume ;;
    *) echo "unknown row $row" >&2; exit 2 ;;
  esac
done
