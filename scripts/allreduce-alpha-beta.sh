#!/usr/bin/env bash
# Measures MPI_Allreduce (f32 sum) between RANKS processes on this machine at sizes from 4 B to
# 16 MiB and at the ResNet-20/32/50 buffer sizes, then fits the cost model's alpha and bandwidth
# to the sizes from 64 KiB to 2 MiB (the regime of the ResNet-20/32 buffers; smaller messages go
# through another protocol, larger ones fall out of the caches) and predicts the ResNet sizes
# from the fit, with the median and with the minimum of each size's calls (BENCHMARKS.md
# section 12).
#   scripts/allreduce-alpha-beta.sh OUT.csv [ROUNDS] [REPS] [RANKS]
# Needs Open MPI (`apt-get install -y libopenmpi-dev openmpi-bin`). As root, mpirun also needs
# OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (set here when run as root).
set -euo pipefail
out=${1:?usage: $0 OUT.csv [ROUNDS] [REPS] [RANKS]}
rounds=${2:-10}
reps=${3:-10}
ranks=${4:-2}
here=$(cd "$(dirname "$0")" && pwd)
bin=$(mktemp -d)/allreduce-alpha-beta
trap 'rm -rf "$(dirname "$bin")"' EXIT
mpicc -O2 -o "$bin" "$here/allreduce-alpha-beta.c"
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# Float counts: the fit sizes, then crossbow's ResNet-20, ResNet-32 and ResNet-50 parameter
# counts (`crossbow_replica::ModelKind`, f32: 1,089,896 / 1,867,624 / 102,228,128 bytes).
fit="1 16 256 4096 16384 32768 65536 131072 196608 262144 393216 524288 1048576 4194304"
check="272474 466906 25557032"
{
  echo "# $(date -u +%FT%TZ) $(uname -n) load: $(uptime | sed 's/.*load average: //')"
  mpirun --oversubscribe -np "$ranks" "$bin" "$rounds" "$reps" $fit $check
  echo "# after: load $(uptime | sed 's/.*load average: //')"
} > "$out"
for stat in median min; do
  cargo run -q -p crossbow-benches --bin scaling-model -- fit "$out" --ranks "$ranks" \
    --check 1089896,1867624,102228128 --min-bytes 65536 --max-bytes 2097152 --stat "$stat"
  echo
done
