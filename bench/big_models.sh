#!/usr/bin/env bash
# Big models on this machine (issue 29 goal 2): GPT-2 124M, 355M, 774M, 1.5B and a 1.1B LLaMA
# (TinyLlama's widths, configs/models/llama-1b.json), bf16, 2 ranks, sequence 1024, global batch 4,
# each with the layout the planner chooses within the memory budget (configs/bench-big.yaml:
# parallel.strategy auto, memory.budget BUDGET per rank). Prints one row per model: the layout,
# tokens/s, MFU (against the calibrated bf16 GEMM peak of 2 ranks, as every braid run reports it),
# the median step after the first, rank 0's peak tracked memory and resident set; writes the table
# and a plot of MFU and tokens/s against parameters (OUT/big-models.svg).
#
#   bench/big_models.sh [OUT=out/big-models] [BUDGET=10GiB] [STEPS=3] [MODELS="..."]
#
# The profile (OUT/profile.json) is calibrated first unless it is there. Layouts that offload
# keep their files in OUT/offload (the 1.5B model's optimizer state: about 9 GB a rank).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/big-models}
BUDGET=${2:-10GiB}
STEPS=${3:-3}
MODELS=${4:-gpt2-small gpt2-medium gpt2-large gpt2-xl configs/models/llama-1b.json}
BRAID=${BRAID:-build/release/src/braid/cli/braid}
[ -x "$BRAID" ] || { echo "build braid first (make build)" >&2; exit 1; }
mkdir -p "$OUT/logs"
export BRAID_MACHINE_PROFILE="$OUT/profile.json"
[ -f "$BRAID_MACHINE_PROFILE" ] || "$BRAID" plan --calibrate --profile "$BRAID_MACHINE_PROFILE" \
  --disk-dir "$OUT" > "$OUT/calibrate.txt" 2>&1

lscpu | sed -n 's/^Model name: *\(.*\)/CPU: \1/p'
lscpu | sed -n 's/^CPU family: *\(.*\)/family: \1/p;s/^Model: *\(.*\)/model: \1/p'
echo "date: $(date '+%Y-%m-%d %H:%M:%S %Z')  braid $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "2 ranks, bf16, sequence 1024, global batch 4, budget $BUDGET a rank, $STEPS steps"
echo
echo '| model | parameters | layout (planner) | tokens/s | MFU | step s | peak tracked GiB | peak RSS GiB |'
echo '|---|---|---|---|---|---|---|---|'
field() { awk -v k="$1=" '!d && i = index($0, k) { s = substr($0, i + length(k)); sub(/[^0-9.a-z]+.*/, "", s); print s; d = 1 }'; }
rows="$OUT/rows.tsv"
: > "$rows"
for m in $MODELS; do
  name=$(basename "$m" .json)
  case "$m" in *.json) key=model.config ;; *) key=model.preset ;; esac
  log="$OUT/logs/$name.txt"
  "$BRAID" launch -n 2 -- "$BRAID" train configs/bench-big.yaml --set "$key=$m" \
    --set memory.budget="$BUDGET" --set training.max_steps="$STEPS" \
    --set output.dir="$OUT/run" --set parallel.offload_dir="$OUT/offload" < /dev/null > "$log" 2>&1 ||
    { echo "| $name | failed: see $log |"; continue; }
  params=$(grep -m1 '\] model: ' "$log" | grep -o '[0-9]* parameters' | cut -d' ' -f1)
  layout=$(grep -m1 'plan: ' "$log" | sed 's/.*plan: \([^,]*\),.*/\1/')
  summary=$(grep -m1 'summary:' "$log")
  tps=$(echo "$summary" | field tokens_per_s)
  mfu=$(echo "$summary" | field mfu)
  step=$(echo "$summary" | field step_ms)
  tracked=$(echo "$summary" | field peak_tracked_mib)
  rss=$(echo "$summary" | field peak_rss_mib)
  awk -v n="$name" -v p="$params" -v l="$layout" -v t="$tps" -v f="$mfu" -v s="$step" \
    -v a="$tracked" -v r="$rss" 'BEGIN {
      printf "| %s | %.0fM | %s | %.0f | %.1f%% | %.1f | %.2f | %.2f |\n", n, p / 1e6, l, t, 100 * f, s / 1000, a / 1024, r / 1024 }'
  printf '%s\t%s\t%s\t%s\n' "$name" "$params" "$tps" "$mfu" >> "$rows"
done
python3 tools/plot_big_models.py "$rows" "$OUT/big-models.svg"
echo
echo "plot: $OUT/big-models.svg"
