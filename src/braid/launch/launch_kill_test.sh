#!/usr/bin/env bash
# `braid launch -n 2 -- braid train` when the launcher or mpirun is killed, when a rank dies during
# start-up, and when a failure is deterministic (Note [Job leftovers], Note [Deterministic
# failures]):
#   launcher       SIGKILL to the launcher mid-training: within 2 s no process of the job is left
#                  (mpirun, ranks, the launcher's guardian), nor its directory or any of the
#                  shared-memory files its ranks made (which were in that directory, not loose in
#                  /dev/shm)
#   mpirun         SIGKILL to mpirun mid-training: the launcher says so, exits non-zero at once,
#                  and leaves no process or file of the job
#   startup        SIGKILL to rank 1 as soon as it exists, 3 times: the cause names rank 1 and
#                  its pid (or says the pid is not known), never "PID 0"
#   unreaped       Note [Unreaped ranks]: an mpirun (a stand-in first on PATH) whose rank died
#                  and that never reaps it nor ends: the launcher ends the job within seconds,
#                  naming the dead process's pid, exit non-zero
#   deterministic  under --max-restarts 3, a config error and a save that fails at step 4
#                  (EFBIG under ulimit -f on rank 1) each stop after 2 attempts with one line
#                  naming the error and the step, exit non-zero
#   launch_kill_test.sh BRAID MODE
set -uo pipefail
BRAID=$(realpath "$1")
MODE=$2
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
work=$(mktemp -d /tmp/braid_launch_kill.XXXXXX)
trap 'pkill -9 -f "$work/" 2> /dev/null; rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}

cat > "$work/train.yaml" <<YAML
model:
  config: $ROOT/testdata/models/gpt2-vocab512.json
data:
  random_tokens: true
  seq_len: 16
training:
  micro_batch_size: 1
  max_steps: 1000000
  log_interval: 1
  eval_interval: 0
  eval_batches: 0
parallel:
  strategy: ddp
output:
  export_model: false
  samples: 0
YAML

# start NAME LAUNCH_ARGS...: a 2-rank job in the background ($launcher), its log in $work/NAME.log.
start() {
  local name=$1
  shift
  "$BRAID" launch -n 2 "$@" -- "$BRAID" train "$work/train.yaml" --set output.dir="$work/$name" \
    > "$work/$name.log" 2>&1 &
  launcher=$!
}
# wait_steps NAME N: until the job has logged N steps.
wait_steps() {
  for _ in $(seq 600); do
    [[ $(grep -c '| loss' "$work/$1.log") -ge $2 ]] && return 0
    kill -0 $launcher 2> /dev/null || { cat "$work/$1.log"; fail "$1 ended before step $2"; }
    sleep 0.1
  done
  cat "$work/$1.log"
  fail "$1: no step $2 within 60 s"
}
# rank_pid NAME R: the pid of rank R of job NAME (empty when not running).
rank_pid() {
  local p
  for p in $(pgrep -f "braid train .*$work/$1\$"); do
    grep -qzx "OMPI_COMM_WORLD_RANK=$2" /proc/$p/environ 2> /dev/null &&
      { echo "$p"; return; }
  done
}
# note_files NAME: the job's directory ($jobdir, from rank 0's environment) and the shared-memory
# files its ranks made there ($files); there must be one per rank.
note_files() {
  local p
  p=$(rank_pid "$1" 0)
  jobdir=$(tr '\0' '\n' < /proc/$p/environ | sed -n 's/^BRAID_LAUNCH_JOB=//p')
  [[ -d $jobdir ]] || fail "$1: rank 0 ($p) has no job directory ('$jobdir')"
  files=$(find "$jobdir" -name 'vader_segment.*' -printf '%f\n')
  [[ $(wc -l <<< "$files") == 2 ]] ||
    fail "$1: $(wc -l <<< "$files") shared-memory segments in $jobdir, not 2: $files"
}
# check_gone NAME SECONDS: within SECONDS no process of job NAME is left, nor its directory, nor
# one of its files anywhere in /dev/shm.
check_gone() {
  local name=$1 limit=$2 t0 left="" f
  t0=$(date +%s.%N)
  while :; do
    left=$(pgrep -f "$work/$name" | tr '\n' ' ')
    [[ -z $left && ! -e $jobdir ]] && break
    awk "BEGIN{exit !($(date +%s.%N) - $t0 > $limit)}" &&
      fail "$name: after ${limit}s, processes left: '$left'; $jobdir $([[ -e $jobdir ]] && echo 'still there' || echo gone)"
    sleep 0.02
  done
  gone_s=$(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}")
  for f in $files; do
    [[ -z $(find /dev/shm -name "$f" 2> /dev/null) ]] || fail "$name: /dev/shm still holds $f"
  done
}

