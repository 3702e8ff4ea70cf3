#!/usr/bin/env bash
# Sharded data parallel against DDP, side by side from one run: braid ddp, zero1, zero2, zero3
# (FULL_SHARD) and fsdp SHARD_GRAD_OP, and PyTorch DDP (gloo) with and without
# torch.distributed.optim.ZeroRedundancyOptimizer (ZeRO-1). 2 ranks x 1 thread, the bench-small
# model (configs/bench-small-ddp.yaml: GPT-2 style, 6 layers, d_model 384, vocab 8192, seq 256),
# global batch 8 (4 per rank), AdamW, fp32, random tokens.
#
#   bench/zero_vs_ddp.sh [ROUNDS=3] [STEPS=12]
#   FSDP=0 bench/zero_vs_ddp.sh        # without the fsdp SHARD_GRAD_OP column
#
# Every round runs every column once, each round starting one column later, so load changes on
# the shared machine hit every column. A column's numbers come from its best round (tokens/s);
# the median over the rounds is shown beside it. "exposed comm" is braid's exposed_comm_ms, the
# median over steps on rank 0 of the time spent waiting for communication; the tracked peaks are
# rank 0's per-category peaks from braid's memory breakdown. PyTorch runs with
# OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE, its OpenBLAS at the default core type and at
# OPENBLAS_CORETYPE=SkylakeX, and its better run counts. "CPU s" is user + system time of the
# whole run (both ranks, start-up included), the least over the rounds: on a machine shared with
# other work it shows whether a column does more work, where tokens/s also shows the load.
#
# Targets (printed as PASS/MISS; never an exit status): zero1 and zero2 >= 0.95x braid DDP
# tokens/s, zero3 >= 0.85x.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
STEPS=${2:-12}
BRAID=${BRAID:-build/release/src/braid/cli/braid}
CONFIG=configs/bench-small-ddp.yaml
PYTHON=/usr/bin/python3  # Debian's python3-torch 1.13
FSDP=${FSDP:-1}
[ -x "$BRAID" ] || { echo "build braid first (make build)" >&2; exit 1; }

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | head -1; }
# Rank 0's peak of one category of the memory breakdown ("gradients 26.5 MiB (peak 26.5 MiB)"),
# in MiB.
peak_mib() {
  awk -v c="$1" '{
    sub(/^\[rank [0-9]+\] /, "")
    if (index($0, c " ") == 1 && match($0, /\(peak [0-9.]+ [KMGi]*B\)/)) {
      split(substr($0, RSTART + 6, RLENGTH - 7), a, " ")
      f = a[2] == "GiB" ? 1024 : a[2] == "MiB" ? 1 : a[2] == "KiB" ? 1 / 1024 : 1 / 1048576
      printf "%.1f\n", a[1] * f; exit
    }
  }'
}
median() {
  tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]
    else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 > b + 0) }'; }
out_file=$(mktemp) cpu_file=$(mktemp)
trap 'rm -f "$out_file" "$cpu_file"' EXIT
timed() {  # command... -> its output in $out_file, its user + system seconds in $cpu_file
  local TIMEFORMAT='%U %S'
  { time "$@" >"$out_file" 2>&1; } 2>"$cpu_file"
}
cpu_s() { awk '{ printf "%.1f", $1 + $2 }' "$cpu_file"; }

