#!/usr/bin/env bash
# A sample of the dialect corpus (testdata/dialects: real DeepSpeed and Accelerate files from
# public repositories) trains 3 steps on 2 ranks, each beside the same small braid YAML: the
# run ends, its last step line shows a finite loss, and the file's mapping was applied (label mpi).
#   dialect_corpus_train_test.sh BRAID REPO_ROOT
set -uo pipefail
BRAID=$(realpath "$1")
ROOT=$2
CORPUS=$ROOT/testdata/dialects
work=$(mktemp -d /tmp/braid_ds_corpus.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cat > "$work/train.yaml" <<YAML
model: {config: $ROOT/testdata/models/gpt2-vocab512.json}
data: {random_tokens: true, seq_len: 32}
training: {micro_batch_size: 2, gradient_accumulation_steps: 1, max_steps: 3, log_interval: 1,
           eval_interval: 0, eval_batches: 0}
schedule: {type: cosine, warmup_steps: 1}
output: {export_model: false, samples: 0}
YAML
n=0
for spec in "deepspeed/hf-tests-ds_config_zero3.json|zero3" \
            "deepspeed/acc-zero_stage2_config.json|zero2" \
            "deepspeed/ds-hybrid_engine_config.json|ddp" \
            "deepspeed/ds-torch_compile-ds_config_z2.json|zero2" \
            "accelerate/trl-deepspeed_zero3.yaml|zero3" \
            "accelerate/peft-ds_zero3_cpu_offload.yaml|zero3" \
            "accelerate/trl-fsdp1.yaml|fsdp" \
            "accelerate/acc-0_28_0_mpi.yaml|ddp" \
            "accelerate/trl-context_parallel_2gpu.yaml|fsdp"; do
  file=${spec%|*}
  strategy=${spec#*|}
  name=$(basename "$file")
  flag=--deepspeed
  [[ $file == accelerate/* ]] && flag=--accelerate-config
  "$BRAID" launch -n 2 -- "$BRAID" train "$work/train.yaml" "$flag" "$CORPUS/$file" \
    --set output.dir="$work/$name" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$file"; }
  line=$(grep -E 'step +3/3 ' "$work/$name.log" | head -1)
  [[ $line =~ loss\ [0-9]+\.[0-9]+ ]] || { cat "$work/$name.log"; fail "$file: no finite loss at step 3"; }
  printed=$("$BRAID" train "$work/train.yaml" "$flag" "$CORPUS/$file" --print-config 2>&1)
  grep -q "^  strategy: \"$strategy\"" <<< "$printed" || fail "$file: parallel.strategy is not $strategy"
  if grep -q parallelism_config_cp_size "$CORPUS/$file"; then  # the sequence split over both ranks
    grep -q "^  context_parallel_size: 2" <<< "$printed" || fail "$file: no context parallelism"
  fi
  echo "$file: 2 ranks, $strategy, $(grep -oE 'loss [0-9.]+' <<< "$line" | head -1)"
  n=$((n + 1))
done
echo "$n corpus files trained"
