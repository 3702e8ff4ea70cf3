#!/usr/bin/env bash
# Bad input to `braid launch -n 2 -- braid train`: each case must end non-zero, with every rank
# printing one error line that names what is wrong, and the launcher's one-line cause.
#   bad_input_test.sh BRAID CONFIG
set -uo pipefail
BRAID=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A private copy: no other test's process lines (pgrep -f) can match ours.
CONFIG=$work/config.yaml
cp "$2" "$CONFIG"

sed 's/global_batch_size/global_bach_size/' "$CONFIG" > "$work/misspelt.yaml"
mkdir -p "$work/garbage"
head -c 4096 /dev/urandom > "$work/garbage/train_000000.bin"

failures=0
# check NAME WANT ARGS...: runs `braid train ARGS` on 2 ranks, wants a non-zero exit and /WANT/
# in every rank's error line. check_program is the same for any PROGRAM ARGS after the --.
check() {
  local name=$1 want=$2
  shift 2
  check_program "$name" "$want" "$BRAID" train "$@"
}
check_program() {
  local name=$1 want=$2
  shift 2
  local out rc
  out=$(timeout 120 "$BRAID" launch -n 2 -- "$@" 2>&1)
  rc=$?
  local fail=""
  [[ $rc == 0 ]] && fail="exit status 0"
  [[ $rc == 124 ]] && fail="hung (killed by timeout 120)"
  for r in 0 1; do
    grep -Eq "^\[rank $r\] braid train: error: .*$want" <<<"$out" ||
      fail="$fail; rank $r has no error line matching /$want/"
  done
  grep -Eq "^braid launch: job failed \(exit [1-9][0-9]*\): .*$want" <<<"$out" ||
    fail="$fail; no launcher cause line"
  if [[ -n $fail ]]; then
    echo "FAIL $name: $fail"
    echo "$out" | tail -20
    failures=$((failures + 1))
  else
    echo "ok $name: exit $rc: $(grep -m1 '^\[rank 0\]' <<<"$out")"
  fi
}

check batch-arithmetic \
  "global_batch_size 10 != micro_batch_size 4 x gradient_accumulation_steps 2 x data-parallel size 2 = 16" \
  "$CONFIG" --set training.global_batch_size=10 --set training.micro_batch_size=4 \
  --set training.gradient_accumulation_steps=2
check misspelt-key "misspelt.yaml:[0-9]+: unknown key 'training.global_bach_size' \(did you mean 'training.global_batch_size'\?\)" \
  "$work/misspelt.yaml"
check missing-config "cannot open config file '.*nope.yaml'" "$work/nope.yaml"
check missing-data "'$work/none' is not a directory" \
  "$CONFIG" --set data.random_tokens=false --set data.train="$work/none"
check corrupt-shard "train_000000.bin': bad magic at offset 0" \
  "$CONFIG" --set data.random_tokens=false --set data.train="$work/garbage"
check bad-value "--set: key 'training.max_steps' must be an integer, got 'twelve'" "$CONFIG" --set training.max_steps=twelve

# Ranks started with different values (here the seed is the rank number).
check_program differing-config \
  "the config differs across ranks: rank\(s\) 1 differ from rank 0 in training.seed" \
  sh -c "exec '$BRAID' train '$CONFIG' --set training.seed=\$OMPI_COMM_WORLD_RANK"

# Sharded data parallel: a shard group size that does not tile the ranks, a memory budget no
# strategy fits (stops at start, with the per-category breakdown and what each strategy needs),
# and ranks started with different strategies.
check sharding-factor "parallel.sharding_factor 3 does not divide the data-parallel size 2" \
  "$CONFIG" --set parallel.strategy=fsdp --set parallel.sharding_strategy=HYBRID_SHARD \
  --set parallel.sharding_factor=3
check budget-too-small "out of memory on cpu \(rank [01]\): allocating .* past the budget of 1.0 MiB.*Not even zero3 fits" \
  "$CONFIG" --set parallel.strategy=zero3 --set memory.budget=1MiB
check_program differing-strategy \
  "the config differs across ranks: rank\(s\) 1 differ from rank 0 in parallel.strategy" \
  sh -c "exec '$BRAID' train '$CONFIG' --set parallel.strategy=\$([ \$OMPI_COMM_WORLD_RANK = 0 ] && echo zero3 || echo ddp)"

[[ $failures == 0 ]] || { echo "bad_input_test: $failures case(s) failed"; exit 1; }
echo "bad_input_test: 10 cases passed"