# Columns; a PyTorch column runs once per OpenBLAS core type each round.
cols=(ddp zero1 zero2 zero3)
[ "$FSDP" = 1 ] && cols+=(fsdp_sgo)
cols+=(pt_ddp pt_zero1)
declare -A label=(
  [ddp]="braid ddp" [zero1]="braid zero1" [zero2]="braid zero2"
  [zero3]="braid zero3 (FULL_SHARD)" [fsdp_sgo]="braid fsdp SHARD_GRAD_OP"
  [pt_ddp]="PyTorch DDP gloo" [pt_zero1]="PyTorch DDP + ZeRO-1"
)
declare -A braid_args=(
  [ddp]="--set parallel.strategy=ddp" [zero1]="--set parallel.strategy=zero1"
  [zero2]="--set parallel.strategy=zero2" [zero3]="--set parallel.strategy=zero3"
  [fsdp_sgo]="--set parallel.strategy=fsdp --set parallel.sharding_strategy=SHARD_GRAD_OP"
)
declare -A pt_args=([pt_ddp]="--ddp" [pt_zero1]="--zero1")
declare -A target=([zero1]=0.95 [zero2]=0.95 [zero3]=0.85)
declare -A best all cpu rss exposed params grads opt_state note
for c in "${cols[@]}"; do
  best[$c]=0 all[$c]="" cpu[$c]=- rss[$c]=- exposed[$c]=- params[$c]=- grads[$c]=- opt_state[$c]=-
  note[$c]=""
done

lscpu | sed -n 's/^Model name: *\(.*\)/CPU: \1/p'
lscpu | sed -n 's/^CPU(s): *\(.*\)/cores: \1/p'
echo "date: $(date '+%Y-%m-%d %H:%M:%S %Z')  load average: $(cut -d' ' -f1-3 /proc/loadavg)"
head=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
git diff --quiet HEAD -- src 2>/dev/null || head+=" + uncommitted changes in src/"
echo "braid $head, binary $BRAID ($(date -r "$BRAID" '+%Y-%m-%d %H:%M'))"
echo

run_braid() {  # column -> full output of rank 0 (and the launcher)
  # shellcheck disable=SC2086  # braid_args holds several words on purpose
  "$BRAID" launch -n 2 --threads 1 -- "$BRAID" train "$CONFIG" \
    --set training.max_steps="$STEPS" ${braid_args[$1]} 2>&1
}
run_pytorch() {  # column, core type -> the script's output
  local env_ct=()
  [ "$2" = SkylakeX ] && env_ct=(OPENBLAS_CORETYPE=SkylakeX)
  # shellcheck disable=SC2086
  env "${env_ct[@]}" OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE "$PYTHON" bench/pytorch_train.py \
    ${pt_args[$1]} --world 2 --threads 1 --steps "$STEPS" 2>&1
}

