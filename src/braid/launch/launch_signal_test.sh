#!/usr/bin/env bash
# SIGTERM to `braid launch` (a scheduler's stop, `timeout`, a closed terminal's SIGHUP alike):
# the job stops, the launcher says so and exits 143, and no process of the job is left.
#   1. ranks that die on SIGTERM (mpirun stops them);
#   2. an mpirun that ignores SIGTERM, with a child that ignores it too (a stand-in mpirun put
#      first on PATH): after 10 s the launcher SIGKILLs it and every descendant.
#   launch_signal_test.sh BRAID
set -uo pipefail
BRAID=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# run_case NAME MARKER COUNT MIN_S MAX_S ARGS...: starts `braid ARGS`, waits until COUNT
# processes whose command line starts with MARKER run (the ranks, not the launcher or mpirun,
# whose command lines hold it too), sends SIGTERM, and checks status, time, message, leftovers.
run_case() {
  local name=$1 marker="^$2" count=$3 min_s=$4 max_s=$5
  shift 5
  "$@" > "$work/$name.log" 2>&1 &
  local launcher=$!
  for _ in $(seq 300); do
    [[ $(pgrep -f "$marker" | wc -l) -ge $count ]] && break
    sleep 0.1
  done
  [[ $(pgrep -f "$marker" | wc -l) -ge $count ]] || echo "warning: $name: $count x $marker not seen"
  local start
  start=$(date +%s.%N)
  kill -TERM $launcher
  wait $launcher
  local rc=$? elapsed
  elapsed=$(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $start}")
  local fail=""
  [[ $rc == 143 ]] || fail="exit $rc, not 143"
  awk "BEGIN{exit !($elapsed >= $min_s && $elapsed <= $max_s)}" ||
    fail="$fail; took ${elapsed}s, not within [$min_s, $max_s]"
  grep -q "braid launch: interrupted by SIGTERM" "$work/$name.log" || fail="$fail; no message"
  if pgrep -f "$marker" > /dev/null; then
    fail="$fail; processes left: $(pgrep -f "$marker" | tr '\n' ' ')"
    pkill -9 -f "$marker"
  fi
  if [[ -n $fail ]]; then
    echo "FAIL $name: $fail"
    cat "$work/$name.log"
    failures=$((failures + 1))
  else
    echo "ok $name: exit $rc after ${elapsed}s: $(tail -1 "$work/$name.log")"
  fi
}

m1="sleep 987.$$1"
run_case ranks "$m1" 2 0 8 "$BRAID" launch -n 2 -- ${m1}

m2="sleep 987.$$2"
mkdir -p "$work/bin"
cat > "$work/bin/mpirun" <<EOS
#!/bin/sh
trap '' TERM INT HUP
${m2} &
wait
EOS
chmod +x "$work/bin/mpirun"
run_case hung-mpirun "$m2" 1 9 20 env PATH="$work/bin:$PATH" "$BRAID" launch -n 2 -- true

[[ $failures == 0 ]] || { echo "launch_signal_test: $failures failed"; exit 1; }
echo "launch_signal_test: all passed"
