#!/bin/bash
# The library as a user gets it: `cmake --install` into a fresh prefix, examples/mlp built
# against it with find_package(braid), then trained by the installed `braid launch`:
#   - one process, 2 ranks under DDP and 2 under ZeRO-3: the loss falls, held-out accuracy is
#     high, and DDP and ZeRO-3 end with bit-identical weights;
#   - Accelerate's fsdp.yaml and DeepSpeed's zero3.json as the config's distribution;
#   - save_state after 20 of 40 steps under DDP, load_state under ZeRO-3 on 2 ranks and one
#     process under DDP on 2: the same weights as the straight run;
#   - the model split into pipeline stages (pp 2, and dp 2 x pp 2 with ZeRO-3 on 4 ranks): what
#     one process learns.
# usage: package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
work=$(mktemp -d /tmp/braid-package.XXXXXX)
# KEEP=1 keeps the work directory (the logs, the installed prefix, the built example).
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log" ||
  { cat "$work/install.log"; fail "cmake --install"; }
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$src/examples/mlp" -B "$work/build" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; fail "configuring examples/mlp against the installed package"; }
cmake --build "$work/build" > "$work/build.log" 2>&1 ||
  { cat "$work/build.log"; fail "building examples/mlp"; }
braid="$work/prefix/bin/braid" app="$work/build/train_mlp" cfg="$src/examples/mlp"

# run NAME NPROCS ARGS...: output in $work/NAME.log
run() {
  local name=$1 n=$2
  shift 2
  if [ "$n" = 1 ]; then
    "$app" "$@" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name"; }
  else
    "$braid" launch -n "$n" -- "$app" "$@" > "$work/$name.log" 2>&1 ||
      { cat "$work/$name.log"; fail "$name"; }
  fi
}
field() { grep -o "$2 [^ ]*" "$work/$1.log" | tail -1 | awk '{print $NF}'; }
hash() { field "$1" "weights fnv1a"; }

run one 1 "$cfg/ddp.yaml"
run ddp 2 "$cfg/ddp.yaml"
run zero3 2 "$cfg/zero3.yaml"
for name in one ddp zero3; do
  first=$(grep -o 'step 1 | loss [0-9.]*' "$work/$name.log" | awk '{print $NF}')
  last=$(grep -o 'step 40 | loss [0-9.]*' "$work/$name.log" | awk '{print $NF}')
  acc=$(grep -o 'held-out accuracy [0-9.]*' "$work/$name.log" | awk '{print $NF}')
  echo "$name: loss $first -> $last, held-out accuracy $acc, weights $(hash "$name")"
  awk -v f="$first" -v l="$last" -v a="$acc" 'BEGIN { exit !(l < f / 2 && a > 0.85) }' ||
    fail "$name did not learn (loss $first -> $last, accuracy $acc)"
done
grep -q 'zero3' "$work/zero3.log" || fail "the zero3 run did not run ZeRO-3"
[[ "$(hash ddp)" =~ ^[0-9a-f]{16}$ ]] || fail "the DDP run printed no weights hash"
[ "$(hash ddp)" = "$(hash zero3)" ] || fail "DDP and ZeRO-3 on 2 ranks differ"

# The distribution from the other dialects: Accelerate's FSDP file (FULL_SHARD, no mixed
# precision) is the ZeRO-3 run again; DeepSpeed's ZeRO-3 file (bf16, its own batch, AdamW and
# WarmupDecayLR) has to learn too.
run accelerate 2 "$cfg/ddp.yaml" --accelerate-config "$src/configs/accelerate/fsdp.yaml"
grep -q 'FULL_SHARD' "$work/accelerate.log" || fail "the Accelerate FSDP config did not run FSDP"
[ "$(hash accelerate)" = "$(hash zero3)" ] ||
  fail "Accelerate's fsdp.yaml: $(hash accelerate), braid's zero3.yaml: $(hash zero3)"
