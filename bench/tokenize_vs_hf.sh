#!/usr/bin/env bash
# Tokenising speed, braid prepare-data vs Hugging Face's Rust tokenizers, on the demo corpus
# (DATA/sotu, 233 documents, 10.8 MB) with the GPT-2 tokenizer, side by side:
#   braid   `braid prepare-data` end to end (tokenizer loading, reading, tokenising, writing the
#           shards), with GPT-2's encoder.json + vocab.bpe (DATA/gpt2, what the demo uses) and
#           with the tokenizer.json HF reads (DATA/tokenizers/gpt2), on 1 thread and every core
#   HF      tools/tokenize_speed.mjs: the `tokenizers` npm package (HF's Node bindings of the
#           Rust library, prebuilt), encode() per document (1 core) and encodeBatch() (rayon,
#           every core), encoding alone timed: no loading, reading or writing
#
#   npm install --prefix /tmp/hf tokenizers          # once; HF_PREFIX=/tmp/hf is the default
#   bench/tokenize_vs_hf.sh [ROUNDS=3]
#
# DATA is $BRAID_DATA_DIR, else data/ (scripts/fetch-data.sh fills it). Each row is the best of
# ROUNDS runs: MB/s of document text over wall time, and over CPU time (user + system of every
# thread), the figure a machine shared with other work moves least. Without the npm package the
# HF rows are skipped with a note.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
BRAID=${BRAID:-build/release/src/braid/cli/braid}
DATA=${BRAID_DATA_DIR:-data}
HF_PREFIX=${HF_PREFIX:-/tmp/hf}
[ -x "$BRAID" ] || { echo "build braid first (make build)" >&2; exit 1; }
[ -d "$DATA/sotu" ] && [ -f "$DATA/gpt2/encoder.json" ] ||
  { echo "no corpus or tokenizer under $DATA: run scripts/fetch-data.sh" >&2; exit 1; }

cores=$(nproc)
cpu_field() { lscpu | sed -n "s/^$1: *//p" | head -1; }
echo "CPU: $(cpu_field 'Model name') (family $(cpu_field 'CPU family') model $(cpu_field 'Model')), $cores cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "corpus $DATA/sotu: $(ls "$DATA"/sotu/*.txt | wc -l) documents, $(cat "$DATA"/sotu/*.txt | wc -c) bytes; best of $ROUNDS"
printf '%-62s %7s %10s %14s\n' "" threads "MB/s" "MB/s per CPU-s"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# braid_row LABEL TOKENIZER THREADS
braid_row() {
  local best=0 best_cpu=0 line mbs cpu
  for _ in $(seq "$ROUNDS"); do
    rm -rf "$work/out"
    local TIMEFORMAT='%R %U %S'
    { time "$BRAID" prepare-data --input "$DATA/sotu" --tokenizer "$2" --out "$work/out" \
        --threads "$3" > "$work/log" 2>&1; } 2> "$work/time"
    line=$(grep '^tokenised' "$work/log") || { cat "$work/log" >&2; exit 1; }
    # "tokenised 10.76 MB of text, ... : 9.86 MB/s, ..."
    mbs=$(sed -n 's/.*: \([0-9.]*\) MB\/s.*/\1/p' <<<"$line")
    cpu=$(awk -v mb="$(sed -n 's/^tokenised \([0-9.]*\) MB.*/\1/p' <<<"$line")" \
      '{ printf "%.2f", mb / ($2 + $3) }' "$work/time")
    if awk "BEGIN { exit !($mbs > $best) }"; then best=$mbs best_cpu=$cpu; fi
  done
  printf '%-62s %7s %10s %14s\n' "$1" "$3" "$best" "$best_cpu"
}

for t in 1 "$cores"; do
  braid_row "braid prepare-data, gpt2 encoder.json + vocab.bpe" "$DATA/gpt2" "$t"
done
if [ -f "$DATA/tokenizers/gpt2/tokenizer.json" ]; then
  for t in 1 "$cores"; do
    braid_row "braid prepare-data, gpt2 tokenizer.json" "$DATA/tokenizers/gpt2" "$t"
  done
fi

if [ ! -f "$HF_PREFIX/node_modules/tokenizers/package.json" ]; then
  echo "HF: no tokenizers package under $HF_PREFIX (npm install --prefix $HF_PREFIX tokenizers); skipped"
  exit 0
fi
[ -f "$DATA/tokenizers/gpt2/tokenizer.json" ] ||
  { echo "HF: no $DATA/tokenizers/gpt2/tokenizer.json (scripts/fetch-data.sh); skipped"; exit 0; }
node tools/tokenize_speed.mjs "$HF_PREFIX" "$DATA/tokenizers/gpt2/tokenizer.json" "$DATA/sotu" \
  "$ROUNDS" > "$work/hf"
version=$(sed -n 's/^hf tokenizers \([^ ]*\).*/\1/p' "$work/hf")
while read -r _ run _ mbs _ cpu _ _ _ _ _ _ _ threads; do
  label="HF tokenizers $version (Rust) $([ "$run" = single ] && echo "encode" || echo "encodeBatch"), gpt2 tokenizer.json"
  printf '%-62s %7s %10s %14s\n' "$label" "$threads" "$mbs" "$cpu"
done < <(grep -E '^hf (single|batch) ' "$work/hf")
