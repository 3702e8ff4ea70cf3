#!/usr/bin/env bash
# A real write failure during a checkpoint save, as real processes under `braid launch -n 2`:
# rank 1 runs under a file size limit (ulimit -f) that its checkpoint file outgrows, so write(2)
# fails with EFBIG (File too large) there alone. For a blocking and an async save: every rank
# reports the error naming the file, the job ends non-zero without hanging, the previous
# checkpoint and `latest` are intact, and a rerun without the limit resumes from it and ends
# bit-identical to a run that never failed.
#   checkpoint_io_error_test.sh BRAID
set -uo pipefail
BRAID=$1
work=$(mktemp -d /tmp/braid_io_error.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
common=(--set model.preset=gpt2-tiny --set data.random_tokens=true --set data.seq_len=32
        --set training.global_batch_size=4 --set training.log_interval=1
        --set training.eval_interval=0 --set training.eval_batches=0 --set checkpoint.interval=2
        --set optimizer.grad_clip=1.0 --set output.export_model=true --set output.samples=0
        --set parallel.strategy=zero2 --set parallel.comm_timeout_s=20)
config=$(dirname "$0")/../../../configs/bench-small-ddp.yaml

# run NAME LIMIT_KB STEPS ARGS...: a 2-rank job; rank 1 gets `ulimit -f LIMIT_KB` (0: none).
run() {
  local name=$1 limit=$2 steps=$3
  shift 3
  "$BRAID" launch -n 2 -- bash -c \
    'if [[ $OMPI_COMM_WORLD_RANK == 1 && '"$limit"' -gt 0 ]]; then ulimit -f '"$limit"'; fi; exec "$@"' \
    _ "$BRAID" train "$config" "${common[@]}" --set training.max_steps="$steps" \
    --set output.dir="$work/$name" "$@" > "$work/$name.log" 2>&1
}

run straight 0 4 || { cat "$work/straight.log"; fail "the uninterrupted run failed"; }
for async in false true; do
  name=async-$async
  run "$name" 0 2 --set checkpoint.async=$async || { cat "$work/$name.log"; fail "$name: step 2"; }
  start=$(date +%s)
  run "$name" 64 4 --set checkpoint.async=$async
  status=$?
  took=$(( $(date +%s) - start ))
  log=$work/$name.log
  (( status != 0 )) || { cat "$log"; fail "$name: the failed save did not fail the job"; }
  (( took < 60 )) || fail "$name: the job took ${took}s to end"
  for r in 0 1; do
    grep -q "^\[rank $r\] braid train: error: .*rank-00001.bin" "$log" ||
      { cat "$log"; fail "$name: rank $r does not report the failed write of rank-00001.bin"; }
  done
  grep -q "File too large" "$log" || { cat "$log"; fail "$name: the cause (EFBIG) is not named"; }
  ckpt=$work/$name/checkpoints
  [[ $(cat "$ckpt/latest") == step-00000002 ]] || fail "$name: latest moved: $(cat "$ckpt/latest")"
  [[ ! -e $ckpt/step-00000004 ]] || fail "$name: a step-4 directory exists"
  left=$(ls -A "$ckpt" | grep '^\.tmp-' || true)
  [[ -z $left ]] || fail "$name: the failed save left $left (the disk stays full)"
  "$BRAID" checkpoint verify "$ckpt/step-00000002" > /dev/null || fail "$name: step 2 is damaged"
  echo "$name: exit $status after ${took}s: $(grep -m1 'error:' "$log")"
  run "$name" 0 4 --set checkpoint.async=$async || { cat "$work/$name.log"; fail "$name: rerun"; }
  grep -q "resuming from $ckpt/step-00000002" "$work/$name.log" || fail "$name: did not resume"
  cmp -s "$work/straight/model/model.safetensors" "$work/$name/model/model.safetensors" ||
    fail "$name: the resumed run's weights differ from the uninterrupted run's"
done
echo "checkpoint_io_error_test: passed"
