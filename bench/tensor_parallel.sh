#!/usr/bin/env bash
# Tensor parallelism against data parallelism on 2 ranks x 1 thread, side by side from one run:
# braid dp2 (ddp), tp2, tp2 + sequence parallelism, on the bench-small model
# (configs/bench-small-ddp.yaml: GPT-2 style, 6 layers, d_model 384, vocab 8192, seq 256, global
# batch 8, AdamW, fp32, random tokens), then `braid bench tp` (the tensor-parallel traffic per
# micro-step against Megatron's formula) for both tp columns.
#
#   bench/tensor_parallel.sh [ROUNDS=3] [STEPS=12]
#
# Each round runs every column once, starting one column later each round; a column's numbers
# come from its best round. "exposed comm" is exposed_comm_ms (median over steps, rank 0): DDP's
# wait for its bucket all-reduces, tp's wait for the model's collectives (forward and backward).
# Peak tracked memory is rank 0's.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
STEPS=${2:-12}
BRAID=${BRAID:-build/release/src/braid/cli/braid}
CONFIG=configs/bench-small-ddp.yaml
[ -x "$BRAID" ] || { echo "build braid first (make build)" >&2; exit 1; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | head -1; }
gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 > b + 0) }'; }

cols=(dp2 tp2 tp2_sp)
declare -A label=([dp2]="dp2 (ddp)" [tp2]="tp2" [tp2_sp]="tp2 + sequence parallel")
declare -A args=(
  [dp2]="--set parallel.strategy=ddp"
  [tp2]="--set parallel.tensor_parallel_size=2"
  [tp2_sp]="--set parallel.tensor_parallel_size=2 --set parallel.sequence_parallel=true"
)
declare -A best exposed peak
for c in "${cols[@]}"; do best[$c]=0 exposed[$c]=- peak[$c]=-; done

lscpu | sed -n 's/^Model name: *\(.*\)/CPU: \1/p'
lscpu | sed -n 's/^CPU(s): *\(.*\)/cores: \1/p'
echo "date: $(date '+%Y-%m-%d %H:%M:%S %Z')  braid $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo
for r in $(seq "$ROUNDS"); do
  for i in 0 1 2; do
    c=${cols[$(((i + r - 1) % 3))]}
    # shellcheck disable=SC2086  # args holds several words on purpose
    out=$("$BRAID" launch -n 2 --threads 1 -- "$BRAID" train "$CONFIG" \
      --set training.max_steps="$STEPS" --set output.export_model=false ${args[$c]} 2>&1 |
      grep 'summary:' | head -1 || true)
    t=$(echo "$out" | field tokens_per_s)
    e=$(echo "$out" | field exposed_comm_ms)
    p=$(echo "$out" | field peak_tracked_mib)
    printf "round %s %-26s tokens/s %8s  exposed comm %6s ms  peak tracked %7s MiB\n" \
      "$r" "${label[$c]}" "${t:--}" "${e:--}" "${p:--}"
    [ -n "$t" ] || continue
    if gt "$t" "${best[$c]}"; then best[$c]=$t exposed[$c]=$e peak[$c]=$p; fi
  done
done
echo
printf "%-26s %10s %10s %18s %18s\n" "best of $ROUNDS" "tokens/s" "vs dp2" "exposed comm ms" "peak tracked MiB"
for c in "${cols[@]}"; do
  ratio=$(awk -v a="${best[$c]}" -v b="${best[dp2]}" 'BEGIN { r = b > 0 ? a / b : 0; printf "%.2fx", r }')
  printf "%-26s %10s %10s %18s %18s\n" "${label[$c]}" "${best[$c]}" "$ratio" "${exposed[$c]}" "${peak[$c]}"
done
echo
for sp in "" "--sp"; do
  "$BRAID" launch -n 2 --threads 1 -- "$BRAID" bench tp --preset bench-small --batch 4 \
    --seq-len 256 $sp 2>&1 | sed -n 's/^\[rank 0\] //p'
done
