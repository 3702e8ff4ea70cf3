#!/usr/bin/env bash
# Multi-host runs on this machine (label multihost): two test hosts in network namespaces
# (scripts/netns/hosts.sh), 2 ranks each, MPI over TCP between them and shared memory inside.
#   multihost_test.sh BRAID MODE
# MODE:
#   collectives  the comm checks across hosts (hierarchical all_reduce included), bit-exact
#   parity       DDP and ZeRO-3 on 2 hosts x 2 ranks end with weights bit-identical to 4 ranks on
#                one host
#   link-down    host h2's link goes down mid-training: the job ends within timeout + 5 s, the
#                cause names h2, no process is left
#   kill-host    every process of host h2 is killed mid-training: the same; then again under
#                --max-restarts 1 with checkpoints, and the restarted job ends bit-identical to an
#                uninterrupted one
#   listeners    with a second, outside network on each host and the hostfile by address (no
#                --network: the launcher derives it), every listening socket of the job's
#                processes is on the job's network or loopback, none on a wildcard or outside
#   calibrate    braid plan --calibrate-network across the hosts writes the network fits a
#                2-host layout is priced by; on one host it is refused on every rank
# Exits 77 (skipped, with the reason) where namespaces cannot be made (not root, no iproute2).
set -uo pipefail
BRAID=$(realpath "$1")
MODE=$2
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
HOSTS="$ROOT/scripts/netns/hosts.sh"
# shellcheck source=../../../testing/listeners.sh
. "$ROOT/testing/listeners.sh"
TIMEOUT_S=4
fail() { echo "FAIL: $*"; exit 1; }

if ! why=$("$HOSTS" check 2>&1); then
  echo "SKIP: network namespaces cannot be made here: $why"
  exit 77
