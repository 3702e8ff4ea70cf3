#!/usr/bin/env bash
# DeepSpeed and Accelerate configs train as their braid equivalents, bit for bit (label mpi): a
# small GPT-2 trains once with `--deepspeed configs/deepspeed/X.json` (2 ranks) or under
# `braid launch --config_file configs/accelerate/X.yaml` (its num_processes), and once with the
# braid settings the file means, spelled out with --set; the exported weights must be identical.
#   dialect_parity_test.sh BRAID REPO_ROOT
set -uo pipefail
BRAID=$(realpath "$1")
ROOT=$2
work=$(mktemp -d /tmp/braid_ds_parity.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cat > "$work/train.yaml" <<YAML
model: {config: $ROOT/testdata/models/gpt2-vocab512.json}
data: {random_tokens: true, seq_len: 32}
training: {micro_batch_size: 2, gradient_accumulation_steps: 2, max_steps: 6, log_interval: 1,
           eval_interval: 0, eval_batches: 0}
optimizer: {type: adamw, lr: 2.0e-3, weight_decay: 0.05, grad_clip: 0.5}
schedule: {type: cosine, warmup_steps: 1}
parallel: {strategy: ddp}
output: {export_model: true, samples: 0}
YAML
run() {  # run NAME ARGS...: 2 ranks
  local name=$1
  shift
  "$BRAID" launch -n 2 -- "$BRAID" train "$work/train.yaml" --set output.dir="$work/$name" "$@" \
    > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name"; }
}
same() {  # same A B WHAT: A's and B's exported weights are identical
  cmp "$work/$1/model/model.safetensors" "$work/$2/model/model.safetensors" ||
    fail "$3: the dialect and the braid equivalent give different weights"
  echo "$3 = the braid YAML, bit for bit ($(grep -o 'step *6/6 | loss [0-9.]*' "$work/$1.log" | head -1))"
}
# zero2.json: every batch, clipping, precision and optimizer value "auto" (the YAML's), ZeRO-2.
run ds-zero2 --deepspeed "$ROOT/configs/deepspeed/zero2.json"
run braid-zero2 --set parallel.strategy=zero2 --set training.log_interval=10 \
  --set parallel.bucket_mb=1907.3486328125
# zero3.json: explicit batch 16 = micro 2 x accumulation 4 x 2 ranks, bf16, clipping 1, AdamW,
# WarmupDecayLR (linear decay to 0 over the run, 2 linear warmup steps).
run ds-zero3 --deepspeed "$ROOT/configs/deepspeed/zero3.json"
run braid-zero3 --set parallel.strategy=zero3 --set training.gradient_accumulation_steps=4 \
  --set training.global_batch_size=16 --set training.precision=bf16 --set optimizer.grad_clip=1 \
  --set optimizer.lr=1e-3 --set optimizer.beta2=0.95 --set optimizer.weight_decay=0.1 \
  --set schedule.type=linear --set schedule.warmup_steps=2 --set schedule.min_lr_ratio=0
same ds-zero2 braid-zero2 "--deepspeed configs/deepspeed/zero2.json"
same ds-zero3 braid-zero3 "--deepspeed configs/deepspeed/zero3.json"

# Accelerate: braid launch --config_file takes num_processes and hands the file to every rank.
acc() {  # acc NAME: under braid launch --config_file configs/accelerate/NAME.yaml
  "$BRAID" launch --config_file "$ROOT/configs/accelerate/$1.yaml" -- "$BRAID" train \
    "$work/train.yaml" --set output.dir="$work/acc-$1" > "$work/acc-$1.log" 2>&1 ||
    { cat "$work/acc-$1.log"; fail "accelerate $1"; }
}
acc single
"$BRAID" train "$work/train.yaml" --set parallel.strategy=none --set output.dir="$work/braid-single" \
  > "$work/braid-single.log" 2>&1 || { cat "$work/braid-single.log"; fail "braid-single"; }
same acc-single braid-single "accelerate single.yaml (1 process)"
acc ddp
run braid-ddp --set training.precision=bf16
same acc-ddp braid-ddp "accelerate ddp.yaml (MULTI_CPU, bf16, 2 processes)"
acc fsdp
run braid-fsdp --set parallel.strategy=fsdp --set parallel.forward_prefetch=false
same acc-fsdp braid-fsdp "accelerate fsdp.yaml (FULL_SHARD, 2 processes)"
acc deepspeed
run braid-acc-ds --set parallel.strategy=zero3 --set training.precision=bf16 \
  --set optimizer.grad_clip=1
same acc-deepspeed braid-acc-ds "accelerate deepspeed.yaml (ZeRO-3, bf16, 2 processes)"
# And a different config really trains differently (the comparison can fail): zero2.json and
# zero3.json differ in learning rate, betas, decay, clipping, batch, precision and schedule.
cmp -s "$work/ds-zero2/model/model.safetensors" "$work/ds-zero3/model/model.safetensors" &&
  fail "zero2.json and zero3.json gave the same weights"
echo "dialect_parity_test: passed"
