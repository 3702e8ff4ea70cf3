#!/usr/bin/env bash
# Speed and memory of two braid binaries on the same machine, layout by layout, alternating runs:
# 2 ranks x 1 thread each. For checking that a change leaves every layout's speed and memory where
# it was, e.g. against a worktree of an older commit:
#
#   git worktree add /tmp/braid-before <commit>
#   cmake -S /tmp/braid-before -B /tmp/braid-before/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
#     -DBRAID_BUILD_TESTS=OFF && cmake --build /tmp/braid-before/build -j2 --target braid
#   BEFORE=/tmp/braid-before/build/src/braid/cli/braid bench/before_after.sh [ROUNDS=3] [STEPS=12]
#   LAYOUTS="ddp zero3" BEFORE=... bench/before_after.sh      # some of the layouts
#
# The layouts (the data-parallel ones on the bench-small model, configs/bench-small-ddp.yaml:
# GPT-2 style, 6 layers, d_model 384, vocab 8192, seq 256, global batch 8; the pipeline ones on
# configs/bench-pipeline.yaml: 8 layers, seq 128, 8 micro-batches of 2):
#   ddp zero1 zero2 zero3 fsdp_grad_op    data parallelism over 2 ranks
#   tp2 tp2_sp                            tensor parallelism (and sequence parallelism)
#   pp2_1f1b pp2_gpipe                    pipeline parallelism over 2 stages
# AFTER defaults to this checkout's build/release binary. Each binary runs under its own launcher.
# Rounds alternate the order (before first in odd rounds, after first in even ones) so a load
# change hits both. The configs must be ones both binaries read (they use no key newer than
# either). Prints, per layout, best and median tokens/s of each and the ratios after / before, the
# least CPU time (user + system, both ranks, start-up included) of a run, and rank 0's peak tracked
# memory (every category, braid's memory tracker) and peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
STEPS=${2:-12}
BEFORE=${BEFORE:?set BEFORE=<path to the old braid binary>}
AFTER=${AFTER:-build/release/src/braid/cli/braid}
LAYOUTS=${LAYOUTS:-ddp zero1 zero2 zero3 fsdp_grad_op tp2 tp2_sp pp2_1f1b pp2_gpipe}
SMALL=configs/bench-small-ddp.yaml PIPE=configs/bench-pipeline.yaml
declare -A layout_args=(
  [ddp]="$SMALL --set parallel.strategy=ddp"
  [zero1]="$SMALL --set parallel.strategy=zero1"
  [zero2]="$SMALL --set parallel.strategy=zero2"
  [zero3]="$SMALL --set parallel.strategy=zero3"
  [fsdp_grad_op]="$SMALL --set parallel.strategy=fsdp --set parallel.sharding_strategy=SHARD_GRAD_OP"
  [tp2]="$SMALL --set parallel.strategy=none --set parallel.tensor_parallel_size=2"
  [tp2_sp]="$SMALL --set parallel.strategy=none --set parallel.tensor_parallel_size=2 --set parallel.sequence_parallel=true"
  [pp2_1f1b]="$PIPE --set parallel.pipeline_schedule=1f1b"
  [pp2_gpipe]="$PIPE --set parallel.pipeline_schedule=gpipe"
)
for b in "$BEFORE" "$AFTER"; do [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 1; }; done

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | head -1; }
median() {
  tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]
    else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
best() { tr ' ' '\n' | sed '/^$/d' | sort -g | tail -1; }
least() { tr ' ' '\n' | sed '/^$/d' | sort -g | head -1; }
out_file=$(mktemp) cpu_file=$(mktemp)
trap 'rm -f "$out_file" "$cpu_file"' EXIT
timed() {  # command... -> its output in $out_file, its user + system seconds in $cpu_file
  local TIMEFORMAT='%U %S'
  { time "$@" >"$out_file" 2>&1; } 2>"$cpu_file"
}

lscpu | sed -n 's/^Model name: *\(.*\)/CPU: \1/p'
lscpu | sed -n 's/^CPU(s): *\(.*\)/cores: \1/p'
echo "date: $(date '+%Y-%m-%d %H:%M:%S %Z')  load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "before: $BEFORE ($(date -r "$BEFORE" '+%Y-%m-%d %H:%M'))"
echo "after:  $AFTER ($(date -r "$AFTER" '+%Y-%m-%d %H:%M'))"
echo

