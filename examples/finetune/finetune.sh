#!/usr/bin/env bash
# The fine-tune demo (examples/finetune/README.md), also a test (ctest finetune_demo_mpi):
#   1. a base checkpoint in Hugging Face's format: a tiny LLaMA with LLaMA-3's vocabulary,
#      trained a few steps on random tokens and exported (model.safetensors + config.json);
#   2. braid prepare-data renders arithmetic.jsonl (prompt/completion and chat examples) through
#      the llama3 template, packed several to a row (each attending to itself only), the loss
#      counting only the answers;
#   3. braid train fine-tunes the checkpoint on 2 ranks (ZeRO-2) and exports it with the
#      tokenizer beside it;
#   4. braid generate loads model and tokenizer back from that one directory and answers.
# It checks that the loss fell, that the export holds the tokenizer, and that generation runs.
#   finetune.sh BRAID REPO_ROOT [OUT_DIR]      (OUT_DIR defaults to a temporary directory)
set -euo pipefail
BRAID=$(realpath "$1")
ROOT=$(realpath "$2")
HERE=$ROOT/examples/finetune
TOK=${BRAID_DATA_DIR:-$ROOT/data}/tokenizers/llama3
[[ -f $TOK/tokenizer.json ]] || { echo "SKIP: no $TOK (scripts/fetch-data.sh data)"; exit 77; }
if [[ $# -ge 3 ]]; then
  OUT=$3
  mkdir -p "$OUT"
else
  OUT=$(mktemp -d /tmp/braid_finetune.XXXXXX)
  trap 'rm -rf "$OUT"' EXIT
fi
fail() { echo "FAIL: $*"; exit 1; }
cd "$ROOT"

echo "== 1. a base checkpoint (HF format) =="
"$BRAID" train "$HERE/finetune.yaml" --set model.init_from= \
  --set model.config="$HERE/llama-tiny-llama3vocab.json" --set data.random_tokens=true \
  --set data.train= --set training.max_steps=3 --set training.micro_batch_size=2 \
  --set training.eval_batches=0 --set training.eval_interval=0 --set schedule.warmup_steps=1 \
  --set parallel.strategy=none --set output.dir="$OUT/base" > "$OUT/base.log" 2>&1 ||
  { cat "$OUT/base.log"; fail "the base model"; }
[[ -f $OUT/base/model/model.safetensors && -f $OUT/base/model/config.json ]] ||
  fail "no exported base model"

echo "== 2. instruction data: the loss on the answers only =="
"$BRAID" prepare-data --input "$HERE/arithmetic.jsonl" --tokenizer "$TOK" --out "$OUT/sft-tok" \
  --chat-template llama3 --seq-len 63 --layout pack --val-fraction 0.15 --force

echo "== 3. fine-tune on 2 ranks, export with the tokenizer =="
"$BRAID" launch -n 2 -- "$BRAID" train "$HERE/finetune.yaml" \
  --set model.init_from="$OUT/base/model" --set data.train="$OUT/sft-tok" \
  --set data.tokenizer="$TOK" --set output.dir="$OUT/run" 2>&1 | tee "$OUT/run.log"
first=$(grep -oE 'step +1/[0-9]+ \| loss [0-9.]+' "$OUT/run.log" | head -1 | awk '{print $NF}')
last=$(grep -oE 'step +60/60 \| loss [0-9.]+' "$OUT/run.log" | head -1 | awk '{print $NF}')
[[ -n $first && -n $last ]] || fail "no first or last loss in the log"
awk "BEGIN{exit !($last < $first / 2)}" || fail "the loss did not fall by half: $first -> $last"
for f in model.safetensors config.json tokenizer.json tokenizer_config.json; do
  [[ -f $OUT/run/model/$f ]] || fail "the export lacks $f"
done

echo "== 4. generate from the exported directory alone =="
"$BRAID" generate --model "$OUT/run/model" --tokenizer "$OUT/run/model" --temperature 0 \
  --tokens 8 --samples 1 \
  --prompt $'<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2 plus 3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n' \
  | tee "$OUT/generate.log"
[[ -s $OUT/generate.log ]] || fail "generate printed nothing"
echo "finetune demo: ok (loss $first -> $last)"
