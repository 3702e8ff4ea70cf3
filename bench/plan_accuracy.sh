#!/usr/bin/env bash
# The planner against measurement (issue 31): for two model shapes on 2 and 4 ranks, every
# layout below is trained for STEPS steps and its median step time (the summary's step_ms,
# after the warm-up) printed beside the time `braid plan --explain` predicts from this machine's
# profile (calibrated first, into OUT/profile.json, unless it is there), with the error; then the planner's first
# choice for each shape and world size against the fastest measured layout.
#
#   bench/plan_accuracy.sh [STEPS=8] [OUT=out/plan-bench] [SHAPES="gpt2 llama"] [WORLDS="2 4"]
#                          [ROUNDS=2]
#
# Shapes: gpt2 = configs/bench-small.yaml (6 layers, d 384, vocabulary 8192, sequence 256);
# llama = configs/bench-plan-llama.yaml (8 layers, d 512, GQA 8/4, SwiGLU, vocabulary 8192,
# sequence 256). Global batch 8. 4 ranks on a 2-core machine are oversubscribed (each rank gets
# half a core), as braid launch runs them. ONLY=REGEX keeps the layouts it matches. Each layout
# is measured ROUNDS times, a round of every layout after another, and keeps its best: the
# machine's speed drifts over minutes (a shared host), and a slow stretch only slows.
#
# HOSTS=H (root; Note [Network calibration]): every world size's ranks on H test hosts in
# network namespaces (scripts/netns), MPI over TCP between them. The hosts share this machine's
# cores, so the plans use a profile of one host as that: the node profile's rates for all the
# world's ranks working at once, its cores split among the hosts, and the links between the
# hosts measured by `braid plan --calibrate-network` across them (OUT/profile-hostsH-W.json).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-8}
OUT=${2:-out/plan-bench}
SHAPES=${3:-gpt2 llama}
WORLDS=${4:-2 4}
ROUNDS=${5:-2}
BRAID=${BRAID:-build/release/src/braid/cli/braid}
[ -x "$BRAID" ] || { echo "build braid first (make build)" >&2; exit 1; }
mkdir -p "$OUT/logs"
PROFILE="$OUT/profile.json"
export BRAID_MACHINE_PROFILE="$PROFILE"  # the runs' --profile predictions and MFU peak

lscpu | sed -n 's/^Model name: *\(.*\)/CPU: \1/p'
lscpu | sed -n 's/^CPU family: *\(.*\)/family: \1/p'
lscpu | sed -n 's/^CPU(s): *\(.*\)/cores: \1/p'
echo "date: $(date '+%Y-%m-%d %H:%M:%S %Z')  braid $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
[ -f "$PROFILE" ] || "$BRAID" plan --calibrate --profile "$PROFILE" --disk-dir "$OUT" \
  > "$OUT/calibrate.txt" 2>&1
echo "calibrated: $PROFILE"
echo

HOSTS=${HOSTS:-1}
HOSTFILE=""
if [ "$HOSTS" -gt 1 ]; then
  why=$(scripts/netns/hosts.sh check) || { echo "HOSTS=$HOSTS: $why" >&2; exit 1; }
  trap 'scripts/netns/hosts.sh down' EXIT
fi
NODE_PROFILE=$PROFILE

