#!/usr/bin/env bash
# DeepSpeed configs train as their braid equivalents, bit for bit (label mpi): 2 ranks train a
# small GPT-2 once with `--deepspeed configs/deepspeed/X.json` and once with the braid settings
# the file means, spelled out with --set; the exported weights must be identical.
#   deepspeed_parity_test.sh BRAID REPO_ROOT
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
run() {  # run NAME ARGS...
  local name=$1
  shift
  "$BRAID" launch -n 2 -- "$BRAID" train "$work/train.yaml" --set output.dir="$work/$name" "$@" \
    > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name"; }
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
for z in zero2 zero3; do
  cmp "$work/ds-$z/model/model.safetensors" "$work/braid-$z/model/model.safetensors" ||
    fail "$z: --deepspeed and the braid equivalent give different weights"
  echo "$z: --deepspeed configs/deepspeed/$z.json = the braid YAML, bit for bit" \
    "($(grep -o 'step *6/6 | loss [0-9.]*' "$work/ds-$z.log" | head -1))"
done
# And a different config really trains differently (the comparison can fail).
run braid-other --set parallel.strategy=zero2 --set optimizer.lr=1e-3
cmp -s "$work/ds-zero2/model/model.safetensors" "$work/braid-other/model/model.safetensors" &&
  fail "a different learning rate gave the same weights"
echo "deepspeed_parity_test: passed"