n=${#cols[@]}
for r in $(seq "$ROUNDS"); do
  for i in $(seq 0 $((n - 1))); do
    c=${cols[$(((i + r - 1) % n))]}
    if [[ $c == pt_* ]]; then
      for ct in default SkylakeX; do
        if ! timed run_pytorch "$c" "$ct"; then
          echo "round $r ${label[$c]} ($ct) FAILED:"; tail -5 "$out_file"; continue
        fi
        out=$(grep '^pytorch' "$out_file" || true)
        t=$(echo "$out" | field tokens_per_s); m=$(echo "$out" | field peak_rss_mib)
        printf "round %s %-26s tokens/s %7s  CPU %5s s  peak RSS rank 0 %6s MiB (%s)\n" \
          "$r" "${label[$c]}" "${t:--}" "$(cpu_s)" "${m:--}" "OPENBLAS_CORETYPE $ct"
        [ -n "$t" ] || continue
        all[$c]+=" $t"
        if [ "${cpu[$c]}" = - ] || gt "${cpu[$c]}" "$(cpu_s)"; then cpu[$c]=$(cpu_s); fi
        if gt "$t" "${best[$c]}"; then best[$c]=$t rss[$c]=$m note[$c]=$ct; fi
      done
    else
      if ! timed run_braid "$c"; then
        echo "round $r ${label[$c]} FAILED:"; tail -5 "$out_file"; continue
      fi
      out=$(cat "$out_file")
      s=$(echo "$out" | grep 'summary:' || true)
      t=$(echo "$s" | field tokens_per_s); m=$(echo "$s" | field peak_rss_mib)
      e=$(echo "$s" | field exposed_comm_ms)
      printf "round %s %-26s tokens/s %7s  CPU %5s s  peak RSS rank 0 %6s MiB  %s %6s ms/step\n" \
        "$r" "${label[$c]}" "${t:--}" "$(cpu_s)" "${m:--}" "exposed comm" "${e:--}"
      [ -n "$t" ] || continue
      all[$c]+=" $t"
      if [ "${cpu[$c]}" = - ] || gt "${cpu[$c]}" "$(cpu_s)"; then cpu[$c]=$(cpu_s); fi
      if gt "$t" "${best[$c]}"; then
        best[$c]=$t rss[$c]=$m exposed[$c]=$e
        params[$c]=$(echo "$out" | peak_mib parameters)
        grads[$c]=$(echo "$out" | peak_mib gradients)
        opt_state[$c]=$(echo "$out" | peak_mib "optimizer state")
      fi
    fi
  done
done

echo
ddp=${best[ddp]}
row() { printf '%-30s %9s %9s %7s %7s %9s %9s %9s %9s %9s  %s\n' "$@"; }
row "2 ranks x 1 thread" "tokens/s" "median" "x DDP" "CPU s" "exposed" "peak RSS" \
  "params" "grads" "opt state" "target (x braid DDP)"
row "best of $ROUNDS, $STEPS steps" "best" "" "" "least" "ms/step" "MiB" "peak MiB" "peak MiB" \
  "peak MiB" ""
for c in "${cols[@]}"; do
  name=${label[$c]}
  [ -n "${note[$c]}" ] && name+=" (${note[$c]})"
  ratio=-
  gt "${best[$c]}" 0 && gt "$ddp" 0 &&
    ratio=$(awk -v a="${best[$c]}" -v b="$ddp" 'BEGIN { printf "%.3f", a / b }')
  verdict=""
  if [ -n "${target[$c]:-}" ]; then
    verdict=">= ${target[$c]}x MISS"
    [ "$ratio" != - ] && ! gt "${target[$c]}" "$ratio" && verdict=">= ${target[$c]}x PASS"
  fi
  row "$name" "${best[$c]}" "$(echo "${all[$c]}" | median)" "$ratio" "${cpu[$c]}" "${exposed[$c]}" \
    "${rss[$c]}" "${params[$c]:--}" "${grads[$c]:--}" "${opt_state[$c]:--}" "$verdict"
done
echo
if gt "${best[pt_ddp]}" 0 && gt "${best[pt_zero1]}" 0; then
  awk -v a="${best[pt_zero1]}" -v b="${best[pt_ddp]}" \
    'BEGIN { printf "PyTorch ZeRO-1 / PyTorch DDP: %.3fx\n", a / b }'
fi
if gt "$ddp" 0 && gt "${best[pt_ddp]}" 0; then
  awk -v a="$ddp" -v b="${best[pt_ddp]}" \
    'BEGIN { printf "braid DDP / PyTorch DDP:      %.2fx\n", a / b }'
fi
if gt "${best[zero1]}" 0 && gt "${best[pt_zero1]}" 0; then
  awk -v a="${best[zero1]}" -v b="${best[pt_zero1]}" \
    'BEGIN { printf "braid zero1 / PyTorch ZeRO-1: %.2fx\n", a / b }'
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)  ($(date '+%H:%M:%S'))"
echo
echo "commands (each round, every column once, rotated):"
for c in "${cols[@]}"; do
  if [[ $c == pt_* ]]; then
    echo "  [OPENBLAS_CORETYPE=SkylakeX] OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE $PYTHON" \
      "bench/pytorch_train.py ${pt_args[$c]} --world 2 --threads 1 --steps $STEPS"
  else
    echo "  $BRAID launch -n 2 --threads 1 -- $BRAID train $CONFIG" \
      "--set training.max_steps=$STEPS ${braid_args[$c]}"
  fi
done
