#!/usr/bin/env bash
# Single-process training speed, braid vs PyTorch, alternating runs on the same model
# (configs/bench-small.yaml: GPT-2 style, 6 layers, 6 heads, d_model 384, vocab 8192, seq 256,
# batch 8, AdamW, fp32, random tokens, 2 threads).
#
#   bench/train_vs_pytorch.sh [ROUNDS=3] [STEPS=12]
#
# PyTorch runs with OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE, once with its OpenBLAS at the
# detected core type and once with OPENBLAS_CORETYPE=SkylakeX (OpenBLAS 0.3.21 does not know
# Zen 5 and falls back to AVX2); the best of all its runs is the one compared.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
STEPS=${2:-12}
THREADS=${THREADS:-2}
BRAID=${BRAID:-build/release/src/braid/cli/braid}
[ -x "$BRAID" ] || { echo "build braid first (make build)" >&2; exit 1; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | head -1; }

best_braid=0 best_mfu=0 best_pt=0 best_pt_cfg=""
for r in $(seq "$ROUNDS"); do
  out=$(BRAID_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS "$BRAID" train configs/bench-small.yaml \
        --set training.max_steps="$STEPS" 2>&1 | grep '^summary:')
  tps=$(echo "$out" | field tokens_per_s); mfu=$(echo "$out" | field mfu)
  echo "round $r braid                 tokens/s $tps  MFU $(awk "BEGIN{printf \"%.1f%%\", 100*$mfu}")"
  awk "BEGIN{exit !($tps > $best_braid)}" && best_braid=$tps && best_mfu=$mfu
  for coretype in default SkylakeX; do
    env_ct=(); [ "$coretype" = SkylakeX ] && env_ct=(OPENBLAS_CORETYPE=SkylakeX)
    out=$(env "${env_ct[@]}" OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 \
          bench/pytorch_train.py --steps "$STEPS" --threads "$THREADS" 2>&1 | grep '^pytorch')
    tps=$(echo "$out" | field tokens_per_s)
    echo "round $r pytorch ($coretype) tokens/s $tps"
    awk "BEGIN{exit !($tps > $best_pt)}" && best_pt=$tps && best_pt_cfg=$coretype
  done
done
echo
printf "%-44s %12s\n" "single process, $THREADS threads (best of $ROUNDS)" "tokens/s"
printf "%-44s %12.1f\n" "braid" "$best_braid"
printf "%-44s %12.1f\n" "PyTorch $(/usr/bin/python3 -c 'import torch;print(torch.__version__)') (OPENBLAS_CORETYPE=$best_pt_cfg)" "$best_pt"
printf "%-44s %12.2fx\n" "braid / PyTorch" "$(awk "BEGIN{print $best_braid/$best_pt}")"
printf "%-44s %12.1f%%\n" "braid MFU (6N+12LTC vs measured GEMM peak)" "$(awk "BEGIN{print 100*$best_mfu}")"
