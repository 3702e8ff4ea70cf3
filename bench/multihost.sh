#!/usr/bin/env bash
# Collectives across hosts: 2 test hosts in network namespaces (scripts/netns/hosts.sh) x 2
# ranks, MPI over TCP between them, shared memory inside. `braid bench comm` once with the
# hierarchical all_reduce (Note [Hierarchical all_reduce]) and once flat
# (BRAID_COMM_HIERARCHY=0: reduce-scatter + all-gather over direct messages), each beside raw
# MPI (MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather) timed in the same processes.
# Raw MPI runs twice: as mpirun sets it up, and with mpi_yield_when_idle=1, its best setting here
# (4 ranks busy-polling TCP on 2 cores starve each other; yielding costs braid, whose waits
# already back off, about 2x, so braid's columns come from the default run).
# Needs root (namespaces). Time per call in us, slowest rank, best of ROUNDS rounds.
#
#   bench/multihost.sh [ROUNDS=3] [MAX_BYTES=64M]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
MAX=${2:-64M}
BRAID=$(realpath "${BRAID:-build/release/src/braid/cli/braid}")
[ -x "$BRAID" ] || { echo "build braid first (make build)" >&2; exit 1; }
why=$(scripts/netns/hosts.sh check) || { echo "multihost bench: $why" >&2; exit 1; }
work=$(mktemp -d)
trap 'scripts/netns/hosts.sh down; rm -rf "$work"' EXIT
hostfile=$(scripts/netns/hosts.sh up 2 2)

lscpu | sed -n 's/^Model name: *\(.*\)/CPU: \1/p'
lscpu | sed -n 's/^CPU(s): *\(.*\)/cores: \1/p'
echo "date: $(date '+%Y-%m-%d %H:%M:%S %Z')  braid $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "2 hosts (network namespaces joined by a bridge) x 2 ranks, f32"
echo

run() {  # run HIERARCHY OPS OUT [YIELD]
  OMPI_MCA_mpi_yield_when_idle=${4:-0} BRAID_COMM_HIERARCHY=$1 "$BRAID" launch -n 4 --hostfile "$hostfile" \
    --launch-agent "$PWD/scripts/netns/rsh" --network 10.77.0.0/24 -- "$BRAID" bench comm \
    --min-bytes 64K --max-bytes "$MAX" --ops "$2" --rounds "$ROUNDS" > "$3" 2>&1 ||
    { cat "$3"; exit 1; }
}
run 1 all_reduce "$work/hier"
run 0 all_reduce,reduce_scatter,all_gather "$work/flat"
run 1 all_reduce,reduce_scatter,all_gather "$work/yield" 1

# The rows of one op: "size time_braid time_raw" (bench comm's columns).
rows() { awk -v op="$1" '$3 == op { print $4 " " $5 "\t" $9 "\t" $13 }' "$2"; }

echo "all_reduce, time per call (us):"
echo
echo "| size | braid hierarchical | braid flat | raw MPI | raw MPI, yield | hierarchical vs flat | hierarchical vs best raw MPI |"
echo "|---|---|---|---|---|---|---|"
paste <(rows all_reduce "$work/hier") <(rows all_reduce "$work/flat") <(rows all_reduce "$work/yield") |
  awk -F'\t' '{ best = $6 < $9 ? $6 : $9
    printf "| %s | %.0f | %.0f | %.0f | %.0f | %.2fx | %.2fx |\n", $1, $2, $5, $6, $9, $5 / $2, best / $2 }'
for op in reduce_scatter all_gather; do
  echo
  echo "$op (direct messages), time per call (us):"
  echo
  echo "| size | braid | raw MPI | raw MPI, yield | speedup vs best raw MPI |"
  echo "|---|---|---|---|---|"
  paste <(rows $op "$work/flat") <(rows $op "$work/yield") |
    awk -F'\t' '{ best = $3 < $6 ? $3 : $6
      printf "| %s | %.0f | %.0f | %.0f | %.2fx |\n", $1, $2, $3, $6, best / $2 }'
done
