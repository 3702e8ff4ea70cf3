#!/usr/bin/env bash
# Bad command lines: each must exit non-zero with one error line naming the option and value.
#   cli_errors_test.sh BRAID
set -uo pipefail
BRAID=$1
failures=0
# expect WANT ARGS...: `braid ARGS` exits non-zero and its stderr is one line containing WANT.
expect() {
  local want=$1
  shift
  local err rc
  err=$(timeout 60 "$BRAID" "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc == 0 || $rc == 124 ]] || ! grep -qF -- "$want" <<<"$err" ||
    [[ $(wc -l <<<"$err") != 1 ]]; then
    echo "FAIL: braid $*: exit $rc, stderr: $err (wanted: $want)"
    failures=$((failures + 1))
  else
    echo "ok: braid $*: exit $rc: $err"
  fi
}
expect "unknown command 'trian'" trian x.yaml
expect "--iters: expects an integer, got 'x'" bench comm --iters x
expect "unknown benchmark 'disk'" bench disk
expect "-n: expects an integer, got '2.5'" launch -n 2.5 -- true
expect "--timeout: expects a number, got 'soon'" launch --timeout soon -- true
expect "launch: -n 0 must be at least 1" launch -n 0 -- true
expect "--threads: 4294967297 is out of range [-2147483648, 2147483647]" launch --threads 4294967297 \
  -- true
expect "--tokens: expects an integer, got '3x'" generate --model /nonexistent --tokens 3x
expect "--threads: expects an integer, got 'z'" prepare-data --threads z
expect "unknown option '--sett'" train configs/demo.yaml --sett a=b
expect "unknown option '--sett' (see braid train --help)" train --sett=a=b configs/demo.yaml
expect "unexpected argument 'b.yaml'" train a.yaml b.yaml
expect "--deepspeed needs a value (see braid train --help)" train configs/demo.yaml --deepspeed
expect "unexpected argument 'true': the program goes after --" launch -n 2 true
expect "no program given" launch -n 2 --
expect "-n: expects an integer, got 'p'" launch -n p -- true
expect "--min-bytes: size '4X': unknown unit 'X'" bench comm --min-bytes 4X
expect "unknown option '--iters' (see braid bench tp --help)" bench tp --iters 3
expect "unexpected argument 'extra' (see braid checkpoint verify --help)" checkpoint verify /tmp extra
expect "unknown option '--decod'" tokenize --decod 15496
expect "unexpected argument 'now'" version now
expect "--set expects key=value, got 'training.max_steps'" train configs/demo.yaml \
  --set training.max_steps
expect "CONFIG.yaml is required (see braid train --help)" train
expect "/nonexistent is not a directory" checkpoint verify /nonexistent
expect "unknown checkpoint action 'check'" checkpoint check /tmp
expect "--out is required (see braid checkpoint export --help)" checkpoint export /tmp
expect "--model: unknown model preset 'llama-9b'" estimate-memory --model llama-9b
H100=configs/machines/dgx-h100.json
expect "--world-size must be in [1, 1048576], got 0" plan --model gpt2-small --world-size 0
expect "--model: unknown model preset 'llama-9b'" plan --model llama-9b --profile $H100
expect "machine profile '/nonexistent.json' cannot be read" plan --model gpt2-small \
  --profile /nonexistent.json
expect "the first part is the strategy" plan --model gpt2-small --profile $H100 --explain "zero4 mb1x1"
expect "--hosts 2 must divide --world-size 3" plan --model gpt2-small --world-size 3 --hosts 2
expect "trains 16 sequences a step, not the global batch of 8" plan --model gpt2-small \
  --profile $H100 --world-size 8 --global-batch 8 --explain "ddp mb2x1"
expect "--budget: memory size '8X': unknown unit 'X'" plan --model gpt2-small --profile $H100 --budget 8X
expect "tp 3 x pp 1 x cp 1 does not divide the world of 8" plan --model gpt2-small --profile $H100 \
  --world-size 8 --explain "none tp3 mb1x1"
expect "--world-size must be in [1, 1048576], got 0" estimate-memory --model gpt2-small \
  --world-size 0
expect "--strategy: unknown strategy 'zero4'" estimate-memory --model gpt2-small --strategy zero4
expect "--precision: unknown 'fp8'" estimate-memory --model gpt2-small --precision fp8
expect "--activation-checkpointing: unknown 'some'" estimate-memory --model gpt2-small \
  --activation-checkpointing some
expect "unknown option '--world_size'" estimate-memory --model gpt2-small --world_size 8
expect "--seq-len: expects an integer, got 'long'" estimate-memory --model gpt2-small --seq-len long
expect "--seq-len 4096 exceeds the model's maximum sequence length 1024" estimate-memory --model gpt2-small --seq-len 4096
expect "--tp 3 must divide --world-size 8" estimate-memory --model llama-7b --world-size 8 --tp 3
expect "--pipeline-schedule: unknown 'zigzag'" estimate-memory --model llama-7b --world-size 8 \
  --pp 2 --pipeline-schedule zigzag
expect "--cp 3 x --pp 1 x --tp 2 must divide --world-size 8" estimate-memory --model llama-7b \
  --world-size 8 --tp 2 --cp 3
expect "--sp (parallel.sequence_parallel) needs --tp 2 or more" estimate-memory --model llama-7b \
  --world-size 8 --sp
expect "interleaved_1f1b needs parallel.pipeline_virtual_stages >= 2, got 1" estimate-memory \
  --model llama-7b --world-size 8 --pp 2 --pipeline-schedule interleaved_1f1b
expect "needs training.gradient_accumulation_steps (3) to be a multiple of parallel.pipeline_parallel_size (2)" \
  estimate-memory --model llama-7b --world-size 8 --pp 2 --pipeline-schedule interleaved_1f1b \
  --virtual-stages 2 --gradient-accumulation-steps 3
expect "--pipeline-balance: unknown 'time' (uniform, parameters)" estimate-memory \
  --model llama-7b --world-size 8 --pp 2 --pipeline-balance time
expect "--cp: expects an integer, got 'two'" estimate-memory --model llama-7b --cp two
expect "--cp-mode: unknown 'star' (ring, ulysses)" estimate-memory --model llama-7b --world-size 2 \
  --cp 2 --cp-mode star
expect "--seq-len 1022 does not split over --cp 2 with --cp-mode ring" estimate-memory \
  --model llama-7b --world-size 2 --cp 2 --seq-len 1022
expect "over --cp 8: the model's 12 query and 12 key/value heads must both divide by it" \
  estimate-memory --model gpt2-small --world-size 8 --cp 8 --cp-mode ulysses
expect "--threads must be in [1, 65536], got 0" estimate-memory --model gpt2-small --threads 0
expect "--threads: expects an integer, got 'many'" estimate-memory --model gpt2-small --threads many
expect "--backend: unknown 'nccl' (local, mpi)" estimate-memory --model gpt2-small --backend nccl
expect "--model PRESET|config.json or --config FILE is required" estimate-memory
expect "unknown fsdp sharding strategy 'HALF_SHARD'" estimate-memory --model gpt2-small \
  --strategy fsdp --sharding-strategy HALF_SHARD
# Not an error, but the same kind of promise: `tokenize --decode` prints what HF's decode does,
# U+FFFD for ill-formed UTF-8 (158 is the byte 0xE2 alone, the start of a 3-byte character).
gpt2=${BRAID_DATA_DIR:-data}/gpt2
if [[ -f $gpt2/encoder.json ]]; then
  got=$("$BRAID" tokenize --tokenizer "$gpt2" --decode 15496 158 | od -An -tx1 | tr -d ' \n')
  want=$(printf 'Hello\xef\xbf\xbd\n' | od -An -tx1 | tr -d ' \n')
  if [[ $got == "$want" ]]; then
    echo "ok: braid tokenize --decode 15496 158: Hello + U+FFFD"
  else
    echo "FAIL: braid tokenize --decode 15496 158 printed bytes $got, wanted $want"
    failures=$((failures + 1))
  fi
fi
# prepare-data on bad input: one line naming the file (and line), and no output left behind.
if [[ -f $gpt2/encoder.json ]]; then
  pd=$(mktemp -d)
  printf '{"text": "fine"}\n\n{"text": "oops",}\n' > "$pd/bad.jsonl"
  expect "$pd/bad.jsonl:3: invalid JSON at column 17" prepare-data --input "$pd/bad.jsonl" \
    --tokenizer "$gpt2" --out "$pd/out" --val-fraction 0
  printf '{"body": "x"}\n' | gzip > "$pd/body.jsonl.gz"
  expect "$pd/body.jsonl.gz:1: no \"text\" field (the object has fields \"body\"" prepare-data \
    --input "$pd/body.jsonl.gz" --tokenizer "$gpt2" --out "$pd/out" --val-fraction 0
  printf 'plain text' > "$pd/doc.txt.gz"
  expect "'$pd/doc.txt.gz' is named as gzip but is not gzip data" prepare-data \
    --input "$pd/doc.txt.gz" --tokenizer "$gpt2" --out "$pd/out" --val-fraction 0
  if [[ -e $pd/out ]]; then
    echo "FAIL: a failed prepare-data left $pd/out behind"
    failures=$((failures + 1))
  fi
  if out=$("$BRAID" prepare-data --input "$pd/body.jsonl.gz" --field body --tokenizer "$gpt2" \
    --out "$pd/out" --val-fraction 0 2>&1) && grep -q '^tokenised .* MB/s, .* tokens/s$' <<<"$out"; then
    echo "ok: braid prepare-data --field body: $(tail -1 <<<"$out")"
  else
    echo "FAIL: braid prepare-data --field body: $out"
    failures=$((failures + 1))
  fi
  rm -rf "$pd"
fi
[[ $failures == 0 ]] || { echo "cli_errors_test: $failures failed"; exit 1; }
echo "cli_errors_test: all passed"
