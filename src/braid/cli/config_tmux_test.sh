#!/usr/bin/env bash
# `braid config` at a real terminal (label cli): tmux runs it, send-keys answers each question as
# it appears on the screen (FSDP, HYBRID_SHARD, 4 processes, bf16), and the written file must be
# an Accelerate config that braid reads as FSDP HYBRID_SHARD in bf16 and braid launch takes 4
# processes from. Exits 77 (skipped, saying why) without tmux.
#   config_tmux_test.sh BRAID
set -uo pipefail
BRAID=$(realpath "$1")
command -v tmux > /dev/null || { echo "SKIP: tmux is not installed"; exit 77; }
work=$(mktemp -d /tmp/braid_config_tmux.XXXXXX)
session=braid-config-$$
trap 'tmux kill-session -t $session 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; tmux capture-pane -p -t $session 2>/dev/null | tail -20; exit 1; }

tmux new-session -d -s $session -x 200 -y 50 \
  "$BRAID config --config_file $work/acc.yaml; echo EXIT=\$?; sleep 30"
# answer TEXT ANSWER: waits until TEXT is the newest prompt on the screen, then types ANSWER.
answer() {
  for _ in $(seq 100); do
    if tmux capture-pane -p -t $session | grep -v '^$' | tail -1 | grep -qF "$1"; then
      tmux send-keys -t $session "$2" Enter
      return 0
    fi
    sleep 0.1
  done
  fail "no prompt '$1' on the screen"
}
answer "Your choice [1]:" ""                       # this machine
answer "Your choice [2]:" "2"                      # multi-CPU
answer "How many different machines" "1"
answer "How many processes in total" "4"
answer "Do you want to use DeepSpeed?" "no"
answer "Do you want to use FullyShardedDataParallel?" "yes"
answer "Your choice [1]:" "HYBRID_SHARD"            # sharding strategy
answer "Your choice [1]:" "1"                       # backward prefetch
answer "forward prefetch" ""
answer "activation checkpointing" "no"
answer "Your choice [1]:" "3"                       # bf16
for _ in $(seq 50); do
  tmux capture-pane -p -t $session | grep -q "EXIT=" && break
  sleep 0.1
done
tmux capture-pane -p -t $session | grep -q "EXIT=0" || fail "braid config did not exit 0"
tmux capture-pane -p -t $session | grep -q "wrote $work/acc.yaml" || fail "no 'wrote' line"
cat "$work/acc.yaml"
"$BRAID" train "$(dirname "$0")/../../../configs/demo.yaml" --accelerate-config "$work/acc.yaml" \
  --print-config > "$work/print" 2>&1 || { cat "$work/print"; fail "braid does not read it"; }
grep -q "parallel.sharding_strategy = HYBRID_SHARD" "$work/print" || fail "not HYBRID_SHARD"
grep -q "training.precision = bf16" "$work/print" || fail "not bf16"
grep -q "^num_processes: 4$" "$work/acc.yaml" || fail "not 4 processes"
echo "config_tmux_test: passed"
