#!/usr/bin/env bash
# Offload to disk against the disk (issue 29 goal 4): a ZeRO-3 step with the optimizer state, the
# reduced gradients and the parameter shards in a file per rank (configs/bench-offload.yaml:
# GPT-2 large, 2 ranks, sequence 32, so the disk sets the step's time), beside the disk moving
# the same bytes. For each precision it prints, per rank: the bytes a step read and wrote (the
# median of the steps after the first) as a multiple of the file (which holds the state once:
# f32 masters, two AdamW moments and the gradient shard, 16 bytes a parameter of the shard, the
# least a step can move each way), the step time, and the time the disk takes for the same
# bytes: offload_bench on 2 processes at once, as the ranks, each moving its rank's bytes with
# O_DIRECT, written then read ("serial") and both at once ("overlap"), each in 8 MiB transfers one
# at a time and in 64 MiB transfers two at a time (DISK_CONFIGS), just before and just after the
# training run (this VM's disk changes speed from minute to minute); the disk's time is the best
# of all those, so step / disk errs against braid. A precision written `fp32-keepK` is fp32 with
# the last K blocks kept gathered from their forward to their backward
# (parallel.keep_gathered_units, FSDP2's reshard_after_forward=False), which backward then does
# not read back from the file (fp32 gathers from the f32 shards in the file; bf16 from a copy in
# memory).
#
#   bench/offload.sh [OUT=out/offload-bench] [STEPS=4] [PRECISIONS="bf16 fp32 fp32-keep6"]
#
# Needs about 13 GB of free disk under OUT (the two ranks' files, then the disk test's).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/offload-bench}
STEPS=${2:-4}
PRECISIONS=${3:-bf16 fp32 fp32-keep6}
DISK_CONFIGS=${DISK_CONFIGS:-8x1 64x2}  # chunk MiB x transfers at a time
BRAID=${BRAID:-build/release/src/braid/cli/braid}
DISK=${DISK:-build/release/bench/offload_bench}
for b in "$BRAID" "$DISK"; do
  [ -x "$b" ] || { echo "build $b first (cmake --preset release -DBRAID_BUILD_BENCH=ON)" >&2; exit 1; }
done
mkdir -p "$OUT/logs"

lscpu | sed -n 's/^Model name: *\(.*\)/CPU: \1/p'
lscpu | sed -n 's/^CPU family: *\(.*\)/family: \1/p;s/^Model: *\(.*\)/model: \1/p'
echo "date: $(date '+%Y-%m-%d %H:%M:%S %Z')  braid $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "disk: $(df -h "$OUT" | awk 'NR == 2 { print $1 " (" $2 ")" }'), offload files in $OUT/offload"
echo "GPT-2 large, zero3, offload_optimizer + offload_params nvme, 2 ranks, sequence 32, $STEPS steps"
echo
echo '| precision | step s | read GB a rank (x file) | written GB a rank (x file) | I/O busy s | disk: serial s | overlap s | step / disk |'
echo '|---|---|---|---|---|---|---|---|'
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# The disk moving rb bytes in and wb out per rank, from 2 processes at once, each config in
# DISK_CONFIGS; appends "serial overlap" seconds (the slower process's) to $OUT/logs/disk-$1.txt.
disk() {
  mkdir -p "$OUT/offload"
  for cfg in $DISK_CONFIGS; do
    for r in 0 1; do
      "$DISK" --file "$OUT/offload/disk$r.bin" --read-bytes "$rb" --write-bytes "$wb" \
        --chunk-mib "${cfg%x*}" --threads "${cfg#*x}" --rounds 2 > "$OUT/logs/disk-rank$r.txt" &
    done
    wait
    cat "$OUT/logs/disk-rank"[01].txt | awk '{ w = $2 > w ? $2 : w; r = $4 > r ? $4 : r;
      o = $6 > o ? $6 : o } END { print w + r, o }' >> "$OUT/logs/disk-$1.txt"
  done
}
for p in $PRECISIONS; do
  keep=()
  if [[ $p == *-keep* ]]; then
    k=${p#*-keep}
    units=$(seq -s, -f 'block.%g' $((36 - k)) 35)  # GPT-2 large's 36 blocks
    keep=(--set parallel.keep_gathered_units="$units")
  fi
  log="$OUT/logs/$p.txt"
  : > "$OUT/logs/disk-$p.txt"
  # Before the run: the bytes an earlier run of this precision moved, when there is one.
  if [ -f "$OUT/logs/bytes-$p.txt" ]; then read -r rb wb < "$OUT/logs/bytes-$p.txt"; disk "$p"; fi
  "$BRAID" launch -n 2 -- "$BRAID" train configs/bench-offload.yaml \
    --set training.precision="${p%%-keep*}" "${keep[@]}" --set training.max_steps="$STEPS" --set output.dir="$OUT/run" \
    --set parallel.offload_dir="$OUT/offload" < /dev/null > "$log" 2>&1 ||
    { echo "| $p | failed: see $log |"; continue; }
  steps=$(grep 'offload read' "$log" | tail -n +2)
  [ -n "$steps" ] || { echo "| $p | no step lines with offload traffic: see $log |"; continue; }
  step_s=$(echo "$steps" | sed 's/.* \([0-9.]*\) ms\/step.*/\1/' | median)
  read_gb=$(echo "$steps" | sed 's/.*offload read \([0-9.]*\) GB.*/\1/' | median)
  written_gb=$(echo "$steps" | sed 's/.*written \([0-9.]*\) GB.*/\1/' | median)
  busy_ms=$(echo "$steps" | sed 's/.*busy \([0-9.]*\) ms.*/\1/' | median)
  file=$(grep -m1 'in the file' "$log" | sed 's/.*: \([0-9.]*\) \([GM]\)iB in the file.*/\1 \2/')
  file_gb=$(echo "$file" | awk '{ print $1 * ($2 == "G" ? 2^30 : 2^20) / 1e9 }')
  rb=$(awk -v g="$read_gb" 'BEGIN { printf "%.0f", g * 1e9 }')
  wb=$(awk -v g="$written_gb" 'BEGIN { printf "%.0f", g * 1e9 }')
  echo "$rb $wb" > "$OUT/logs/bytes-$p.txt"
  disk "$p"  # after (the run removed its files)
  best=$(awk 'NR == 1 || $1 < s { s = $1 } NR == 1 || $2 < o { o = $2 } END { print s, o }' \
    "$OUT/logs/disk-$p.txt")
  awk -v p="$p" -v s="$step_s" -v r="$read_gb" -v w="$written_gb" -v f="$file_gb" -v b="$busy_ms" \
    -v d="$best" 'BEGIN { split(d, x, " "); best = x[1] < x[2] ? x[1] : x[2];
      printf "| %s | %.2f | %.2f (%.2fx) | %.2f (%.2fx) | %.2f | %.2f | %.2f | %.2f |\n",
        p, s / 1000, r, r / f, w, w / f, b / 1000, x[1], x[2], s / 1000 / best }'
done
echo
echo "x file: bytes a step moved per rank over the file's (the state once: the least a step moves"
echo "each way); disk: the same bytes per rank moved by 2 processes at once with O_DIRECT, written"
echo "then read (serial) or both at once (overlap), the best of DISK_CONFIGS ($DISK_CONFIGS: chunk"
echo "MiB x transfers at a time) and of 2 rounds before and after the run; step / disk: against it."