fi
work=$(mktemp -d /tmp/braid_multihost.XXXXXX)
cleanup() {
  for ns in braid-h1 braid-h2; do ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null; done
  pkill -9 -f "$work" 2>/dev/null
  "$HOSTS" down
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
HOSTFILE=$("$HOSTS" up 2 2) || fail "could not create the test hosts"

# launch_hosts ARGS...: braid launch across the two hosts (4 ranks unless ARGS say otherwise).
launch_hosts() {
  "$BRAID" launch -n 4 --hostfile "$HOSTFILE" --launch-agent "$ROOT/scripts/netns/rsh" \
    --network 10.77.0.0/24 "$@"
}

cat > "$work/train.yaml" <<YAML
model:
  config: $ROOT/testdata/models/gpt2-vocab512.json
data:
  random_tokens: true
  seq_len: 32
training:
  micro_batch_size: 2
  gradient_accumulation_steps: 2
  max_steps: 8
  log_interval: 1
  eval_interval: 0
  eval_batches: 0
optimizer:
  type: adamw
  lr: 1.0e-3
  grad_clip: 1.0
schedule:
  type: cosine
  warmup_steps: 2
parallel:
  strategy: ddp
output:
  export_model: true
  samples: 0
YAML

# wait_for_steps LOG PID N: until N step lines are logged (fails if the job ends first).
wait_for_steps() {
  for _ in $(seq 1200); do
    [ "$(grep -c 'step ' "$1")" -ge "$3" ] && return 0
    kill -0 "$2" 2>/dev/null || { cat "$1"; fail "the job ended before the fault"; }
    sleep 0.05
  done
  cat "$1"; fail "no training progress within 60 s"
}

# expect_end_naming_h2 PID LOG START: the job ends non-zero within timeout + 5 s of START, its
# cause names host h2, and no process of it is left.
expect_end_naming_h2() {
  local pid=$1 log=$2 start=$3 deadline
  deadline=$(awk "BEGIN{print $TIMEOUT_S + 5}")
  while kill -0 "$pid" 2>/dev/null; do
    if awk "BEGIN{exit !($(date +%s.%N) - $start > $deadline + 5)}"; then
      cat "$log"; fail "the job still runs $deadline s after the fault (hang)"
    fi
    sleep 0.05
  done
  wait "$pid"
  local status=$? elapsed cause
  elapsed=$(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $start}")
  cause=$(grep 'braid launch: job failed' "$log" | tail -1)
  echo "  exit $status after ${elapsed}s: $cause"
  [ "$status" -ne 0 ] || { cat "$log"; fail "exit status 0"; }
  awk "BEGIN{exit !($elapsed <= $deadline)}" || { cat "$log"; fail "took ${elapsed}s > ${deadline}s"; }
  echo "$cause" | grep -q 'h2' || { cat "$log"; fail "the cause does not name host h2"; }
  # h2's ranks are not the launcher's to kill (its MPI daemon runs detached, unreachable once the
  # link is down): they end on their own comm timeout, which has passed by now; a loaded machine
  # may take a moment more to reap them.
  for _ in $(seq 30); do
    pgrep -f "braid train .*$work" > /dev/null || break
    sleep 0.1
  done
  if pgrep -f "braid train .*$work" > /dev/null; then
    pgrep -af "braid train .*$work"; ps -o pid,stat,etime,cmd -p "$(pgrep -d, -f "braid train .*$work")"
    fail "processes left running 3 s after the job ended"
  fi
}

# kill_host hN: SIGKILL every process of host hN (its MPI daemon and its ranks).
kill_host() { ip netns pids "braid-$1" | xargs -r kill -9; }

# fault_mid_training COMMAND...: trains across the hosts until a few steps are logged, runs
# COMMAND (the fault), and expects the job to end in time naming h2.
fault_mid_training() {
  launch_hosts --timeout $TIMEOUT_S -- "$BRAID" train "$work/train.yaml" \
    --set training.max_steps=1000000 --set output.export_model=false \
    --set output.dir="$work/run" > "$work/log" 2>&1 &
  local pid=$! start
  wait_for_steps "$work/log" $pid 3
  start=$(date +%s.%N)
  "$@"
  expect_end_naming_h2 $pid "$work/log" "$start"
}

case $MODE in
  collectives)
    test_bin="$(dirname "$BRAID")/../comm/comm_collectives_mpi_test"
    BRAID_TEST_EXPECT_BACKEND=mpi/p2p+hier launch_hosts -- "$(realpath "$test_bin")" \
      > "$work/log" 2>&1 || { cat "$work/log"; fail "collectives across hosts"; }
    grep -q "PASSED" "$work/log" || { cat "$work/log"; fail "no test passed"; }
    grep "rank 0.*PASSED" "$work/log"
    ;;
  parity)
    # name | settings on both | extra settings for 4 ranks on one host
    cases=("ddp|--set parallel.strategy=ddp|"
           "zero3|--set parallel.strategy=zero3|"
           "hybrid|--set parallel.strategy=fsdp --set parallel.sharding_strategy=HYBRID_SHARD|--set parallel.sharding_factor=2")
    for c in "${cases[@]}"; do
      IFS='|' read -r name common one_extra <<< "$c"
      # shellcheck disable=SC2086
      "$BRAID" launch -n 4 -- "$BRAID" train "$work/train.yaml" $common $one_extra \
        --set output.dir="$work/one-$name" > "$work/one-$name.log" 2>&1 ||
        { cat "$work/one-$name.log"; fail "$name on one host"; }
      # shellcheck disable=SC2086
      launch_hosts -- "$BRAID" train "$work/train.yaml" $common \
        --set output.dir="$work/two-$name" > "$work/two-$name.log" 2>&1 ||
        { cat "$work/two-$name.log"; fail "$name on two hosts"; }
      grep -q "hosts: 2 hosts: h1 ranks 0-1, h2 ranks 2-3" "$work/two-$name.log" ||
        { cat "$work/two-$name.log"; fail "$name: the run does not show its two hosts"; }
      cmp "$work/one-$name/model/model.safetensors" "$work/two-$name/model/model.safetensors" ||
        fail "$name: weights differ between 4 ranks on one host and 2 hosts x 2 ranks"
      echo "  $name: 2 hosts x 2 ranks = 4 ranks on one host, bit for bit ($(grep -o 'step *8/8 | loss [0-9.]*' "$work/two-$name.log" | head -1))"
    done
    # HYBRID_SHARD's shard groups default to a host's ranks: their traffic stays in shared memory.
    grep -q "shard groups of 2, each on one host" "$work/two-hybrid.log" ||
      { grep strategy "$work/two-hybrid.log"; fail "hybrid: shard groups not placed inside a host"; }
    ;;
  link-down)
    fault_mid_training "$HOSTS" link h2 down
    "$HOSTS" link h2 up
    ;;
  kill-host)
    fault_mid_training kill_host h2
    # Under --max-restarts, with checkpoints: the job restarts on both hosts, resumes and ends
    # with the weights of a run that was never killed.
    ckpt=(--set checkpoint.interval=2 --set training.max_steps=12)
    launch_hosts -- "$BRAID" train "$work/train.yaml" "${ckpt[@]}" --set output.dir="$work/clean" \
      > "$work/clean.log" 2>&1 || { cat "$work/clean.log"; fail "uninterrupted run"; }
    launch_hosts --max-restarts 1 --timeout $TIMEOUT_S -- "$BRAID" train "$work/train.yaml" \
      "${ckpt[@]}" --set output.dir="$work/restarted" > "$work/restarted.log" 2>&1 &
    pid=$!
    wait_for_steps "$work/restarted.log" $pid 5
    kill_host h2
    wait $pid || { cat "$work/restarted.log"; fail "the restarted job failed"; }
    grep -q "restarting" "$work/restarted.log" || { cat "$work/restarted.log"; fail "no restart"; }
    grep "attempt 1 of 2 failed" "$work/restarted.log"
    cmp "$work/clean/model/model.safetensors" "$work/restarted/model/model.safetensors" ||
      fail "the restarted job's weights differ from the uninterrupted run's"
    echo "  restarted after losing h2, resumed, weights bit-identical to the uninterrupted run"
    ;;
  listeners)
    "$HOSTS" outside
    "$BRAID" launch -n 4 --hostfile "$(dirname "$HOSTFILE")/hostfile-by-address" \
      --launch-agent "$ROOT/scripts/netns/rsh" -- "$BRAID" train "$work/train.yaml" \
      --set training.max_steps=1000000 --set output.export_model=false \
      --set output.dir="$work/run" > "$work/log" 2>&1 &
    pid=$!
    wait_for_steps "$work/log" $pid 3
    # The job's processes only: here the launcher's descendants (mpirun), on the test hosts
    # every process (orted and the ranks). Other jobs on this machine, e.g. a concurrent test,
    # are not this job's business.
    {
      job_listeners $pid
      for ns in braid-h1 braid-h2; do netns_listeners $ns; done
    } > "$work/listeners"
    kill $pid; wait $pid 2>/dev/null
    job=$(cat "$work/listeners")
    echo "$job" | awk '{print "  " $5 "  " $7}'
    [ "$(echo "$job" | grep -c '"braid"')" -ge 4 ] || { cat "$work/listeners"; fail "ranks not listening"; }
    bad=$(echo "$job" | awk '$5 !~ /^(10\.77\.0\.[0-9]+|127\.0\.0\.1|\[::1\]):[0-9]+$/')
    [ -z "$bad" ] || { echo "$bad"; fail "listeners outside the job's network (10.77.0.0/24)"; }
    ;;
  calibrate)
    # Note [Network calibration]: the links between the hosts measured by the job's ranks and
    # added to a node's profile (a spec sheet's here: the node calibration takes a minute),
    # then priced for a layout over both hosts. On one host it is refused on every rank.
    cat > "$work/node.json" <<JSON
{"name": "test node", "device": "cpu", "ranks_per_node": 2, "memory_per_rank_gib": 4,
 "gemm_tflops_f32": 0.1, "gemm_tflops_bf16": 0.1, "memory_gbs": 10,
 "node_link": {"latency_us": 5, "gbs": 5}}
