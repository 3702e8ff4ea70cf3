#!/usr/bin/env bash
# The pipeline bubble: measured idle fraction of a step against the textbook formula,
# (p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(v m+p-1) for interleaved_1f1b (v = 2),
# (p-1)/(3m+p-1) for zb_h1 (Note [ZB-H1 bubble], parallel/pipeline/schedule.h, at equal F, B and
# W costs) and 1 - 6m/max(6m+p-1, 4m+4p-2) for zb_v (Note [ZB-V], equal chunk pass costs), at
# m = 4, 8, 16 micro-batches on pp = 2 ranks x 1 thread
# (configs/bench-pipeline.yaml: GPT-2 style, 8 layers, d_model 384, vocab 256, seq 128,
# micro-batch 2, uniform stages).
#
#   bench/pipeline.sh [STEPS=12] [ROUNDS=2] [TRACE_DIR]
#   SCHEDULES="1f1b zb_h1 zb_v" bench/pipeline.sh     # some of the schedules only
#   SINGLE_COPY=none bench/pipeline.sh    # MPI's messages through shared buffers (Note [Single copy],
#                                         # braid launch --single-copy)
#
# "measured" is the summary's bubble: per rank, the share of forward_backward() not spent in
# forward or backward compute (waiting for activations or gradients, sends, the tied
# embeddings' all-reduce; zb_h1's and zb_v's W passes count as compute), median over the steps after
# warm-up, mean over the ranks; each row is its best of ROUNDS runs (on 2 shared cores a busy
# moment stretches one stage's compute and the other stage waits for it). With TRACE_DIR, each run also writes its Chrome trace there
# (open in https://ui.perfetto.dev).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-12}
ROUNDS=${2:-2}
TRACE_DIR=${3:-}
BRAID=${BRAID:-build/release/src/braid/cli/braid}
[ -x "$BRAID" ] || { echo "build braid first (make build)" >&2; exit 1; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | head -1; }

lscpu | sed -n 's/^Model name: *\(.*\)/CPU: \1/p'
lscpu | sed -n 's/^CPU(s): *\(.*\)/cores: \1/p'
echo "date: $(date '+%Y-%m-%d %H:%M:%S %Z')  braid $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "braid launch --single-copy ${SINGLE_COPY:-auto}"
echo
printf '| schedule | m | measured bubble | formula | difference | tokens/s |\n'
printf '|---|---|---|---|---|---|\n'
for schedule in ${SCHEDULES:-gpipe 1f1b interleaved_1f1b zb_h1 zb_v}; do
  for m in 4 8 16; do
    v=1
    [ "$schedule" = interleaved_1f1b ] || [ "$schedule" = zb_v ] && v=2
    extra=()
    [ -n "$TRACE_DIR" ] && extra=(--set "parallel.pipeline_trace=$TRACE_DIR/${schedule}_m$m.json")
    measured=1 tps=0
    for _ in $(seq "$ROUNDS"); do
      out=$("$BRAID" launch -n 2 --single-copy "${SINGLE_COPY:-auto}" -- \
        "$BRAID" train configs/bench-pipeline.yaml \
        --set training.max_steps="$STEPS" --set training.gradient_accumulation_steps="$m" \
        --set parallel.pipeline_schedule="$schedule" --set parallel.pipeline_virtual_stages="$v" \
        "${extra[@]}" 2>&1) || { echo "$out" >&2; exit 1; }
      summary=$(echo "$out" | grep 'summary:')
      b=$(echo "$summary" | field bubble)
      if awk -v a="$b" -v c="$measured" 'BEGIN { exit !(a + 0 < c + 0) }'; then
        measured=$b
        tps=$(echo "$summary" | field tokens_per_s)
      fi
    done
    awk -v s="$schedule" -v m="$m" -v v="$v" -v b="$measured" -v t="$tps" 'BEGIN {
      f = s == "zb_h1" ? 1 / (3 * m + 1) : 1 / (v * m + 1)
      if (s == "zb_v") f = 1 - 6 * m / (6 * m + 1 > 4 * m + 6 ? 6 * m + 1 : 4 * m + 6)
      printf "| %s | %d | %.1f%% | %.1f%% | %+.1f points | %.0f |\n", s, m, 100 * b, 100 * f,
             100 * (b - f), t }'
  done
done