run deepspeed 2 "$cfg/ddp.yaml" --deepspeed "$src/configs/deepspeed/zero3.json"
# (its lr is 1e-3, a tenth of the YAML's: 40 steps reach less, well above chance's 0.25)
grep -q 'bf16' "$work/deepspeed.log" || fail "the DeepSpeed config did not train in bf16"
first=$(grep -o 'step 1 | loss [0-9.]*' "$work/deepspeed.log" | awk '{print $NF}')
last=$(grep -o 'step 40 | loss [0-9.]*' "$work/deepspeed.log" | awk '{print $NF}')
acc=$(grep -o 'held-out accuracy [0-9.]*' "$work/deepspeed.log" | awk '{print $NF}')
echo "deepspeed zero3.json (bf16): loss $first -> $last, held-out accuracy $acc"
awk -v f="$first" -v l="$last" -v a="$acc" 'BEGIN { exit !(l < f * 0.85 && a > 0.6) }' ||
  fail "the DeepSpeed config did not learn (loss $first -> $last, accuracy $acc)"

run half 2 "$cfg/ddp.yaml" --steps 20 --save "$work/state"
run resumed 2 "$cfg/zero3.yaml" --resume "$work/state"
grep -q 'step 21 |' "$work/resumed.log" || fail "the resumed run did not start at step 21"
[ "$(hash resumed)" = "$(hash ddp)" ] ||
  fail "saved under DDP, resumed under ZeRO-3: $(hash resumed), straight: $(hash ddp)"
run resumed1 1 "$cfg/ddp.yaml" --resume "$work/state"
echo "resumed under zero3 x2: $(hash resumed), under one process: $(hash resumed1)"
# One process sums the same gradients in another order: equal up to rounding, not bits.
l2=$(grep -o 'step 40 | loss [0-9.]*' "$work/ddp.log" | awk '{print $NF}')
l1=$(grep -o 'step 40 | loss [0-9.]*' "$work/resumed1.log" | awk '{print $NF}')
awk -v a="$l1" -v b="$l2" 'BEGIN { d = a - b; exit !(d < 2e-3 && d > -2e-3) }' ||
  fail "resumed in one process: loss $l1 at step 40, 2 ranks straight: $l2"

# Pipeline stages of the user's model (an nn::StagedModel) through Accelerator::train_step: pp 2
# on 2 ranks and dp 2 x pp 2 with ZeRO-3 on 4 learn what one process learns (the same loss to
# rounding, the same held-out accuracy).
run pp 2 "$cfg/ddp.yaml" --set parallel.strategy=none --set parallel.sync_each_batch=auto \
  --set parallel.pipeline_parallel_size=2
run pp_zero3 4 "$cfg/zero3.yaml" --set parallel.sync_each_batch=auto \
  --set parallel.pipeline_parallel_size=2
grep -q 'pp=2' "$work/pp.log" || fail "the pp run did not pipeline"
for name in pp pp_zero3; do
  l=$(grep -o 'step 40 | loss [0-9.]*' "$work/$name.log" | awk '{print $NF}')
  l1=$(grep -o 'step 40 | loss [0-9.]*' "$work/one.log" | awk '{print $NF}')
  a=$(grep -o 'held-out accuracy [0-9.]*' "$work/$name.log" | awk '{print $NF}')
  a1=$(grep -o 'held-out accuracy [0-9.]*' "$work/one.log" | awk '{print $NF}')
  echo "$name: loss at step 40 $l (one process $l1), held-out accuracy $a ($a1)"
  awk -v a="$l" -v b="$l1" 'BEGIN { d = a - b; exit !(d < 2e-3 && d > -2e-3) }' ||
    fail "$name: loss $l at step 40, one process: $l1"
  [ "$a" = "$a1" ] || fail "$name: held-out accuracy $a, one process: $a1"
done
echo "package test passed"
