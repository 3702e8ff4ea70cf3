#!/usr/bin/env bash
# A default `braid launch -n 2` on one host listens on loopback only (Note [Job network]): every
# TCP/UDP listening socket of the job's processes (mpirun and both ranks) is on 127.0.0.1 or
# ::1, none on a wildcard or another address of this machine.
#   launch_listeners_test.sh BRAID
set -uo pipefail
BRAID=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=../../../testing/listeners.sh
. "$ROOT/testing/listeners.sh"
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d /tmp/braid_listeners.XXXXXX)
pid=""
cleanup() {
  [ -n "$pid" ] && { job_pids "$pid" | xargs -r kill -9 2> /dev/null; }
  rm -rf "$work"
}
trap cleanup EXIT

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
  dir: $work/run
  export_model: false
  samples: 0
YAML

"$BRAID" launch -n 2 -- "$BRAID" train "$work/train.yaml" > "$work/log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [ "$(grep -c 'step ' "$work/log")" -ge 3 ] && break
  kill -0 $pid 2> /dev/null || { cat "$work/log"; fail "the job ended before it was looked at"; }
  sleep 0.1
done
[ "$(grep -c 'step ' "$work/log")" -ge 3 ] || { cat "$work/log"; fail "no training within 60 s"; }
job_listeners $pid > "$work/listeners"
kill $pid
wait $pid 2> /dev/null
pid=""
awk '{print "  " $1 " " $5 "  " $7}' "$work/listeners"
[ "$(grep -c '"braid"' "$work/listeners")" -ge 2 ] || fail "the ranks' listeners were not found"
grep -q '"mpirun"' "$work/listeners" || fail "mpirun's listeners were not found"
bad=$(awk '$5 !~ /^(127\.0\.0\.1|\[::1\]):[0-9]+$/' "$work/listeners")
[ -z "$bad" ] || { echo "$bad"; fail "listeners beyond loopback"; }
echo "launch_listeners_test: every listener of a default 2-rank launch is on loopback"
