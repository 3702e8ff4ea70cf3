#!/usr/bin/env bash
# Collectives across hosts: 2 test hosts in network namespaces (scripts/netns/hosts.sh) x 2
# ranks, MPI over TCP between them, shared memory inside. `braid bench comm` times braid's
# all_reduce, reduce_scatter and all_gather beside raw MPI (MPI_Allreduce,
# MPI_Reduce_scatter_block, MPI_Allgather) in the same processes, three times:
#   default  as mpirun sets MPI up: it busy-polls, and 4 ranks polling TCP on 2 cores starve
#            each other (raw MPI takes milliseconds);
#   yield    mpi_yield_when_idle=1, raw MPI's best setting here (what OpenMPI picks itself on a
#            host it knows to be oversubscribed; these hosts share the cores unknown to it);
#   flat     yield, with BRAID_COMM_HIERARCHY=0: braid without the hierarchical all_reduce and
#            the two-level small collectives (Note [Two-level small collectives]).
# Every ratio compares braid and raw MPI from the same run. Needs root (namespaces). Time per
# call in us, slowest rank, best of ROUNDS rounds. RATE (tc's units, e.g. 4gbit) limits what
# each host sends, like a network slower than this machine's copies (unlimited, the hosts'
# TCP is as fast as 2 cores copy and the ranks' CPU time decides).
#
#   [MIN=4K] [RATE=4gbit] bench/multihost.sh [ROUNDS=3] [MAX_BYTES=64M]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
MAX=${2:-64M}
MIN=${MIN:-64K}
BRAID=$(realpath "${BRAID:-build/release/src/braid/cli/braid}")
[ -x "$BRAID" ] || { echo "build braid first (make build)" >&2; exit 1; }
why=$(scripts/netns/hosts.sh check) || { echo "multihost bench: $why" >&2; exit 1; }
work=$(mktemp -d)
trap 'scripts/netns/hosts.sh down; rm -rf "$work"' EXIT
hostfile=$(scripts/netns/hosts.sh up 2 2)
[ -z "${RATE:-}" ] || scripts/netns/hosts.sh rate "$RATE"

lscpu | sed -n 's/^Model name: *\(.*\)/CPU: \1/p'
lscpu | sed -n 's/^CPU(s): *\(.*\)/cores: \1/p'
echo "date: $(date '+%Y-%m-%d %H:%M:%S %Z')  braid $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "2 hosts (network namespaces joined by a bridge) x 2 ranks, f32${RATE:+, each host sending at most $RATE}"
echo

run() {  # run HIERARCHY OPS OUT [YIELD]
  OMPI_MCA_mpi_yield_when_idle=${4:-0} BRAID_COMM_HIERARCHY=$1 "$BRAID" launch -n 4 --hostfile "$hostfile" \
    --launch-agent "$PWD/scripts/netns/rsh" --network 10.77.0.0/24 -- "$BRAID" bench comm \
    --min-bytes "$MIN" --max-bytes "$MAX" --ops "$2" --rounds "$ROUNDS" > "$3" 2>&1 ||
    { cat "$3"; exit 1; }
}
run 1 all_reduce,reduce_scatter,all_gather "$work/default" 0
run 1 all_reduce,reduce_scatter,all_gather "$work/yield" 1
run 0 all_reduce,reduce_scatter,all_gather "$work/flat" 1

# The rows of one op: "size time_braid time_raw" (bench comm's columns).
rows() { awk -v op="$1" '$3 == op { print $4 " " $5 "\t" $9 "\t" $13 }' "$2"; }

for op in all_reduce reduce_scatter all_gather; do
  echo
  echo "$op, time per call (us); braid / raw MPI speedups from the same processes:"
  echo
  echo "| size | braid, yield | raw MPI, yield | speedup | braid flat, yield | raw MPI (flat run) | speedup | braid, default | raw MPI, default | speedup |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  paste <(rows $op "$work/yield") <(rows $op "$work/flat") <(rows $op "$work/default") |
    awk -F'\t' '{ printf "| %s | %.0f | %.0f | %.2fx | %.0f | %.0f | %.2fx | %.0f | %.0f | %.2fx |\n",
      $1, $2, $3, $3 / $2, $5, $6, $6 / $5, $8, $9, $9 / $8 }'
done
