#!/usr/bin/env bash
# The kill loop (label long): `braid launch -n 2 --max-restarts` restarts a job whose ranks die
# by SIGKILL, and every job ends with weights bit-identical to a run that was never killed.
# KILLS deaths in all, spread over six jobs (ddp, zero3 with checkpoint.async, zero2, zero1 with
# checkpoint.async, tensor parallelism tp 2, pipeline parallelism pp 2 with checkpoint.async);
# each death strikes a random rank at a random step and point: forward, backward, optimizer, or a
# stage of a checkpoint save (launch/fault_plan.h; stages only rank 0 reaches go to rank 0). The jobs read GPT-2 tokens of a few State of the Union addresses
# through the real data loader, accumulate 2 micro-steps, clip, evaluate and save every 2 steps.
#   restart_kill_loop_test.sh BRAID DATA_DIR [KILLS=20] [SEED=$RANDOM]   (BRAID_DATA_DIR wins)
set -uo pipefail
BRAID=$1
DATA=${BRAID_DATA_DIR:-$2}
KILLS=${3:-20}
SEED=${4:-$RANDOM}
RANDOM=$SEED
STEPS=16
work=$(mktemp -d /tmp/braid_kill_loop.XXXXXX)
trap 'pkill -9 -f "braid train .*$work" 2>/dev/null; rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
echo "kill loop: $KILLS kills, seed $SEED (rerun: $0 $BRAID $DATA $KILLS $SEED)"

[[ -f $DATA/gpt2/encoder.json && -d $DATA/sotu ]] ||
  fail "no GPT-2 vocabulary or corpus under $DATA (scripts/fetch-data.sh $DATA)"
mkdir -p "$work/text"
cp $(ls "$DATA"/sotu/*.txt | head -8) "$work/text/"
"$BRAID" prepare-data --input "$work/text" --tokenizer "$DATA/gpt2" --out "$work/tok" \
  --val-fraction 0.25 > "$work/prepare.log" 2>&1 || { cat "$work/prepare.log"; fail "prepare-data"; }
cat > "$work/model.json" <<'EOF'
{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 32, "n_layer": 2,
 "n_head": 2, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
 "tie_word_embeddings": true}
EOF
cat > "$work/train.yaml" <<EOF
model:
  config: $work/model.json
data:
  train: $work/tok
  seq_len: 32
training:
  micro_batch_size: 2
  gradient_accumulation_steps: 2
  max_steps: $STEPS
  log_interval: 4
  eval_interval: 4
  eval_batches: 2
optimizer:
  type: adamw
  lr: 1.0e-3
  grad_clip: 0.5
schedule:
  type: cosine
  warmup_steps: 3
checkpoint:
  interval: 2
  keep_last: 2
output:
  export_model: true
  samples: 0
EOF

# train NAME RESTARTS ARGS...: one job under the launcher, its output in $work/NAME.log.
train() {
  local name=$1 restarts=$2
  shift 2
  "$BRAID" launch -n 2 --max-restarts "$restarts" --timeout 20 -- "$BRAID" train "$work/train.yaml" \
    --set output.dir="$work/$name" "$@" > "$work/$name.log" 2>&1
}


points=(forward backward optimizer save:create save:write save:sync save:manifest save:rename
        save:publish)
# NAME ASYNC: the data-parallel strategies, and tensor (tp 2) and pipeline (pp 2) parallelism.
jobs=("ddp false" "zero3 true" "zero2 false" "zero1 true" "tp false" "pp true")
layout_args() {
  case $1 in
    tp) echo "--set parallel.strategy=none --set parallel.tensor_parallel_size=2" ;;
    pp) echo "--set parallel.strategy=none --set parallel.pipeline_parallel_size=2" ;;
    *) echo "--set parallel.strategy=$1" ;;
  esac
}
killed=0
for j in "${!jobs[@]}"; do
  read -r strategy async <<< "${jobs[$j]}"
  # KILLS spread over the jobs, the first ones taking the remainder.
  n=$(( KILLS / ${#jobs[@]} + (j < KILLS % ${#jobs[@]} ? 1 : 0) ))
  (( n > 0 )) || continue
  # Deaths at strictly increasing steps, one per attempt, so each attempt (which resumes at or
  # before the previous death's step) reaches its own; a save point strikes a step that saves.
  plan="" step=0 describe=""
  for ((a = 0; a < n; ++a)); do
    point=${points[$(( RANDOM % ${#points[@]} ))]}
    room=$(( STEPS - step - (n - a - 1) * 2 ))
    step=$(( step + 1 + RANDOM % (room > 2 ? room / 2 : 1) ))
    if [[ $point == save:* ]]; then step=$(( (step + 1) / 2 * 2 )); fi
    (( step <= STEPS )) || step=$STEPS
    rank=$(( RANDOM % 2 ))
    case $point in save:create|save:manifest|save:rename|save:publish) rank=0 ;; esac
    plan+="$a:$rank:$step:$point;"
    describe+=" rank $rank at step $step $point;"
  done
  name=job$j-$strategy
  # The uninterrupted run of the same config (zero2 and zero3 reduce every micro-step, so they
  # equal DDP only with parallel.sync_each_batch false).
  # shellcheck disable=SC2046
  train "$name-reference" 0 $(layout_args "$strategy") --set checkpoint.async="$async" ||
    { cat "$work/$name-reference.log"; fail "$name: the uninterrupted run failed"; }
  reference=$work/$name-reference/model/model.safetensors
  echo "$name (checkpoint.async $async): kills$describe"
  # shellcheck disable=SC2046
  BRAID_FAULT_PLAN=$plan train "$name" "$n" $(layout_args "$strategy") \
    --set checkpoint.async="$async"
  status=$?
  deaths=$(grep -c 'BRAID_FAULT_PLAN: killing myself' "$work/$name.log")
  restarts=$(grep -c 'failed (exit .*restarting' "$work/$name.log")
  echo "  exit $status, $deaths deaths, $restarts restarts, resumed:" \
    "$(grep -o 'resuming from [^ ]*' "$work/$name.log" | sed 's|.*/||' | tr '\n' ' ')"
  (( status == 0 )) || { tail -30 "$work/$name.log"; fail "$name ended with exit $status"; }
  (( deaths == n && restarts == n )) ||
    { cat "$work/$name.log"; fail "$name: $deaths deaths and $restarts restarts, planned $n"; }
  cmp -s "$reference" "$work/$name/model/model.safetensors" ||
    fail "$name: the final weights differ from the uninterrupted run's"
  killed=$(( killed + n ))
  if pgrep -f "braid train .*$work" > /dev/null; then fail "ranks left running after $name"; fi
done
(( killed == KILLS )) || fail "$killed kills, not $KILLS"
echo "kill loop: $killed SIGKILLs over ${#jobs[@]} jobs, every final model bit-identical to the uninterrupted run"
