#!/usr/bin/env bash
# Context parallelism against one process, side by side from one run: for each sequence length,
# (a) one process x 2 threads, (b) cp 2 ring and (c) cp 2 ulysses, each 2 ranks x 1 thread.
# A small LLaMA written to a temporary config.json (2 layers, 4 heads, 2 kv heads, d_model 128,
# d_ff 352, vocab 1024, max_position_embeddings 16384), micro-batch 1, global batch 1 (cp ranks
# share the sequence, the batch does not split), AdamW, fp32, random tokens.
#
#   bench/context_parallel.sh [ROUNDS=2] [STEPS=5]
#   SEQS="2048 8192" bench/context_parallel.sh     # other sequence lengths (multiples of 4)
#
# About 4 minutes on a quiet 2-core machine (the 16k rows take most of it). Other work on the
# machine hurts the one-process column most (an OpenMP thread that loses its core stalls the
# other), so start it when the load average is low; the start and end load are printed.
#
# Each round runs every column of every sequence length once, starting one column later each
# round; a row's numbers come from its best round (tokens/s). tokens/s and step ms are braid's
# summary: the median step after dropping the first two (Trainer's steady_median), so STEPS >= 5
# leaves at least three. "exposed" is the summary's exposed_comm_ms, rank 0's median per step of
# the time the compute thread waited for communication: ring or Ulysses traffic, plus the
# gradient all-reduce over the cp ranks (DDP over dp x cp, one bucket) and any time spent
# waiting for the other rank to catch up (load imbalance, a core taken by something else);
# "least" beside it is the smallest of the same steps (metrics.jsonl), the wait with the least
# jitter in it.
#
# "traffic" is what each cp rank sends per step, counted from the shapes the way ring_attention
# and ulysses_attention send them (Note [Ring attention]; ulysses.cpp), fp32:
#   ring, cp 2, per layer: one key/value block forward, one backward and two dK/dV accumulator
#     hops, each a block of (T/2) x kv heads x head dim x 2 (k and v) x 4 bytes, sent with
#     MPI_Isend/Irecv to the other rank while attention computes on the block at hand (the last
#     dK/dV hop of each layer's backward has no compute left beside it);
#   ulysses, cp 2, per layer: q, k, v and the output to the head split and back forward, and the
#     same four backward, half of each tensor, each a blocking all-to-all over shared memory.
# "alone" is what those messages take with nothing else running: each message timed by
# `braid bench comm` at its size (slowest rank, best of 3 rounds, no compute beside it) just
# before the training runs: a ring hop is the p2p transport's all_to_all of twice the block
# (with 2 ranks: one MPI_Isend + MPI_Irecv of the block, the ring's own calls), a Ulysses swap
# the shared-memory all_to_all of the tensor. The hop's copies and the compute's use of the same
# cores are not in "alone", and on 2 cores the comm threads compete with compute, so compare
# exposed with alone (ring: the part of the transfer not hidden behind attention is at most
# exposed / alone) rather than read either as exact.
#
# Memory: activations and communication-buffer peaks are rank 0's MemoryTracker (braid train
# prints rank 0's table only; with cp both ranks hold T/2 tokens of the same shapes); peak RSS is
# every rank's, from /usr/bin/time -f %M.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
STEPS=${2:-5}
SEQS=${SEQS:-2048 8192 16384}
BRAID=${BRAID:-build/release/src/braid/cli/braid}
[ -x "$BRAID" ] || { echo "build braid first (make build)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 1; }
# The model, as the config.json below says (for the traffic formulas).
LAYERS=2 HEADS=4 KV_HEADS=2 HIDDEN=128
HEAD_DIM=$((HIDDEN / HEADS))

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/config.json" <<EOF
{"model_type": "llama", "vocab_size": 1024, "max_position_embeddings": 16384,
 "hidden_size": $HIDDEN, "intermediate_size": 352, "num_hidden_layers": $LAYERS,
 "num_attention_heads": $HEADS, "num_key_value_heads": $KV_HEADS}
EOF
cat >"$tmp/run.yaml" <<EOF
model:
  config: $tmp/config.json
data:
  random_tokens: true
  seq_len: 2048
training:
  micro_batch_size: 1
  global_batch_size: 1
  max_steps: $STEPS
  log_interval: 1
  eval_interval: 0
  eval_batches: 0
optimizer:
  type: adamw
  lr: 1.0e-4
schedule:
  type: constant
memory:
  budget: 8GiB
output:
  dir: $tmp/out
  export_model: false
  samples: 0
EOF

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | head -1; }
# Rank 0's peak of one category of the memory breakdown ("activations 0 B (peak 43.1 MiB)"), in MiB.
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
# Every rank's peak RSS: /usr/bin/time writes it (KiB) to PREFIX.RANK (a file: on stderr it
# would interleave with the launcher's tagging).
cat >"$tmp/rss.sh" <<'EOF'
#!/usr/bin/env bash
prefix=$1
shift
exec /usr/bin/time -o "$prefix.${OMPI_COMM_WORLD_RANK:-0}" -f %M "$@"
EOF
chmod +x "$tmp/rss.sh"
rss_mib() { [ -s "$1" ] && awk '{ printf "%.0f", $1 / 1024 }' "$1"; }  # file -> MiB
gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 > b + 0) }'; }

