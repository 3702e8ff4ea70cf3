#!/usr/bin/env bash
# Mixed-precision training speed and memory, braid vs PyTorch, on the bench-small model
# (configs/bench-small.yaml: GPT-2 style, 6 layers, 6 heads, d_model 384, vocab 8192, seq 256,
# global batch 8, AdamW, random tokens): braid training.precision fp32 and bf16 (bf16 forward
# and backward, f32 master weights, gradients and AdamW state) against PyTorch fp32 and PyTorch
# bf16 CPU autocast (fp32 parameters and AdamW, torch.autocast("cpu", torch.bfloat16) around
# forward and loss), one process x THREADS threads and DDP 2 ranks x 1 thread.
#
#   bench/precision_vs_pytorch.sh [ROUNDS=3] [STEPS=12]
#
# Each round runs all eight columns once, starting one column later than the round before, so
# a change in the machine's load falls on every column; tokens/s is the best and the median of
# the rounds. PyTorch runs at its best settings from train_vs_pytorch.sh and ddp_vs_pytorch.sh:
# OMP_NUM_THREADS=<threads per rank> OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=SkylakeX, DDP on
# gloo. Memory is rank 0's, the largest over the rounds: peak RSS for all, and for braid the
# peaks of the "parameters" and "activations" lines of its end-of-run "memory (rank 0):" summary.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
STEPS=${2:-12}
THREADS=${THREADS:-2}
BRAID=${BRAID:-build/release/src/braid/cli/braid}
PYTHON=/usr/bin/python3  # Debian's python3-torch, as the other bench scripts use
[ -x "$BRAID" ] || { echo "build braid first (make build)" >&2; exit 1; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | head -1; }
max() { awk "BEGIN{print ($1 > $2) ? $1 : $2}"; }
# best / median of a space-separated list of numbers
best() { tr -s ' ' '\n' <<< "$1" | grep . | sort -g | tail -1; }
median() {
  tr -s ' ' '\n' <<< "$1" | grep . | sort -g |
    awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
# Peak in MiB of one category ("parameters 79.5 MiB (peak 79.5 MiB)") of braid's memory summary.
peak_mib() {
  awk -v c="$1" '{ sub(/^\[rank [0-9]+\] /, "") }
    /^memory \(rank 0\):/ { in_summary = 1; next }
    in_summary && index($0, c " ") == 1 && match($0, /\(peak [0-9.]+ [KMGT]?i?B\)/) {
      split(substr($0, RSTART + 6, RLENGTH - 7), v, " ")
      f = v[2] == "B" ? 1 / 1048576 : v[2] == "KiB" ? 1 / 1024 : v[2] == "MiB" ? 1 : \
          v[2] == "GiB" ? 1024 : 1048576
      printf "%.1f\n", v[1] * f; exit
    }'
}

# Column ids <who>_<layout>_<precision>: layout 1 = one process x THREADS, 2 = DDP 2 ranks x 1.
COLS=(braid_1_fp32 braid_1_bf16 pytorch_1_fp32 pytorch_1_bf16
      braid_2_fp32 braid_2_bf16 pytorch_2_fp32 pytorch_2_bf16)
declare -A TPS RSS PARAMS ACTS
for c in "${COLS[@]}"; do TPS[$c]=""; RSS[$c]=0; PARAMS[$c]=0; ACTS[$c]=0; done

# Runs column $1 once; sets out to its output and prints a progress line.
run_column() {
  local who layout precision cmd
  IFS=_ read -r who layout precision <<< "$1"
  case $who/$layout in
    braid/1) cmd=(env BRAID_NUM_THREADS="$THREADS" OMP_NUM_THREADS="$THREADS" "$BRAID" train
                  configs/bench-small.yaml) ;;
    braid/2) cmd=("$BRAID" launch -n 2 --threads 1 -- "$BRAID" train configs/bench-small-ddp.yaml) ;;
    pytorch/1) cmd=(env OMP_NUM_THREADS="$THREADS" OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=SkylakeX
                    "$PYTHON" bench/pytorch_train.py --threads "$THREADS") ;;
    pytorch/2) cmd=(env OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=SkylakeX
                    "$PYTHON" bench/pytorch_train.py --ddp --world 2 --threads 1) ;;
  esac
  if [ "$who" = braid ]; then
    cmd+=(--set training.max_steps="$STEPS" --set training.precision="$precision")
  else
    cmd+=(--steps "$STEPS" --precision "$precision")
  fi
  local rc=0
  out=$("${cmd[@]}" 2>&1) || rc=$?
  local line; line=$(echo "$out" | grep -E '^(\[rank 0\] )?summary:|^pytorch ' || true)
  local t; t=$(echo "$line" | field tokens_per_s)
  if [ "$rc" -ne 0 ] || [ -z "$t" ]; then
    { echo "$1 failed (exit $rc): ${cmd[*]}"; echo "$out" | tail -20; } >&2
    exit 1
  fi
  local rss; rss=$(echo "$line" | field peak_rss_mib)
  TPS[$1]+=" $t"; RSS[$1]=$(max "$rss" "${RSS[$1]}")
  local extra=""
  if [ "$who" = braid ]; then
    local p a; p=$(echo "$out" | peak_mib parameters); a=$(echo "$out" | peak_mib activations)
    PARAMS[$1]=$(max "${p:-0}" "${PARAMS[$1]}"); ACTS[$1]=$(max "${a:-0}" "${ACTS[$1]}")
    extra="  parameters peak ${p:-?} MiB  activations peak ${a:-?} MiB"
  fi
  printf "round %s %-16s tokens/s %8s  peak RSS rank 0 %7s MiB%s\n" "$r" "$1" "$t" "$rss" "$extra"
}

