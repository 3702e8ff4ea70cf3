#!/usr/bin/env bash
# Data-parallel training speed, braid DDP vs PyTorch DDP (gloo), alternating runs: 2 ranks x 1
# thread, the bench-small model (GPT-2 style, 6 layers, 6 heads, d_model 384, vocab 8192, seq
# 256), global batch 8, AdamW, fp32, random tokens. Also 1 rank x 1 thread for the scaling
# efficiency (tokens/s at 2 ranks / (2 x tokens/s at 1 rank)) and rank 0's peak RSS.
#
#   bench/ddp_vs_pytorch.sh [ROUNDS=3] [STEPS=12]
#
# PyTorch runs with OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE, with its OpenBLAS at the default
# core type and at OPENBLAS_CORETYPE=SkylakeX; its best run is compared.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
STEPS=${2:-12}
BRAID=${BRAID:-build/release/src/braid/cli/braid}
[ -x "$BRAID" ] || { echo "build braid first (make build)" >&2; exit 1; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | head -1; }
max() { awk "BEGIN{print ($1 > $2) ? $1 : $2}"; }

b2=0 b1=0 b2_rss=0 b2_exp=0 p2=0 p1=0 p2_rss=0 pcfg=""
for r in $(seq "$ROUNDS"); do
  out=$("$BRAID" launch -n 2 --threads 1 -- "$BRAID" train configs/bench-small-ddp.yaml \
        --set training.max_steps="$STEPS" 2>&1 | grep 'summary:')
  t=$(echo "$out" | field tokens_per_s)
  echo "round $r braid   DDP 2x1   tokens/s $t  peak RSS rank 0 $(echo "$out" | field peak_rss_mib) MiB  exposed comm $(echo "$out" | field exposed_comm_ms) ms/step"
  if awk "BEGIN{exit !($t > $b2)}"; then
    b2=$t; b2_rss=$(echo "$out" | field peak_rss_mib); b2_exp=$(echo "$out" | field exposed_comm_ms)
  fi
  out=$(BRAID_NUM_THREADS=1 "$BRAID" train configs/bench-small.yaml \
        --set training.max_steps="$STEPS" 2>&1 | grep '^summary:')
  t=$(echo "$out" | field tokens_per_s); echo "round $r braid   1 rank x1 tokens/s $t"; b1=$(max "$t" "$b1")
  for coretype in default SkylakeX; do
    env_ct=(); [ "$coretype" = SkylakeX ] && env_ct=(OPENBLAS_CORETYPE=SkylakeX)
    out=$(env "${env_ct[@]}" OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 \
          bench/pytorch_train.py --ddp --world 2 --threads 1 --steps "$STEPS" 2>&1 | grep '^pytorch')
    t=$(echo "$out" | field tokens_per_s)
    echo "round $r pytorch DDP 2x1   tokens/s $t  peak RSS rank 0 $(echo "$out" | field peak_rss_mib) MiB ($coretype)"
    if awk "BEGIN{exit !($t > $p2)}"; then p2=$t; p2_rss=$(echo "$out" | field peak_rss_mib); pcfg=$coretype; fi
    out=$(env "${env_ct[@]}" OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 \
          bench/pytorch_train.py --threads 1 --steps "$STEPS" 2>&1 | grep '^pytorch')
    t=$(echo "$out" | field tokens_per_s); echo "round $r pytorch 1 rank x1 tokens/s $t ($coretype)"; p1=$(max "$t" "$p1")
  done
done
echo
printf "%-34s %14s %14s\n" "2 ranks x 1 thread (best of $ROUNDS)" "braid" "PyTorch gloo"
printf "%-34s %14.1f %14.1f\n" "DDP tokens/s" "$b2" "$p2"
printf "%-34s %14.1f %14.1f\n" "1 rank x 1 thread tokens/s" "$b1" "$p1"
printf "%-34s %13.0f%% %13.0f%%\n" "scaling efficiency" "$(awk "BEGIN{print 100*$b2/(2*$b1)}")" "$(awk "BEGIN{print 100*$p2/(2*$p1)}")"
printf "%-34s %14.1f %14.1f\n" "peak RSS rank 0 (MiB)" "$b2_rss" "$p2_rss"
printf "%-34s %14.2f\n" "braid exposed comm (ms/step)" "$b2_exp"
printf "%-34s %13.2fx  (PyTorch OPENBLAS_CORETYPE=%s)\n" "braid / PyTorch DDP" "$(awk "BEGIN{print $b2/$p2}")" "$pcfg"
