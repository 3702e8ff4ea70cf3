#!/usr/bin/env bash
# Bad input to `braid launch -n 2 -- braid train`: each case must end non-zero, with every rank
# printing one error line that names what is wrong, and the launcher's one-line cause.
#   bad_input_test.sh BRAID CONFIG
set -uo pipefail
BRAID=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A private copy: no other test's process lines (pgrep -f) can match ours.
CONFIG=$work/config.yaml
cp "$2" "$CONFIG"

sed 's/global_batch_size/global_bach_size/' "$CONFIG" > "$work/misspelt.yaml"
mkdir -p "$work/garbage"
head -c 4096 /dev/urandom > "$work/garbage/train_000000.bin"
# Paths that are the wrong kind of thing: a directory for a file, a file for a directory, an
# empty config, and keys given twice (YAML, DeepSpeed's JSON, Accelerate's YAML).
mkdir -p "$work/adir.yaml" "$work/model_dir"
echo "not a directory" > "$work/afile"
: > "$work/empty.yaml"
max_steps_line=$(grep -n '^  max_steps:' "$CONFIG" | cut -d: -f1)
sed "${max_steps_line}a\\  max_steps: 3" "$CONFIG" > "$work/twice.yaml"
printf '{\n  "train_batch_size": 8,\n  "train_batch_size": 16\n}\n' > "$work/twice.json"
printf 'distributed_type: MULTI_CPU\nmixed_precision: bf16\nmixed_precision: "no"\n' \
  > "$work/twice_acc.yaml"
# A real prepared shard (a byte-level tokenizer without merges: GPT-2's byte symbols, token id =
# byte), then one with a byte flipped in its payload: 201 u16 tokens, file bytes [64, 466), the
# chunk's checksum at 466.
mkdir -p "$work/tokenizer" "$work/text"
{
  printf '{'
  shifted=0
  for b in $(seq 0 255); do
    if ((b >= 33 && b <= 126 || b >= 161 && b <= 172 || b >= 174)); then
      symbol=$b
    else
      symbol=$((256 + shifted))
      shifted=$((shifted + 1))
    fi
    printf '"\\u%04x": %d, ' "$symbol" "$b"
  done
  printf '"<|endoftext|>": 256}\n'
} > "$work/tokenizer/encoder.json"
echo '#version: 0.2' > "$work/tokenizer/vocab.bpe"
printf 'a%.0s' $(seq 200) > "$work/text/doc.txt"
"$BRAID" prepare-data --input "$work/text" --tokenizer "$work/tokenizer" --out "$work/tok" \
  --val-fraction 0 > "$work/prepare.log" 2>&1 || { cat "$work/prepare.log"; exit 1; }
cp -r "$work/tok" "$work/flipped"
printf '\x01' | dd of="$work/flipped/train_000000.bin" bs=1 seek=100 conv=notrunc status=none
echo '{"model_type": "llama", "vocab_size": 512, "max_position_embeddings": 64, "hidden_size": 64,
      "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 1}' > "$work/one_kv_head.json"
tiny=(--set model.preset=gpt2-tiny --set data.seq_len=16 --set training.global_batch_size=2)

failures=0
# check NAME WANT ARGS...: runs `braid train ARGS` on 2 ranks, wants a non-zero exit and /WANT/
# in every rank's error line. check_program is the same for any PROGRAM ARGS after the --.
check() {
  local name=$1 want=$2
  shift 2
  check_program "$name" "$want" "$BRAID" train "$@"
}
check_program() {
  local name=$1 want=$2
  shift 2
  local out rc
  out=$(timeout 120 "$BRAID" launch -n 2 -- "$@" 2>&1)
  rc=$?
  local fail=""
  [[ $rc == 0 ]] && fail="exit status 0"
  [[ $rc == 124 ]] && fail="hung (killed by timeout 120)"
  for r in 0 1; do
    grep -Eq "^\[rank $r\] braid train: error: .*$want" <<<"$out" ||
      fail="$fail; rank $r has no error line matching /$want/"
  done
  grep -Eq "^braid launch: job failed \(exit [1-9][0-9]*\): .*$want" <<<"$out" ||
    fail="$fail; no launcher cause line"
  if [[ -n $fail ]]; then
    echo "FAIL $name: $fail"
    echo "$out" | tail -20
    failures=$((failures + 1))
  else
    echo "ok $name: exit $rc: $(grep -m1 '^\[rank 0\]' <<<"$out")"
  fi
}

check batch-arithmetic \
  "global_batch_size 10 != micro_batch_size 4 x gradient_accumulation_steps 2 x data-parallel size 2 = 16" \
  "$CONFIG" --set training.global_batch_size=10 --set training.micro_batch_size=4 \
  --set training.gradient_accumulation_steps=2
check misspelt-key "misspelt.yaml:[0-9]+: unknown key 'training.global_bach_size' \(did you mean 'training.global_batch_size'\?\)" \
  "$work/misspelt.yaml"
check missing-config "cannot open config file '.*nope.yaml'" "$work/nope.yaml"
check missing-data "'$work/none' is not a directory" \
  "$CONFIG" --set data.random_tokens=false --set data.train="$work/none"
check corrupt-shard "train_000000.bin': bad magic at offset 0" \
  "$CONFIG" --set data.random_tokens=false --set data.train="$work/garbage"
check bad-value "--set: key 'training.max_steps' must be an integer, got 'twelve'" "$CONFIG" --set training.max_steps=twelve

