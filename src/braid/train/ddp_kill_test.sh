#!/usr/bin/env bash
# A rank that dies mid-step (SIGKILL) during DDP training: the job must end non-zero within the
# collective timeout + 5 s, and the launcher's one-line cause must name the dead rank.
# With SIGNAL=STOP the rank is SIGSTOPped instead: the cause must name it as the stopped rank
# (its peer times out; once mpirun resumes it to end the job, it may blame its healthy peer).
#   [SIGNAL=KILL|STOP] ddp_kill_test.sh BRAID CONFIG [REPEATS=1] [--set key=value ...]
# (the extra settings choose another layout, e.g. a pipeline whose stage dies)
set -uo pipefail
BRAID=$1
CONFIG=$2
REPEATS=${3:-1}
SIGNAL=${SIGNAL:-KILL}
shift $(( $# < 3 ? $# : 3 ))
TIMEOUT_S=4
log=$(mktemp)
# Every process of this test carries this output dir on its command line, so pgrep/pkill find
# this test's ranks and never another test's that trains the same config.
marker=$(mktemp -d /tmp/braid_kill.XXXXXX)
trap 'rm -rf "$log" "$marker"' EXIT

for rep in $(seq "$REPEATS"); do
  # Emptied here, not by the background job's redirection: that runs after the fork, and a loaded
  # machine can let the wait below read the last repeat's steps first (and find no rank 1).
  : > "$log"
  "$BRAID" launch -n 2 -- "$BRAID" train "$CONFIG" --set model.preset=gpt2-tiny \
    --set data.seq_len=64 --set training.max_steps=1000000 --set training.log_interval=1 \
    --set parallel.comm_timeout_s=$TIMEOUT_S --set output.dir="$marker" "$@" \
    > "$log" 2>&1 &
  launcher=$!
  # Wait for training to be under way (a few logged steps), then kill (or stop) rank 1.
  for _ in $(seq 600); do
    [ "$(grep -c 'step ' "$log")" -ge 3 ] && break
    kill -0 $launcher 2>/dev/null || { echo "FAIL: job ended before the kill:"; cat "$log"; exit 1; }
    sleep 0.1
  done
  victim=""
  for p in $(pgrep -f "braid train .*$marker"); do
    grep -qzx 'OMPI_COMM_WORLD_RANK=1' /proc/$p/environ 2> /dev/null && victim=$p
  done
  if [ -z "$victim" ]; then
    echo "FAIL: rank 1 not found among: $(pgrep -af "braid train .*$marker")"; cat "$log"
    kill $launcher; exit 1
  fi
  # Anywhere in a step (inside a collective or not).
  sleep "0.$(( RANDOM % 10 ))"
  start=$(date +%s.%N)
  kill -"$SIGNAL" "$victim"
  # The job must end by itself within timeout + 5 s.
  deadline=$(awk "BEGIN{print $TIMEOUT_S + 5}")
  while kill -0 $launcher 2>/dev/null; do
    if awk "BEGIN{exit !($(date +%s.%N) - $start > $deadline + 2)}"; then
      echo "FAIL: the job still runs $deadline s after rank 1 died (hang)"; kill -9 $launcher
      pkill -9 -f "braid train .*$marker"; exit 1
    fi
    sleep 0.05
  done
  wait $launcher
  status=$?
  elapsed=$(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $start}")
  cause=$(grep 'braid launch: job failed' "$log" | tail -1)
  echo "repeat $rep: exit $status after ${elapsed}s: $cause"
  [ $status -ne 0 ] || { echo "FAIL: exit status 0"; cat "$log"; exit 1; }
  awk "BEGIN{exit !($elapsed <= $deadline)}" || { echo "FAIL: took ${elapsed}s > ${deadline}s"; exit 1; }
  echo "$cause" | grep -q 'rank 1' || { echo "FAIL: the cause does not name rank 1"; cat "$log"; exit 1; }
  if [[ $SIGNAL == STOP ]]; then
    echo "$cause" | grep -q "): rank 1 (pid $victim) was stopped" ||
      { echo "FAIL: the cause does not name rank 1 as the stopped rank"; cat "$log"; exit 1; }
    # Resumed to be ended, the stopped rank says it was stopped (Note [Stopped waiter]) rather
    # than blaming the healthy rank 0.
    if grep -q "ranks \[0\] stopped inside it" "$log"; then
      echo "FAIL: a rank blames the healthy rank 0"; cat "$log"; exit 1
    fi
  fi
  if pgrep -f "braid train .*$marker" > /dev/null; then
    echo "FAIL: ranks left running"; pkill -9 -f "braid train .*$marker"; exit 1
  fi
done
echo "ddp_kill_test: $REPEATS repeat(s) passed"
