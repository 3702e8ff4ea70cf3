#!/usr/bin/env bash
# The kill loop (label long): `braid launch -n 2 --max-restarts` restarts a job whose ranks die
# by SIGKILL, and every job ends with weights bit-identical to a run that was never killed.
# KILLS deaths in all, spread over six jobs (ddp, zero3 with checkpoint.async, zero2, zero1 with
# checkpoint.async, tensor parallelism tp 2, pipeline parallelism pp 2 with checkpoint.async);
# each death strikes a random rank at a random step and point: forward, backward, optimizer, or a
# stage of a checkpoint save (launch/fault_plan.h; stages only rank 0 reaches go to rank 0), the
# first death of each job whose saves block always inside a save. A seventh job (ddp) is killed
# from outside instead: SIGKILL to mpirun (the launcher restarts the job), to the launcher (this
# script starts a fresh `braid launch`, which resumes), and to mpirun again. At the end no process
# of any job is left, nor any job's directory (Note [Job leftovers]), and the shared-memory
# segments the seventh job's ranks made are gone from /dev/shm. The jobs read GPT-2 tokens of a
# few State of the Union addresses through the real data loader, accumulate 2 micro-steps, clip,
# evaluate and save every 2 steps.
#   restart_kill_loop_test.sh BRAID DATA_DIR [KILLS=20] [SEED=$RANDOM]   (BRAID_DATA_DIR wins)
set -uo pipefail
BRAID=$1
DATA=${BRAID_DATA_DIR:-$2}
KILLS=${3:-20}
SEED=${4:-$RANDOM}
RANDOM=$SEED
STEPS=16
work=$(mktemp -d /tmp/braid_kill_loop.XXXXXX)
trap 'pkill -9 -f "$work/" 2>/dev/null; rm -rf "$work"' EXIT
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

