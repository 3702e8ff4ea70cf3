#!/usr/bin/env bash
# mpirun-test.sh NP BINARY ARGS...: runs BINARY as NP processes on this machine under mpirun and
# exits non-zero if any rank fails (mpirun's own rule). Handles what mpirun needs here: running
# as root, more ranks than cores, no core binding (ranks and their comm threads share cores),
# and the faster shared-memory copy mechanism. Output lines carry the rank: "[1,0]<stdout>:".
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 NP BINARY [ARGS...]" >&2
  exit 2
fi
np=$1
shift
if ! command -v mpirun >/dev/null; then
  echo "mpirun-test.sh: mpirun not found (apt-get install openmpi-bin)" >&2
  exit 2
fi
if [[ $(id -u) == 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
exec mpirun -np "$np" --oversubscribe --bind-to none --tag-output \
  --mca btl_vader_single_copy_mechanism none --mca btl self,vader,tcp \
  --mca rmaps_base_oversubscribe 1 "$@"