lscpu | sed -n 's/^Model name: *\(.*\)/CPU: \1/p'
lscpu | sed -n 's/^CPU(s): *\(.*\)/cores: \1/p'
echo "date: $(date '+%Y-%m-%d %H:%M:%S %Z')  load average: $(cut -d' ' -f1-3 /proc/loadavg)"
head=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
git diff --quiet HEAD -- src 2>/dev/null || head+=" + uncommitted changes in src/"
echo "braid $head, binary $BRAID ($(date -r "$BRAID" '+%Y-%m-%d %H:%M'))"
echo

# Message times alone: `braid bench comm` all_to_all on both transports, 256 KiB .. 16 MiB,
# and the shared-memory all_reduce (the gradient bucket).
"$BRAID" launch -n 2 --threads 1 -- "$BRAID" bench comm --ops all_to_all,all_reduce \
  --min-bytes 256K --max-bytes 16M --no-raw >"$tmp/shm.txt" 2>&1 ||
  { cat "$tmp/shm.txt" >&2; exit 1; }
BRAID_COMM_TRANSPORT=p2p "$BRAID" launch -n 2 --threads 1 -- "$BRAID" bench comm \
  --ops all_to_all --min-bytes 512K --max-bytes 16M --no-raw >"$tmp/p2p.txt" 2>&1 ||
  { cat "$tmp/p2p.txt" >&2; exit 1; }
# ms one call of OP takes at BYTES (f32), from a bench comm table: the nearest size measured,
# scaled linearly to BYTES.
call_ms() {  # file op bytes
  awk -v op="$2" -v b="$3" '
    { sub(/^\[rank [0-9]+\] /, "") }
    $1 == op && $5 == "f32" {
      s = $4 * 4; d = log(s / b); if (d < 0) d = -d
      if (best == "" || d < best) { best = d; ms = $7 / 1000 * b / s }
    }
    END { if (best == "") print "nan"; else printf "%.3f\n", ms }' "$1"
}
echo "bench comm, time per call (slowest rank, best of 3), ms:"
printf '  %-10s %14s %14s %14s\n' size "p2p all_to_all" "shm all_to_all" "shm all_reduce"
for s in 262144 524288 1048576 2097152 4194304 8388608 16777216; do
  printf '  %-10s %14s %14s %14s\n' "$((s / 1024)) KiB" "$(call_ms "$tmp/p2p.txt" all_to_all $s)" \
    "$(call_ms "$tmp/shm.txt" all_to_all $s)" "$(call_ms "$tmp/shm.txt" all_reduce $s)"
done
echo