case $MODE in
  launcher)
    start launcher
    wait_steps launcher 3
    note_files launcher
    disown $launcher  # no "Killed" notice from bash
    kill -9 $launcher
    check_gone launcher 2
    echo "launcher: SIGKILLed; every process of the job, $jobdir and its $(wc -w <<< "$files")" \
      "segments gone ${gone_s}s later"
    ;;
  mpirun)
    start mpirun
    wait_steps mpirun 3
    note_files mpirun
    mp=$(pgrep -f "^[^ ]*mpirun .*$work/mpirun\$")
    [[ -n $mp ]] || fail "mpirun not found"
    t0=$(date +%s.%N)
    kill -9 "$mp"
    wait $launcher
    rc=$?
    took=$(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}")
    (( rc != 0 )) || fail "exit 0 after mpirun was killed"
    awk "BEGIN{exit !($took < 5)}" || fail "the launcher took ${took}s to end"
    grep -q "^braid launch: job failed (exit $rc): mpirun (pid $mp) was killed by SIGKILL" \
      "$work/mpirun.log" || { cat "$work/mpirun.log"; fail "no cause naming mpirun's SIGKILL"; }
    check_gone mpirun 0.5
    echo "mpirun: SIGKILLed; the launcher exited $rc ${took}s later:" \
      "$(grep -E '^braid launch: ' "$work/mpirun.log" | tr '\n' ' ')"
    ;;
  startup)
    for i in 1 2 3; do
      start "startup$i"
      victim=""
      for _ in $(seq 2000); do
        victim=$(rank_pid "startup$i" 1)
        [[ -n $victim ]] && break
        sleep 0.005
      done
      [[ -n $victim ]] || fail "startup$i: rank 1 never appeared"
      kill -9 "$victim"
      wait $launcher
      rc=$?
      cause=$(grep '^braid launch: job failed' "$work/startup$i.log")
      echo "startup$i: killed rank 1 (pid $victim): exit $rc: $cause"
      (( rc != 0 )) || fail "startup$i: exit 0"
      # Note [Unreaped ranks]: mpirun may never notice a rank killed this early; the launcher
      # then ends the job naming the pid (and the rank when it saw it alive).
      [[ $cause == *"rank 1"* || $cause == *"(pid $victim) died during start-up"* ]] ||
        { cat "$work/startup$i.log"; fail "the cause names neither rank 1 nor pid $victim"; }
      [[ $cause != *"PID 0 "* ]] || fail "the cause says PID 0"
      [[ $cause == *"PID $victim "* || $cause == *"PID not known"* || $cause == *"pid $victim"* ||
         $cause == *"] braid"* ]] || fail "the cause names another pid than $victim"
      [[ -z $(pgrep -f "$work/startup$i") ]] || fail "startup$i: processes left"
    done
    ;;
  deterministic)
    # A config error: the same line before any step, twice.
    sed 's/micro_batch_size/micro_bach_size/' "$work/train.yaml" > "$work/misspelt.yaml"
    "$BRAID" launch -n 2 --max-restarts 3 -- "$BRAID" train "$work/misspelt.yaml" \
      --set output.dir="$work/config" > "$work/config.log" 2>&1
    rc=$?
    line=$(grep '^braid launch: job failed' "$work/config.log")
    echo "config error: exit $rc: $line"
    (( rc != 0 )) || fail "config error: exit 0"
    [[ $(grep -c 'restarting$' "$work/config.log") == 1 ]] ||
      { cat "$work/config.log"; fail "config error: not exactly one restart"; }
    [[ $line == *"deterministic failure, not restarting: attempts 1 and 2 failed the same way before any step: [rank "*"micro_bach_size"* ]] ||
      { cat "$work/config.log"; fail "config error: no deterministic-failure line naming the error"; }
    # A save that fails at step 4 on every attempt (rank 1 may write only 64 KiB).
    ckpt=(--set training.max_steps=4 --set checkpoint.interval=2 --set output.dir="$work/efbig")
    "$BRAID" launch -n 2 -- "$BRAID" train "$work/train.yaml" "${ckpt[@]}" \
      --set training.max_steps=2 > "$work/efbig-2.log" 2>&1 || { cat "$work/efbig-2.log"; fail "steps 1-2"; }
    "$BRAID" launch -n 2 --max-restarts 3 -- bash -c \
      '[[ $OMPI_COMM_WORLD_RANK == 1 ]] && ulimit -f 64; exec "$@"' _ \
      "$BRAID" train "$work/train.yaml" "${ckpt[@]}" > "$work/efbig.log" 2>&1
    rc=$?
    line=$(grep '^braid launch: job failed' "$work/efbig.log")
    echo "failed save: exit $rc: $line"
    (( rc != 0 )) || fail "failed save: exit 0"
    [[ $(grep -c 'resuming from .*step-00000002' "$work/efbig.log") == 2 ]] ||
      { cat "$work/efbig.log"; fail "failed save: not 2 attempts resuming from step 2"; }
    [[ $line == *"deterministic failure, not restarting: attempts 1 and 2 failed the same way at step 4: "*"rank-00001.bin"* ]] ||
      { cat "$work/efbig.log"; fail "failed save: no deterministic-failure line naming the write at step 4"; }
    ;;
  unreaped)
    mkdir -p "$work/bin"
    cat > "$work/bin/mpirun" <<'PY'
#!/usr/bin/env python3
import os, sys, time
if "--version" in sys.argv:
    print("mpirun (Open MPI) 4.1.4")
    sys.exit(0)
if os.fork() == 0:
    os._exit(137)  # the rank, dead at once; this "mpirun" never reaps it
time.sleep(120)
PY
    chmod +x "$work/bin/mpirun"
    t0=$SECONDS
    out=$(PATH="$work/bin:$PATH" timeout 60 "$BRAID" launch -n 2 -- /bin/true 2>&1)
    rc=$?
    echo "unreaped: exit $rc after $((SECONDS - t0)) s: $(grep 'job failed' <<< "$out")"
    (( rc != 0 && rc != 124 )) || fail "unreaped: exit $rc"
    (( SECONDS - t0 < 20 )) || fail "unreaped: took $((SECONDS - t0)) s"
    grep -Eq "^braid launch: job failed .*\(pid [0-9]+\) died during start-up and mpirun never noticed" <<< "$out" ||
      fail "unreaped: no cause naming the dead process"
    ;;
  *) fail "unknown mode '$MODE'" ;;
esac
echo "launch_kill_test $MODE: passed"
