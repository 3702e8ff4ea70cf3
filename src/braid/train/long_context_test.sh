#!/usr/bin/env bash
# The claim context parallelism is for (configs/long-context.yaml): sequences of 8192 tokens
# under a 150 MiB budget per rank. One process stops at its first forward with the OutOfMemory
# breakdown, naming activations and context parallelism; two ranks with cp 2 (ring, then
# Ulysses) train to the end with a finite loss, each rank's tracked peak under the budget
# (label mpi).
#   long_context_test.sh BRAID REPO_ROOT
set -uo pipefail
BRAID=$(realpath "$1")
ROOT=$2
work=$(mktemp -d /tmp/braid_long_context.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$ROOT" || fail "no $ROOT"
cfg=configs/long-context.yaml
common=(--set training.max_steps=2 --set output.dir="$work/out")
if "$BRAID" train "$cfg" "${common[@]}" > "$work/one.log" 2>&1; then
  cat "$work/one.log"; fail "one process fit in the budget"
fi
grep -q "out of memory on cpu (rank 0): allocating .* of activations" "$work/one.log" ||
  { cat "$work/one.log"; fail "one process: no OutOfMemory breakdown for activations"; }
grep -q "parallel.context_parallel_size" "$work/one.log" ||
  { cat "$work/one.log"; fail "one process: the error does not suggest context parallelism"; }
echo "one process: $(grep -oE 'out of memory[^.]*' "$work/one.log" | head -1)"
for mode in ring ulysses; do
  "$BRAID" launch -n 2 -- "$BRAID" train "$cfg" "${common[@]}" \
    --set parallel.context_parallel_size=2 --set parallel.context_parallel_mode=$mode \
    > "$work/$mode.log" 2>&1 || { cat "$work/$mode.log"; fail "cp 2 $mode did not train"; }
  line=$(grep -E 'summary:' "$work/$mode.log" | head -1)
  [[ $line =~ last_loss=[0-9]+\.[0-9]+ ]] || { cat "$work/$mode.log"; fail "$mode: no finite loss"; }
  peak=$(grep -oE 'peak_tracked_mib=[0-9.]+' <<< "$line" | cut -d= -f2)
  awk -v p="$peak" 'BEGIN { exit !(p < 150) }' || fail "$mode: peak $peak MiB over the budget"
  echo "cp 2 $mode: trained, peak $peak MiB per rank"
done