# Per-step traffic of each rank (bytes) and the time its messages take alone (ms), cp 2.
traffic() {  # T mode -> "bytes ms"
  local T=$1 mode=$2 kv q k
  kv=$((T / 2 * KV_HEADS * HEAD_DIM * 4 * 2))  # one key/value block (k and v)
  q=$((T / 2 * HEADS * HEAD_DIM * 4))          # this rank's q or output, [T/2, NH, HS]
  k=$((T / 2 * KV_HEADS * HEAD_DIM * 4))       # its k or v
  if [ "$mode" = ring ]; then
    awk -v L=$LAYERS -v kv=$kv -v t="$(call_ms "$tmp/p2p.txt" all_to_all $((2 * kv)))" \
      'BEGIN { printf "%d %.2f\n", L * 4 * kv, L * 4 * t }'
  else
    awk -v L=$LAYERS -v q=$q -v k=$k -v tq="$(call_ms "$tmp/shm.txt" all_to_all $q)" \
      -v tk="$(call_ms "$tmp/shm.txt" all_to_all $k)" \
      'BEGIN { printf "%d %.2f\n", L * (4 * q + 4 * k) / 2, L * 4 * (tq + tk) }'
  fi
}

cols=(one ring ulysses)
declare -A label=([one]="one process, 2 threads" [ring]="cp 2 ring, 2 x 1" [ulysses]="cp 2 ulysses, 2 x 1")
declare -A best step exposed emin act comm rss0 rss1
params=""
for T in $SEQS; do
  for c in "${cols[@]}"; do
    best[$T,$c]=0 step[$T,$c]=- exposed[$T,$c]=- emin[$T,$c]=- act[$T,$c]=- comm[$T,$c]=-
  done
done

run() {  # column T -> output of rank 0; peak RSS in $tmp/rss.RANK
  local c=$1 T=$2
  local common=(--set data.seq_len="$T" --set output.dir="$tmp/out-$c")
  rm -f "$tmp"/rss.[0-9]*
  if [ "$c" = one ]; then
    BRAID_NUM_THREADS=2 "$tmp/rss.sh" "$tmp/rss" "$BRAID" train "$tmp/run.yaml" "${common[@]}" 2>&1
  else
    "$BRAID" launch -n 2 --threads 1 -- "$tmp/rss.sh" "$tmp/rss" "$BRAID" train "$tmp/run.yaml" \
      "${common[@]}" --set parallel.context_parallel_size=2 \
      --set parallel.context_parallel_mode="$c" 2>&1
  fi
}