row() { printf '%-34s %10s %10s %10s\n' "$@"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }'; }
summary_rows=()
for layout in $LAYOUTS; do
  args=${layout_args[$layout]:-}
  [ -n "$args" ] || { echo "unknown layout '$layout' (${!layout_args[*]})" >&2; exit 1; }
  declare -A tps=([before]="" [after]="") exposed=([before]="" [after]="")
  declare -A rss=([before]="" [after]="") cpu=([before]="" [after]="") tracked=([before]="" [after]="")
  for r in $(seq "$ROUNDS"); do
    order=(before after)
    [ $((r % 2)) = 0 ] && order=(after before)
    for which in "${order[@]}"; do
      bin=$BEFORE
      [ "$which" = after ] && bin=$AFTER
      # shellcheck disable=SC2086
      if ! timed "$bin" launch -n 2 --threads 1 -- "$bin" train $args \
           --set training.max_steps="$STEPS" --set output.dir="out/before-after-$which"; then
        echo "$layout round $r $which FAILED:"; tail -5 "$out_file"; continue
      fi
      c=$(awk '{ printf "%.1f", $1 + $2 }' "$cpu_file")
      s=$(grep 'summary:' "$out_file" || true)
      t=$(echo "$s" | field tokens_per_s); e=$(echo "$s" | field exposed_comm_ms)
      m=$(echo "$s" | field peak_rss_mib); p=$(echo "$s" | field peak_tracked_mib)
      printf "%-13s round %s %-6s tokens/s %7s  CPU %5s s  exposed comm %6s ms/step  tracked %7s MiB\n" \
        "$layout" "$r" "$which" "${t:--}" "$c" "${e:--}" "${p:--}"
      [ -n "$t" ] || continue
      tps[$which]+=" $t" exposed[$which]+=" $e" rss[$which]+=" $m" cpu[$which]+=" $c"
      tracked[$which]+=" $p"
    done
  done
  echo
  bb=$(echo "${tps[before]}" | best) ba=$(echo "${tps[after]}" | best)
  mb=$(echo "${tps[before]}" | median) ma=$(echo "${tps[after]}" | median)
  cb=$(echo "${cpu[before]}" | least) ca=$(echo "${cpu[after]}" | least)
  pb=$(echo "${tracked[before]}" | median) pa=$(echo "${tracked[after]}" | median)
  row "$layout, 2 ranks x 1 thread, $ROUNDS rounds" "before" "after" "after/before"
  row "tokens/s best" "${bb:-0}" "${ba:-0}" "$(ratio "${ba:-0}" "${bb:-0}")"
  row "tokens/s median" "$mb" "$ma" "$(ratio "$ma" "$mb")"
  row "CPU s per run, least" "${cb:-0}" "${ca:-0}" "$(ratio "${ca:-0}" "${cb:-0}")"
  row "exposed comm ms/step, median" "$(echo "${exposed[before]}" | median)" \
    "$(echo "${exposed[after]}" | median)" ""
  row "peak tracked MiB rank 0, median" "$pb" "$pa" "$(ratio "$pa" "$pb")"
  row "peak RSS MiB rank 0, median" "$(echo "${rss[before]}" | median)" \
    "$(echo "${rss[after]}" | median)" ""
  echo
  summary_rows+=("$(printf '| %s | %s | %s | %s | %s | %s | %s |' "$layout" "${bb:-0}" "${ba:-0}" \
    "$(ratio "${ba:-0}" "${bb:-0}")" "$pb" "$pa" "$(ratio "$pa" "$pb")")")
  unset tps exposed rss cpu tracked
done
echo "| layout | tokens/s before | after | after/before | peak tracked MiB before | after | after/before |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${summary_rows[@]}"
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)  ($(date '+%H:%M:%S'))"
echo "commands (alternating, per layout): BIN launch -n 2 --threads 1 -- BIN train CONFIG ARGS"
echo "  --set training.max_steps=$STEPS (CONFIG and ARGS: the layout table in $0)"