TORCH=$("$PYTHON" -c 'import torch; print(torch.__version__)')
lscpu | grep -m1 '^Model name'
echo "braid $(git rev-parse --short HEAD 2>/dev/null || echo '?'), PyTorch $TORCH, $ROUNDS rounds of $STEPS steps"
for r in $(seq "$ROUNDS"); do
  n=${#COLS[@]}
  for i in $(seq 0 $((n - 1))); do run_column "${COLS[$(((i + r - 1) % n))]}"; done
done

# Prints one Markdown row: label, then the value of fn for the four columns of layout $3.
row() {
  local label=$1 fn=$2 layout=$3 cells="" c
  for c in braid_${layout}_fp32 braid_${layout}_bf16 pytorch_${layout}_fp32 pytorch_${layout}_bf16; do
    cells+=" | $($fn "$c")"
  done
  echo "| $label$cells |"
}
tps_best() { printf "%.1f" "$(best "${TPS[$1]}")"; }
tps_median() { printf "%.1f" "$(median "${TPS[$1]}")"; }
rss() { printf "%.0f" "${RSS[$1]}"; }
params() { if [[ $1 == braid_* ]]; then printf "%.1f" "${PARAMS[$1]}"; else echo "-"; fi; }
acts() { if [[ $1 == braid_* ]]; then printf "%.1f" "${ACTS[$1]}"; else echo "-"; fi; }
# ratio A B: best(A)/best(B) and, in parentheses, median(A)/median(B).
ratio() {
  awk "BEGIN{printf \"%.2fx (%.2fx)\", $(best "${TPS[$1]}")/$(best "${TPS[$2]}"), \
                                         $(median "${TPS[$1]}")/$(median "${TPS[$2]}")}"
}
ratio_row() { echo "| $1 | $(ratio "${2/L/1}" "${3/L/1}") | $(ratio "${2/L/2}" "${3/L/2}") |"; }

echo
echo "| bench-small, $ROUNDS rounds of $STEPS steps | braid fp32 | braid bf16 | PyTorch $TORCH fp32 | PyTorch bf16 autocast |"
echo "|---|---:|---:|---:|---:|"
row "1 process x $THREADS threads, tokens/s best" tps_best 1
row "1 process x $THREADS threads, tokens/s median" tps_median 1
row "DDP 2 ranks x 1 thread, tokens/s best" tps_best 2
row "DDP 2 ranks x 1 thread, tokens/s median" tps_median 2
row "1 x $THREADS: peak RSS (MiB)" rss 1
row "DDP 2 x 1: peak RSS rank 0 (MiB)" rss 2
row "1 x $THREADS: parameters peak (MiB)" params 1
row "1 x $THREADS: activations peak (MiB)" acts 1
row "DDP 2 x 1: parameters peak rank 0 (MiB)" params 2
row "DDP 2 x 1: activations peak rank 0 (MiB)" acts 2
echo
echo "| tokens/s ratio, best (median) | 1 process x $THREADS threads | DDP 2 ranks x 1 thread |"
echo "|---|---:|---:|"
ratio_row "**braid bf16 / braid fp32** (target >= 1.6x)" braid_L_bf16 braid_L_fp32
ratio_row "braid bf16 / PyTorch bf16 autocast" braid_L_bf16 pytorch_L_bf16
ratio_row "braid bf16 / PyTorch fp32" braid_L_bf16 pytorch_L_fp32
ratio_row "PyTorch bf16 autocast / PyTorch fp32" pytorch_L_bf16 pytorch_L_fp32