n=${#cols[@]}
for r in $(seq "$ROUNDS"); do
  for T in $SEQS; do
    for i in $(seq 0 $((n - 1))); do
      c=${cols[$(((i + r - 1) % n))]}
      if ! out=$(run "$c" "$T"); then
        echo "round $r seq $T ${label[$c]} FAILED:"; echo "$out" | tail -5; continue
      fi
      s=$(echo "$out" | grep 'summary:' || true)
      t=$(echo "$s" | field tokens_per_s); ms=$(echo "$s" | field step_ms)
      e=$(echo "$s" | field exposed_comm_ms)
      printf "round %s seq %5s %-24s tokens/s %8s  step %8s ms  exposed comm %7s ms\n" \
        "$r" "$T" "${label[$c]}" "${t:--}" "${ms:--}" "${e:--}"
      [ -n "$t" ] || continue
      [ -n "${params:-}" ] || params=$(echo "$out" | sed -n 's/.*params: \([0-9]*\) .*/\1/p' | head -1)
      if gt "$t" "${best[$T,$c]}"; then
        best[$T,$c]=$t step[$T,$c]=$ms exposed[$T,$c]=$e
        # The least exposed_comm_ms of the steps the summary's median is taken over (from 3 on).
        emin[$T,$c]=$(sed -n 's/.*"kind":"step","step":\([0-9]*\),.*"exposed_comm_ms":\([0-9.e+-]*\),.*/\1 \2/p' \
          "$tmp/out-$c/metrics.jsonl" 2>/dev/null |
          awk '$1 > 2 && (m == "" || $2 + 0 < m + 0) { m = $2 } END { if (m == "") print "-"; else printf "%.1f", m }')
        act[$T,$c]=$(echo "$out" | peak_mib activations)
        comm[$T,$c]=$(echo "$out" | peak_mib "communication buffers")
        rss0[$T,$c]=$(rss_mib "$tmp/rss.0" || echo -) rss1[$T,$c]=""
        [ "$c" = one ] || rss1[$T,$c]=$(rss_mib "$tmp/rss.1" || echo -)
      fi
    done
  done
done

echo
echo "best of $ROUNDS rounds, $STEPS steps each (median step after the first two); memory: rank 0's"
echo "tracker peaks, peak RSS per rank; traffic: bytes each cp rank sends per step; alone: those"
echo "messages timed by braid bench comm with nothing else running"
echo
printf '| seq | run | tokens/s | step ms | x one process | exposed comm ms/step, median (%% of step) | least | traffic MiB/step | alone ms/step | exposed / alone (median, least) | activations peak MiB | vs one process | comm buffers peak MiB | peak RSS MiB (rank 0 / 1) |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
for T in $SEQS; do
  for c in "${cols[@]}"; do
    if [ "${best[$T,$c]}" = 0 ]; then
      printf '| %s | %s | failed | | | | | | | | | | | |\n' "$T" "${label[$c]}"; continue
    fi
    if [ "$c" = one ]; then
      bytes=0 alone=0
    else
      read -r bytes alone < <(traffic "$T" "$c")
    fi
    rss=${rss0[$T,$c]}
    [ -n "${rss1[$T,$c]}" ] && rss+=" / ${rss1[$T,$c]}"
    awk -v T="$T" -v name="${label[$c]}" -v tps="${best[$T,$c]}" -v ms="${step[$T,$c]}" \
      -v one="${best[$T,one]}" -v e="${exposed[$T,$c]}" -v em="${emin[$T,$c]}" -v bytes="$bytes" -v alone="$alone" \
      -v act="${act[$T,$c]}" -v act1="${act[$T,one]}" -v comm="${comm[$T,$c]}" -v rss="$rss" \
      -v cp="$([ "$c" = one ] && echo 0 || echo 1)" 'BEGIN {
        x = one > 0 ? sprintf("%.2fx", tps / one) : "-"
        ex = cp ? sprintf("%.1f (%.1f%%)", e, 100 * e / ms) : "-"
        tr = cp ? sprintf("%.1f", bytes / 1048576) : "-"
        al = cp ? sprintf("%.1f", alone) : "-"
        el = cp ? em : "-"
        ea = cp && alone > 0 ? sprintf("%.1f, %.1f", e / alone, em / alone) : "-"
        ah = act1 > 0 && act != "-" ? sprintf("%.2fx", act / act1) : "-"
        printf "| %d | %s | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
               T, name, tps, ms, x, ex, el, tr, al, ea, act, ah, comm, rss }'
  done
done
echo
if [ -n "${params:-}" ]; then
  awk -v p="$params" -v t="$(call_ms "$tmp/shm.txt" all_reduce $((params * 4)))" 'BEGIN {
    printf "gradient all-reduce over the cp ranks (in every cp row'"'"'s exposed comm): %.1f MiB, %.2f ms alone\n",
           p * 4 / 1048576, t }'
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)  ($(date '+%H:%M:%S'))"
echo
echo "commands (each round, every column once per sequence length, rotated; T = $SEQS):"
echo "  BRAID_NUM_THREADS=2 $BRAID train run.yaml --set data.seq_len=T"
for c in ring ulysses; do
  echo "  $BRAID launch -n 2 --threads 1 -- $BRAID train run.yaml --set data.seq_len=T" \
    "--set parallel.context_parallel_size=2 --set parallel.context_parallel_mode=$c"
done
echo "run.yaml:"
sed 's/^/  /' "$tmp/run.yaml"
echo "config.json: $(tr -d '\n' <"$tmp/config.json")"