# on_hosts WORLD: brings up the test hosts for WORLD ranks and writes their profile (HOSTS > 1).
on_hosts() {
  [ "$HOSTS" -gt 1 ] || return 0
  local world=$1
  scripts/netns/hosts.sh down
  HOSTFILE=$(scripts/netns/hosts.sh up "$HOSTS" $((world / HOSTS)))
  PROFILE="$OUT/profile-hosts$HOSTS-$world.json"
  export BRAID_MACHINE_PROFILE="$PROFILE"
  python3 - "$NODE_PROFILE" "$PROFILE" "$world" "$HOSTS" <<'PY'
import json, sys
src, dst, world, hosts = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
p = json.load(open(src))
rates = [c for c in p["compute"] if c["ranks"] == world]
if not rates:
    sys.exit(f"{src} has no rates for {world} ranks at once: calibrate with --ranks {world}")
rates[0]["ranks"] = world // hosts
p["compute"] = rates
p["cores"] = max(1, p["cores"] // hosts)
p["node_memory"] //= hosts
p["name"] = f"one of {hosts} network-namespace hosts sharing this machine"
p.pop("network", None)
json.dump(p, open(dst, "w"), indent=1)
PY
  "$BRAID" launch -n "$world" --hostfile "$HOSTFILE" --launch-agent "$PWD/scripts/netns/rsh" \
    --network 10.77.0.0/24 -- "$BRAID" plan --calibrate-network --profile "$PROFILE" \
    > "$OUT/calibrate-network-$world.txt" 2>&1 || { cat "$OUT/calibrate-network-$world.txt"; exit 1; }
  echo "$HOSTS hosts x $((world / HOSTS)) ranks, profile $PROFILE"
}

# launch_world WORLD ARGS...: braid launch on this machine, or across the test hosts.
launch_world() {
  local world=$1
  shift
  if [ -n "$HOSTFILE" ]; then
    # The test hosts share this machine's cores: each rank gets its share of them, as the
    # profile says (each host would give its ranks all of its cores).
    "$BRAID" launch -n "$world" --hostfile "$HOSTFILE" --launch-agent "$PWD/scripts/netns/rsh" \
      --network 10.77.0.0/24 --threads $(($(nproc) / world > 0 ? $(nproc) / world : 1)) "$@"
  else
    "$BRAID" launch -n "$world" "$@"
  fi
}

config_of() { [ "$1" = gpt2 ] && echo configs/bench-small.yaml || echo configs/bench-plan-llama.yaml; }

# BUDGET=SIZE (e.g. 0.5GiB): every plan and run with that memory budget per rank (memory.budget);
# the layouts are the planner's first four within it and the fastest DDP layout without it (which
# should not fit: its run fails for memory, shown as such).
BUDGET=${BUDGET:-}
plan() { "$BRAID" plan --profile "$PROFILE" --hosts "$HOSTS" ${BUDGET:+--budget "$BUDGET"} "$@"; }

# The layouts per shape and world size (global batch 8): every data-parallel strategy,
# checkpointing, bf16, tp with and without sp, pp under each schedule, offload, cp by ring and
# by Ulysses, and on 4 ranks the 2-D mixes. Interleaving needs the layers to split into pp x 2 chunks (the llama shape's
# 8; not the gpt2 shape's 6).
layouts() {
  local shape=$1 world=$2
  if [ -n "$BUDGET" ]; then
    # (awk reads all its input: no SIGPIPE under pipefail)
    plan --config "$(config_of "$shape")" --world-size "$world" --format tsv | awk -F'\t' 'NR <= 4 { print $1 }'
    "$BRAID" plan --profile "$PROFILE" --hosts "$HOSTS" --config "$(config_of "$shape")" \
      --world-size "$world" --format tsv --top 100000 | awk -F'\t' '!d && /^ddp / { print $1; d = 1 }'
  elif [ "$world" = 2 ] && [ "$shape" = gpt2 ]; then
    printf '%s\n' "ddp mb4x1" "zero1 mb4x1" "zero2 mb4x1" "zero3 mb4x1" "zero3 mb2x2 ckpt:full" \
      "ddp mb4x1 bf16" "none tp2 mb8x1" "none tp2+sp mb8x1" "none pp2:gpipe mb1x8" \
      "none pp2:1f1b mb1x8" "none pp2:zb_h1 mb1x8" "none pp2:zb_v/2 balanced mb1x8" \
      "zero1 mb4x1 offload" "none cp2:ring mb8x1" "none cp2:ulysses mb8x1"
  elif [ "$world" = 2 ]; then
    printf '%s\n' "ddp mb4x1" "zero3 mb4x1" "ddp mb4x1 ckpt:selective" "none tp2 mb8x1" \
      "none pp2:1f1b mb1x8" "none pp2:interleaved_1f1b/2 mb1x8" "none pp2:zb_v/2 mb1x8" \
      "ddp mb4x1 bf16" "none cp2:ring mb8x1" "none cp2:ulysses mb8x1"
  elif [ "$shape" = gpt2 ]; then
    printf '%s\n' "ddp mb2x1" "zero3 mb2x1" "zero1 tp2 mb4x1" "zero1 pp2:1f1b mb1x4" \
      "none tp2 pp2:1f1b mb1x8" "zero1 cp2:ring mb4x1" "hsdp:2 mb2x1" \
      "none pp4:zb_h1 balanced mb2x4"
  else
    printf '%s\n' "ddp mb2x1" "zero1 tp2 mb4x1" "hsdp:2 mb2x1" "none pp4:zb_h1 mb2x4"
  fi
  return 0
}

field() {  # the first KEY=NUMBER's number (awk reads all its input: no SIGPIPE under pipefail)
  awk -v k="$1=" '!done && i = index($0, k) { s = substr($0, i + length(k)); sub(/[^0-9.].*/, "", s); print s; done = 1 }'
}

log_of() { echo "$OUT/logs/$(basename "$1" .yaml)-$2-$(echo "$3" | tr ' :/+' '____').txt"; }

measure() {  # config world layout -> measured step ms (the run's log, with its profile of parts
  # beside the prediction, in OUT/logs)
  local cfg=$1 world=$2 layout=$3 sets=()
  local line log
  log=$(log_of "$cfg" "$world" "$layout")
  line=$(plan --config "$cfg" --world-size "$world" --explain "$layout" --format tsv)
  for kv in $(echo "$line" | cut -f7); do sets+=(--set "$kv"); done
  echo "$layout ($cfg, $world ranks)" > "$log"
  launch_world "$world" -- "$BRAID" train "$cfg" "${sets[@]}" \
    --set training.max_steps="$STEPS" --set output.dir="$OUT/run" --set output.profile=true \
    ${BUDGET:+--set memory.budget="$BUDGET"} \
    --set parallel.offload_dir="$OUT/offload" < /dev/null >> "$log" 2>&1 || true
  { grep 'summary:' "$log" || true; } | field step_ms  # nothing where the run failed
}

for shape in $SHAPES; do
  cfg=$(config_of "$shape")
  for world in $WORLDS; do
    on_hosts "$world"
    echo "### $shape on $world ranks ($cfg)"
    echo
    echo '| layout | predicted ms | measured ms | error |'
    echo '|---|---|---|---|'
    best_layout="" best_ms=1e30
    declare -A measured=() predicted=()
    mapfile -t list < <(layouts "$shape" "$world" | grep -E -- "${ONLY:-.}")
    # The planner's first choice is measured in the same rounds.
    first=$(plan --config "$cfg" --world-size "$world" --format tsv | awk 'NR == 1')
    choice=$(echo "$first" | cut -f1)
    printf '%s\n' "${list[@]}" | grep -qxF -- "$choice" || list+=("$choice")
    for _ in $(seq "$ROUNDS"); do
      for layout in "${list[@]}"; do
        ms=$(measure "$cfg" "$world" "$layout")
        [ -z "$ms" ] && continue
        if [ -z "${measured[$layout]+x}" ] ||
          awk -v a="$ms" -v b="${measured[$layout]}" 'BEGIN { exit !(a < b) }'; then
          measured["$layout"]=$ms
        fi
      done
    done
    for layout in "${list[@]}"; do
      pred=$(plan --config "$cfg" --world-size "$world" --explain "$layout" --format tsv | cut -f2)
      ms=${measured[$layout]:-nan}
      if [ "$ms" = nan ]; then  # the run failed (BUDGET: out of memory): its error instead
        why=$(grep -m1 -o 'error: .*' "$(log_of "$cfg" "$world" "$layout")" | cut -c1-160 || true)
        printf '| %s | %.1f | failed: %s | |\n' "$layout" "$pred" "${why:-no summary}"
        continue
      fi
      err=$(awk -v p="$pred" -v m="$ms" 'BEGIN { printf "%+.1f%%", 100 * (p / m - 1) }')
      mark=""
      [ "$layout" = "$choice" ] && mark=" (first choice)"
      printf '| %s%s | %.1f | %.1f | %s |\n' "$layout" "$mark" "$pred" "$ms" "$err"
      # The first choice is of the config's precision (fp32): the fastest of those counts.
      case "$layout" in *bf16*) continue ;; esac
      if awk -v a="$ms" -v b="$best_ms" 'BEGIN { exit !(a < b) }'; then
        best_ms=$ms best_layout=$layout
      fi
    done
    echo
    awk -v c="${measured[$choice]}" -v b="$best_ms" -v cl="$choice" -v bl="$best_layout" \
      'BEGIN { printf "first choice: %s, measured %.1f ms; fastest measured: %s, %.1f ms (choice %+.1f%%)\n\n", cl, c, bl, b, 100 * (c / b - 1) }'
    unset measured predicted
  done
done