# train NAME RESTARTS ARGS...: one job under the launcher, its output in $work/NAME.log (appended).
# start_train does the same in the background ($launcher); the launchers' pids go to
# $launchers, whose job directories (/dev/shm/braid-launch.PID.*) must all be gone at the end.
launchers=""
start_train() {
  local name=$1 restarts=$2
  shift 2
  "$BRAID" launch -n 2 --max-restarts "$restarts" --timeout 20 -- "$BRAID" train "$work/train.yaml" \
    --set output.dir="$work/$name" "$@" >> "$work/$name.log" 2>&1 &
  launcher=$!
  launchers+=" $launcher"
}
train() {
  start_train "$@"
  wait $launcher
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
    # Inside a blocking save at least once (points 3.. are a save's stages).
    if [[ $a == 0 && $async == false ]]; then
      point=${points[$(( 3 + RANDOM % (${#points[@]} - 3) ))]}
    fi
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

# The seventh job, killed from outside: mpirun, the launcher, mpirun. It trains 40 steps (20
# saves), so that each kill, a save or two after the last, lands well before its end.
name=job6-external
external=(--set parallel.strategy=ddp --set training.max_steps=40)
train "$name-reference" 0 "${external[@]}" ||
  { cat "$work/$name-reference.log"; fail "$name: the uninterrupted run failed"; }
reference=$work/$name-reference/model/model.safetensors
log=$work/$name.log
# checkpoints: how many saves the job's log reports so far.
checkpoints() { grep -c '| checkpoint ' "$log"; }
# after_checkpoints N: waits until the log reports N saves, then a random 0-0.4 s.
after_checkpoints() {
  for _ in $(seq 1200); do
    (( $(checkpoints) >= $1 )) && { sleep "0.$(( RANDOM % 5 ))"; return 0; }
    kill -0 $launcher 2> /dev/null || { cat "$log"; fail "$name ended before save $1"; }
    sleep 0.05
  done
  cat "$log"
  fail "$name: no save $1 within 60 s"
}
# note_segments: this attempt's job directory (from rank 0's environment) and the shared-memory
# segments in it (one per rank; none loose in /dev/shm), added to $segments.
segments=""
note_segments() {
  local p dir found
  for _ in $(seq 100); do
    for p in $(pgrep -f "braid train .*$work/$name( |\$)"); do
      grep -qzx OMPI_COMM_WORLD_RANK=0 /proc/$p/environ 2> /dev/null || continue
      dir=$(tr '\0' '\n' < /proc/$p/environ | sed -n 's/^BRAID_LAUNCH_JOB=//p')
      found=$(find "$dir" -name 'vader_segment.*' -printf '%f\n' 2> /dev/null)
      if [[ $(wc -l <<< "$found") == 2 ]]; then
        segments+=" $found"
        return 0
      fi
    done
    sleep 0.05
  done
  fail "$name: no job directory holding 2 shared-memory segments"
}
kill_mpirun() {
  note_segments
  local mp
  mp=$(pgrep -f "^[^ ]*mpirun .*$work/$name( |\$)")
  [[ -n $mp ]] || { cat "$log"; fail "$name: mpirun not found"; }
  kill -9 "$mp"
  echo "  SIGKILL to mpirun (pid $mp) after $(checkpoints) saves"
}
echo "$name (40 steps): SIGKILL to mpirun, to the launcher, to mpirun"
start_train "$name" 3 "${external[@]}"
after_checkpoints 2
kill_mpirun
after_checkpoints $(( $(checkpoints) + 2 ))  # the restarted attempt saves twice
note_segments
disown $launcher  # no "Killed" notice from bash
kill -9 $launcher
t0=$(date +%s.%N)
while pgrep -f "$work/$name( |\$)" > /dev/null; do
  awk "BEGIN{exit !($(date +%s.%N) - $t0 > 2)}" &&
    fail "$name: processes left 2 s after the launcher was killed: $(pgrep -f "$work/$name( |\$)" | tr '\n' ' ')"
  sleep 0.02
done
echo "  SIGKILL to the launcher (pid $launcher) after $(checkpoints) saves: its job was gone" \
  "$(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}")s later"
start_train "$name" 3 "${external[@]}"  # this script restarts it
after_checkpoints $(( $(checkpoints) + 2 ))
kill_mpirun
wait $launcher
status=$?
mpirun_kills=$(grep -c 'mpirun (pid [0-9]*) was killed by SIGKILL; restarting' "$log")
echo "  exit $status, $mpirun_kills mpirun deaths restarted, resumed:" \
  "$(grep -o 'resuming from [^ ]*' "$log" | sed 's|.*/||' | tr '\n' ' ')"
(( status == 0 )) || { tail -30 "$log"; fail "$name ended with exit $status"; }
(( mpirun_kills == 2 )) || { cat "$log"; fail "$name: $mpirun_kills restarts after mpirun's death, not 2"; }
cmp -s "$reference" "$work/$name/model/model.safetensors" ||
  fail "$name: the final weights differ from the uninterrupted run's"

# Nothing of any job is left: no process, no job directory, none of the segments.
left=$(pgrep -f "$work/" | tr '\n' ' ')
[[ -z $left ]] || fail "processes of the jobs left: $left"
dirs=0
for pid in $launchers; do
  for d in /dev/shm/braid-launch."$pid".* "${TMPDIR:-/tmp}"/braid-launch."$pid".*; do
    [[ -e $d ]] && { echo "left: $d"; dirs=$(( dirs + 1 )); }
  done
done
files=0
for f in $segments; do
  [[ -n $(find /dev/shm -name "$f" 2> /dev/null) ]] && { echo "left: $f"; files=$(( files + 1 )); }
done
(( dirs == 0 && files == 0 )) || fail "$dirs job directories and $files segments left"
echo "kill loop: $killed SIGKILLs of ranks over ${#jobs[@]} jobs, 2 of mpirun and 1 of the launcher;" \
  "every final model bit-identical to the uninterrupted run; $(wc -w <<< "$launchers") launchers" \
  "left 0 processes, 0 job directories and 0 of $(wc -w <<< "$segments") segments seen"