# Context parallelism: a sequence its zig-zag split cannot cut, Ulysses over heads that do not
# divide, an unknown mode.
check cp-seq-len "data.seq_len 18 does not split over parallel.context_parallel_size 2 with parallel.context_parallel_mode ring" \
  "$CONFIG" "${tiny[@]}" --set data.seq_len=18 --set parallel.context_parallel_size=2
check cp-heads "parallel.context_parallel_mode ulysses splits the attention heads over parallel.context_parallel_size 2: model.n_head 4 and model.n_kv_head 1" \
  "$CONFIG" "${tiny[@]}" --set model.preset= --set model.config="$work/one_kv_head.json" \
  --set parallel.context_parallel_size=2 --set parallel.context_parallel_mode=ulysses
check cp-mode "'parallel.context_parallel_mode' is 'rings', expected one of: ring, ulysses" \
  "$CONFIG" "${tiny[@]}" --set parallel.context_parallel_mode=rings

# Ranks started with different values (here the seed is the rank number).
check_program differing-config \
  "the config differs across ranks: rank\(s\) 1 differ from rank 0 in training.seed" \
  sh -c "exec '$BRAID' train '$CONFIG' --set training.seed=\$OMPI_COMM_WORLD_RANK"

# Sharded data parallel: a shard group size that does not tile the ranks, a memory budget no
# strategy fits (stops at start, with the per-category breakdown and what each strategy needs),
# and ranks started with different strategies.
check sharding-factor "parallel.sharding_factor 3 does not divide the data-parallel size 2" \
  "$CONFIG" --set parallel.strategy=fsdp --set parallel.sharding_strategy=HYBRID_SHARD \
  --set parallel.sharding_factor=3
check budget-too-small "out of memory on cpu \(rank [01]\): allocating .* past the budget of 1.0 MiB.*Not even zero3 fits" \
  "$CONFIG" --set parallel.strategy=zero3 --set memory.budget=1MiB
check_program differing-strategy \
  "the config differs across ranks: rank\(s\) 1 differ from rank 0 in parallel.strategy" \
  sh -c "exec '$BRAID' train '$CONFIG' --set parallel.strategy=\$([ \$OMPI_COMM_WORLD_RANK = 0 ] && echo zero3 || echo ddp)"

# Checks that used to come too late (after the run) or never (issue 26).
check yaml-directory "config file '$work/adir.yaml' is a directory, not a YAML file" \
  "$work/adir.yaml"
check yaml-empty "config file '$work/empty.yaml' is empty \(no keys\)" "$work/empty.yaml"
check duplicate-key "twice.yaml:$((max_steps_line + 1)): duplicate key 'training.max_steps' at lines $max_steps_line and $((max_steps_line + 1))" \
  "$work/twice.yaml"
check duplicate-deepspeed-key "twice.json:3: duplicate key 'train_batch_size' at lines 2 and 3" \
  "$CONFIG" --deepspeed "$work/twice.json"
check duplicate-accelerate-key "twice_acc.yaml:3: duplicate key 'mixed_precision' at lines 2 and 3" \
  "$CONFIG" --accelerate-config "$work/twice_acc.yaml"
check model-config-directory "model.config '$work/model_dir' is a directory, not an HF config.json file" \
  "$CONFIG" --set model.config="$work/model_dir"
check output-dir-file "output.dir '$work/afile': cannot write the exported model to '$work/afile/model': '$work/afile' is a file, not a directory" \
  "$CONFIG" --set output.dir="$work/afile" --set output.export_model=true
check corrupt-chunk "flipped/train_000000.bin': corrupt: chunk 0 \(file bytes \[64, 466\)\) does not match its checksum at offset 466" \
  "$CONFIG" "${tiny[@]}" --set data.random_tokens=false --set data.train="$work/flipped"

# Resume: a checkpoint at step 2, then max_steps 1 (an error naming both) and 2 (nothing left to
# train, exit 0). The intact shard trains, so the flipped one above failed for its byte alone.
resume=("${tiny[@]}" --set data.random_tokens=false --set data.train="$work/tok"
  --set checkpoint.dir="$work/ckpt" --set checkpoint.interval=2)
if ! out=$(timeout 120 "$BRAID" launch -n 2 -- "$BRAID" train "$CONFIG" "${resume[@]}" \
  --set training.max_steps=2 2>&1); then
  echo "FAIL resume setup: training 2 steps on the intact shard failed"
  echo "$out" | tail -20
  failures=$((failures + 1))
fi
check resume-beyond-max-steps "resume: checkpoint '$work/ckpt/[^']+' is at step 2, beyond training.max_steps = 1" \
  "$CONFIG" "${resume[@]}" --set training.max_steps=1
out=$(timeout 120 "$BRAID" launch -n 2 -- "$BRAID" train "$CONFIG" "${resume[@]}" \
  --set training.max_steps=2 2>&1)
rc=$?
if [[ $rc != 0 ]] || ! grep -q "nothing left to train: training.max_steps is 2" <<<"$out" ||
  ! grep -q "summary: steps=0 " <<<"$out"; then
  echo "FAIL resume-at-max-steps: exit $rc"
  echo "$out" | tail -20
  failures=$((failures + 1))
else
  echo "ok resume-at-max-steps: exit 0: $(grep -m1 'nothing left to train' <<<"$out")"
fi

[[ $failures == 0 ]] || { echo "bad_input_test: $failures case(s) failed"; exit 1; }
echo "bad_input_test: 20 cases passed"