JSON
    launch_hosts -- "$BRAID" plan --calibrate-network --profile "$work/node.json" \
      > "$work/log" 2>&1 || { cat "$work/log"; fail "calibrate-network failed"; }
    for op in all_reduce reduce_scatter all_gather broadcast send_recv; do
      grep -qE "^\[rank 0\] \| $op \| 2 \| [0-9.]+ \| [0-9.]+ \|" "$work/log" ||
        { cat "$work/log"; fail "no fit of $op over the 2 hosts' first ranks"; }
    done
    grep -qE "^\[rank 0\] \| all_reduce \| 4 \|" "$work/log" ||
      { cat "$work/log"; fail "no fit of all_reduce over the 4 ranks"; }
    grep -q '"network"' "$work/node.json" || fail "the profile has no network fits"
    "$BRAID" plan --profile "$work/node.json" --model "$ROOT/testdata/models/gpt2-vocab512.json" \
      --world-size 4 --hosts 2 --global-batch 8 --seq-len 32 --explain "ddp mb2x1" \
      > "$work/plan" 2>&1 || { cat "$work/plan"; fail "plan over 2 hosts failed"; }
    grep -q "comm exposed" "$work/plan" || { cat "$work/plan"; fail "no communication priced"; }
    if "$BRAID" launch -n 2 -- "$BRAID" plan --calibrate-network --profile "$work/node.json" \
      > "$work/one" 2>&1; then
      fail "calibrate-network on one host succeeded"
    fi
    [ "$(grep -c 'launch it with ranks on 2 or more hosts' "$work/one")" -ge 2 ] ||
      { cat "$work/one"; fail "not refused on every rank, naming the hosts"; }
    echo "  network fits over 2 and 4 ranks written, a 2-host layout priced; one host refused"
    ;;
  *) fail "unknown mode '$MODE' (collectives, parity, link-down, kill-host, listeners, calibrate)" ;;
esac
echo "multihost_test $MODE: passed"
