#!/usr/bin/env bash
# DDP speed of two braid binaries on the same machine, alternating runs: 2 ranks x 1 thread, the
# bench-small model (configs/bench-small-ddp.yaml), global batch 8. For checking that a change
# leaves DDP's speed where it was, e.g. against a worktree of an older commit:
#
#   git worktree add /tmp/braid-before <commit>
#   cmake -S /tmp/braid-before -B /tmp/braid-before/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
#     -DBRAID_BUILD_TESTS=OFF && cmake --build /tmp/braid-before/build -j2 --target braid
#   BEFORE=/tmp/braid-before/build/src/braid/cli/braid \
#     bench/ddp_before_after.sh [ROUNDS=3] [STEPS=12]
#
# AFTER defaults to this checkout's build/release binary. Each binary runs under its own launcher.
# Rounds alternate the order (before first in odd rounds, after first in even ones) so a load
# change hits both. The config must be one both binaries read (the bench config uses no key newer
# than either). Prints best and median tokens/s of each and the ratios after / before, and the
# least CPU time (user + system, both ranks, start-up included) of a run: on a machine shared with
# other work that shows whether one binary does more work where tokens/s also shows the load.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
STEPS=${2:-12}
BEFORE=${BEFORE:?set BEFORE=<path to the old braid binary>}
AFTER=${AFTER:-build/release/src/braid/cli/braid}
CONFIG=${CONFIG:-configs/bench-small-ddp.yaml}
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

declare -A tps=([before]="" [after]="") exposed=([before]="" [after]="")
declare -A rss=([before]="" [after]="") cpu=([before]="" [after]="")
for r in $(seq "$ROUNDS"); do
  order=(before after)
  [ $((r % 2)) = 0 ] && order=(after before)
  for which in "${order[@]}"; do
    bin=$BEFORE
    [ "$which" = after ] && bin=$AFTER
    if ! timed "$bin" launch -n 2 --threads 1 -- "$bin" train "$CONFIG" \
         --set training.max_steps="$STEPS"; then
      echo "round $r $which FAILED:"; tail -5 "$out_file"; continue
    fi
    c=$(awk '{ printf "%.1f", $1 + $2 }' "$cpu_file")
    s=$(grep 'summary:' "$out_file" || true)
    t=$(echo "$s" | field tokens_per_s); e=$(echo "$s" | field exposed_comm_ms)
    m=$(echo "$s" | field peak_rss_mib)
    printf "round %s %-6s tokens/s %7s  step %7s ms  CPU %5s s  exposed comm %6s ms/step  %s\n" \
      "$r" "$which" "${t:--}" "$(echo "$s" | field step_ms)" "$c" "${e:--}" \
      "peak RSS rank 0 ${m:--} MiB"
    [ -n "$t" ] || continue
    tps[$which]+=" $t" exposed[$which]+=" $e" rss[$which]+=" $m" cpu[$which]+=" $c"
  done
done

echo
row() { printf '%-34s %10s %10s %10s\n' "$@"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }'; }
bb=$(echo "${tps[before]}" | best) ba=$(echo "${tps[after]}" | best)
mb=$(echo "${tps[before]}" | median) ma=$(echo "${tps[after]}" | median)
row "DDP 2 ranks x 1 thread, $ROUNDS rounds" "before" "after" "after/before"
row "tokens/s best" "${bb:-0}" "${ba:-0}" "$(ratio "${ba:-0}" "${bb:-0}")"
row "tokens/s median" "$mb" "$ma" "$(ratio "$ma" "$mb")"
cb=$(echo "${cpu[before]}" | least) ca=$(echo "${cpu[after]}" | least)
row "CPU s per run, least" "${cb:-0}" "${ca:-0}" "$(ratio "${ca:-0}" "${cb:-0}")"
row "exposed comm ms/step, median" "$(echo "${exposed[before]}" | median)" \
  "$(echo "${exposed[after]}" | median)" ""
row "peak RSS rank 0 MiB, median" "$(echo "${rss[before]}" | median)" \
  "$(echo "${rss[after]}" | median)" ""
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)  ($(date '+%H:%M:%S'))"
echo
echo "commands (alternating):"
echo "  $BEFORE launch -n 2 --threads 1 -- $BEFORE train $CONFIG --set training.max_steps=$STEPS"
echo "  $AFTER launch -n 2 --threads 1 -- $AFTER train $CONFIG --set training.max_steps=$STEPS"
