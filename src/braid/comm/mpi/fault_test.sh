#!/usr/bin/env bash
# fault_test.sh BINARY NP SCENARIO TRANSPORT REPEATS: runs a fault scenario of
# comm_fault_mpi_test REPEATS times as NP processes and checks, every time, that the job ends with
# a non-zero status within the collective timeout (2 s) + 5 s (plus start-up), that no rank finished cleanly, that
# no process is left behind, and that the output names the culprit (the last rank).
set -uo pipefail
bin=$1 np=$2 scenario=$3 transport=$4 repeats=${BRAID_FAULT_REPEATS:-${5:-1}}
here=$(cd "$(dirname "$0")" && pwd)
runner=$here/../../../../scripts/mpirun-test.sh
culprit=$((np - 1))
case $scenario in
  skip) want="all_reduce seq 2 .*timed out after .*ranks \[$culprit\] never arrived" ;;
  kill | kill_bcast) want="rank $culprit \(pid [0-9]+\) died|process rank $culprit .*signal 9" ;;
  mismatch) want="mismatch at seq 1: rank 0 called all_reduce\(f32, count 1024, sum\) but .*rank $culprit called all_reduce\(f32, count 1000, sum\)" ;;
  *) echo "unknown scenario $scenario" >&2; exit 2 ;;
esac
# The limit is timeout + 5 s after start-up; start-up (mpirun, MPI_Init, first collective) is
# measured by a clean run first, since a loaded machine can take seconds for it.
t0=$(date +%s%N)
if ! out=$(BRAID_COMM_TRANSPORT=$transport timeout 60 "$runner" "$np" "$bin" ok 2>&1); then
  echo "FAIL: the fault-free run failed" >&2
  echo "$out" | tail -20 >&2
  exit 1
fi
startup_ms=$((($(date +%s%N) - t0) / 1000000))
limit_ms=$((7000 + startup_ms))
worst=0
for ((i = 1; i <= repeats; i++)); do
  nonce="fault-$$-$i-$RANDOM"
  start=$(date +%s%N)
  out=$(BRAID_COMM_TRANSPORT=$transport timeout 60 "$runner" "$np" "$bin" "$scenario" "$nonce" 2>&1)
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  left=$(pgrep -f "$nonce" || true)
  fail=""
  [[ $rc == 0 ]] && fail="exit status 0"
  [[ $rc == 124 ]] && fail="hung (killed by timeout 60)"
  ((ms > limit_ms)) && fail="$fail; took ${ms} ms > ${limit_ms} ms"
  grep -q "finished cleanly" <<<"$out" && fail="$fail; a rank finished cleanly"
  grep -Eq "$want" <<<"$out" || fail="$fail; no line matches /$want/"
  [[ -n $left ]] && { fail="$fail; processes left: $left"; kill -9 $left 2>/dev/null; }
  if [[ -n $fail ]]; then
    echo "FAIL $scenario np=$np transport=$transport run $i/$repeats: $fail" >&2
    echo "$out" | tail -40 >&2
    exit 1
  fi
  ((ms > worst)) && worst=$ms
  line=$(grep -Eo "$want" <<<"$out" | head -1)
  echo "run $i/$repeats: exit $rc in ${ms} ms: $line"
done
echo "PASS $scenario np=$np transport=$transport: $repeats runs, slowest ${worst} ms (limit ${limit_ms} ms)"
