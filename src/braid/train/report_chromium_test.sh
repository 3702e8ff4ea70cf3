#!/usr/bin/env bash
# `braid report` opens in a real browser and draws its plots (label report): two small runs on
# 2 ranks (DDP, and a 2-stage pipeline, which adds its timeline), one page for both, loaded by
# headless Chromium. The page lists, after layout, how many marks each chart drew; every chart
# must have drawn some. A screenshot is left in $REPORT_SHOT when that is set (the README's).
#   report_chromium_test.sh BRAID REPO_ROOT
set -uo pipefail
BRAID=$(realpath "$1")
ROOT=$2
browser=$(command -v chromium || command -v chromium-browser || true)
[[ -n $browser ]] || { echo "SKIP: no chromium (scripts/setup-deps.sh test installs it)"; exit 77; }
work=$(mktemp -d /tmp/braid_report.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cat > "$work/train.yaml" <<YAML
model: {config: $ROOT/testdata/models/gpt2-vocab512.json}
data: {random_tokens: true, seq_len: 32}
training: {micro_batch_size: 2, gradient_accumulation_steps: 2, max_steps: 12, log_interval: 1,
           eval_interval: 4, eval_batches: 2}
optimizer: {type: adamw, lr: 2.0e-3}
output: {export_model: false, samples: 0}
YAML
for run in ddp:ddp pipeline:none; do
  name=${run%%:*}
  extra=()
  [[ $name == pipeline ]] && extra=(--set parallel.pipeline_parallel_size=2)
  "$BRAID" launch -n 2 -- "$BRAID" train "$work/train.yaml" --set output.dir="$work/$name" \
    --set parallel.strategy="${run##*:}" "${extra[@]}" > "$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; fail "the $name run"; }
  lines=$(grep -c '"kind":"step"' "$work/$name/metrics.jsonl")
  [[ $lines == 12 ]] || fail "$name: $lines step lines in metrics.jsonl, wanted 12"
done
"$BRAID" report "$work/ddp" "$work/pipeline" --out "$work/report.html" || fail "braid report"
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$work/profile")
timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$work/report.html" > "$work/dom.html" \
  2> "$work/browser.log" || { tail -5 "$work/browser.log"; fail "chromium could not load the page"; }
drawn=$(sed -n '/<pre id="drawn">/,/<\/pre>/p' "$work/dom.html")
echo "$drawn"
charts=$(grep -c 'marks drawn' <<<"$drawn")
# Loss, throughput, MFU; memory and step time per run; the pipeline's timeline.
(( charts == 8 )) || fail "$charts charts reported, wanted 8"
if grep -q ': 0 marks drawn' <<<"$drawn"; then fail "a chart drew nothing"; fi
loss=$(grep -o 'Training and validation loss: [0-9]* marks' <<<"$drawn" | grep -o '[0-9]*')
(( loss >= 2 )) || fail "the loss chart drew $loss marks, wanted one per run"
timeline=$(grep -o 'Pipeline, last step: pipeline: [0-9]* marks' <<<"$drawn" | grep -o '[0-9]\+')
(( timeline >= 8 )) || fail "the pipeline chart drew $timeline bars, wanted 2 forwards and 2 backwards per rank"
if [[ -n ${REPORT_SHOT:-} ]]; then
  timeout 120 "$browser" "${flags[@]}" --window-size=820,2600 --screenshot="$REPORT_SHOT" \
    "file://$work/report.html" 2>> "$work/browser.log" || fail "chromium could not take a screenshot"
fi
echo "report_chromium_test: passed"
