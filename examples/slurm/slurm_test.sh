#!/usr/bin/env bash
# A real Slurm job (label slurm): starts the one-node cluster of scripts/slurm/local-cluster.sh,
# submits examples/slurm/train.sbatch at CI size (the demo's GPT-2 on 8 State of the Union
# addresses, 4 steps, 2 tasks), waits for it, and checks that it completed, that its log is where
# --output put it and shows 2 ranks training to the last step, and that the model is in the
# output directory the script was given. Stops the cluster if it started it.
#   slurm_test.sh BRAID DATA_DIR    (BRAID_DATA_DIR wins; exits 77, skipped, without root)
set -uo pipefail
BRAID=$(realpath "$1")
DATA=${BRAID_DATA_DIR:-$2}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CLUSTER="$ROOT/scripts/slurm/local-cluster.sh"
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "SKIP: starting slurmd needs root"; exit 77; }
[[ -f $DATA/gpt2/encoder.json && -d $DATA/sotu ]] ||
  fail "no GPT-2 vocabulary or corpus under $DATA (scripts/fetch-data.sh $DATA)"
work=$(mktemp -d /tmp/braid_slurm.XXXXXX)
started=""
cleanup() {
  [ -n "$started" ] && "$CLUSTER" stop > /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
if ! sinfo -h > /dev/null 2>&1; then
  "$CLUSTER" start > "$work/cluster.log" 2>&1 || {
    if grep -q "apt-get install failed" "$work/cluster.log"; then
      echo "SKIP: Slurm could not be installed here:"; tail -5 "$work/cluster.log"; exit 77
    fi
    cat "$work/cluster.log"; fail "the local Slurm cluster did not start"
  }
  started=1
fi

mkdir -p "$work/text"
cp $(ls "$DATA"/sotu/*.txt | head -8) "$work/text/"
"$BRAID" prepare-data --input "$work/text" --tokenizer "$DATA/gpt2" --out "$work/tok" \
  --val-fraction 0.25 > "$work/prepare.log" 2>&1 || { cat "$work/prepare.log"; fail "prepare-data"; }

cd "$ROOT"
start=$(date +%s)
BRAID="$BRAID" BRAID_OUT="$work/out" \
  BRAID_TRAIN_ARGS="--set data.train=$work/tok --set data.tokenizer=$DATA/gpt2 --set data.seq_len=64 --set training.max_steps=4 --set schedule.warmup_steps=1 --set training.eval_interval=2 --set training.eval_batches=2 --set output.samples=1 --set output.sample_tokens=8" \
  timeout 400 sbatch --wait --output="$work/job.log" examples/slurm/train.sbatch > "$work/sbatch.out" 2>&1
status=$?
job=$(grep -o 'Submitted batch job [0-9]*' "$work/sbatch.out" | awk '{print $4}')
echo "job $job: sbatch --wait exit $status after $(( $(date +%s) - start )) s"
[ -n "$job" ] || { cat "$work/sbatch.out"; fail "sbatch did not submit"; }
state=$(scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
echo "job $job: state ${state:-gone}"
[ -f "$work/job.log" ] || fail "no log at $work/job.log (--output)"
[ "$status" -eq 0 ] || { cat "$work/job.log"; fail "the job failed (sbatch --wait exit $status)"; }
[ -z "$state" ] || [ "$state" = COMPLETED ] || { cat "$work/job.log"; fail "job state $state"; }
grep -q "ddp over dp=2" "$work/job.log" || { cat "$work/job.log"; fail "the job did not run 2 ranks"; }
grep -q "step *4/4" "$work/job.log" || { cat "$work/job.log"; fail "no last step in the log"; }
[ -s "$work/out/model/model.safetensors" ] || { ls -R "$work/out"; fail "no model in BRAID_OUT"; }
grep "step *4/4\|braid-demo" "$work/job.log"
echo "slurm_test: passed"
