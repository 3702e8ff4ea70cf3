// Activation checkpointing policies (Note [Checkpoint policies], nn/transformer.cpp): for each
// policy, the peak activation memory of one training step (MemoryTracker, category
// activations: everything forward keeps plus backward's gradient buffers and reruns) and the
// forward+backward time, against no checkpointing.
//
//   activation_checkpointing_bench [--preset bench-small] [--llama] [--batch 8] [--seq 256]
//       [--steps 7]
//
// One model, f32; the policies take turns step by step (round-robin after one warm-up step
// each), so load from neighbours spreads over all of them. Wall time of forward+backward:
// median and best over --steps; on a shared machine the best step is the one neighbours
// disturbed least. "saved" and "lost" are relative to none.
// Then, from the steps without checkpointing, what each sublayer of a block would trade if
// selective recomputed it (Note [Selective recompute], nn/block.cpp): the activations it
// leaves alive for backward (tracker growth across its forward, its output included) and its
// forward time (what a rerun costs), summed over the blocks, best step.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "braid/autograd/variable.h"
#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"
#include "braid/core/rng.h"
#include "braid/nn/transformer.h"

using namespace braid;
using nn::CheckpointPolicy;

namespace {

struct Options {
  std::string preset = "bench-small";
  bool llama = false;  // --llama: the preset's LLaMA twin (see main)
  int64_t batch = 8;
  int64_t seq = 256;
  int steps = 7;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--llama") {
      o.llama = true;
      continue;
    }
    BRAID_CHECK(i + 1 < argc, "activation_checkpointing_bench: ", a, " needs a value");
    const std::string v = argv[++i];
    if (a == "--preset") {
      o.preset = v;
    } else if (a == "--batch") {
      o.batch = std::stoll(v);
    } else if (a == "--seq") {
      o.seq = std::stoll(v);
    } else if (a == "--steps") {
      o.steps = std::stoi(v);
    } else {
      BRAID_THROW("activation_checkpointing_bench: unknown option ", a,
                  " (--preset, --llama, --batch, --seq, --steps)");
    }
  }
  BRAID_CHECK(o.batch > 0 && o.seq > 0 && o.steps > 0,
              "activation_checkpointing_bench: --batch, --seq and --steps must be positive");
  return o;
}

void print_cpu_model() {
  FILE* p = popen("lscpu 2>/dev/null", "r");
  if (!p) return;
  char line[512];
  while (std::fgets(line, sizeof line, p)) {
    if (std::string(line).rfind("Model name:", 0) == 0) std::fputs(line, stdout);
  }
  pclose(p);
}

double wall_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Tensor random_tokens(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(B * T));
  for (auto& x : v) x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
  return Tensor::from_vector(v, Shape{B, T});
}

struct Row {
  CheckpointPolicy policy;
  int64_t peak = 0;  // bytes, the largest over all steps
  std::vector<double> ms;
};

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  print_cpu_model();
  nn::ModelConfig cfg = nn::ModelConfig::preset(o.preset);
  if (o.llama) {  // same width, depth, heads, vocabulary; SwiGLU d_ff ~8/3 C, half the kv heads
    const nn::ModelConfig g = cfg;
    cfg = nn::ModelConfig::preset("llama-tiny");
    cfg.vocab_size = g.vocab_size;
    cfg.d_model = g.d_model;
    cfg.n_layer = g.n_layer;
    cfg.n_head = g.n_head;
    cfg.n_kv_head = g.n_head % 2 == 0 ? g.n_head / 2 : g.n_head;
    cfg.d_ff = (8 * g.d_model / 3 + 63) / 64 * 64;
    cfg.max_seq_len = g.max_seq_len;
  }
  cfg.max_seq_len = std::max(cfg.max_seq_len, o.seq);
  std::printf(
      "activation_checkpointing_bench: %s, seq %lld, micro-batch %lld, f32, %d threads, "
      "%d timed steps each\n",
      cfg.summary().c_str(), static_cast<long long>(o.seq), static_cast<long long>(o.batch),
      omp_get_max_threads(), o.steps);

  auto tracker = std::make_shared<MemoryTracker>();
  MemoryScope scope(tracker);
  nn::Transformer model(cfg, {.seed = 1});
  const Tensor ids = random_tokens(o.batch, o.seq, cfg.vocab_size, 1);
  const Tensor targets = random_tokens(o.batch, o.seq, cfg.vocab_size, 2);

  // Per sublayer kind (0 attention, 1 MLP), summed over blocks for the current step.
  double sub_ms[2] = {0, 0}, sub_t0 = 0;
  int64_t sub_bytes[2] = {0, 0}, sub_b0 = 0;
  const char* sub_names[2] = {cfg.is_gpt2() ? "attn" : "self_attn", "mlp"};
  for (size_t i = 0; i < model.num_blocks(); ++i) {
    for (int k = 0; k < 2; ++k) {
      nn::Module* sub = model.block(i).find_module(sub_names[k]);
      sub->register_forward_pre_hook([&](nn::Module&) {
        sub_b0 = tracker->current(MemCategory::activations);
        sub_t0 = wall_ms();
      });
      sub->register_forward_post_hook([&, k](nn::Module&, const autograd::Variable&) {
        sub_ms[k] += wall_ms() - sub_t0;
        sub_bytes[k] += tracker->current(MemCategory::activations) - sub_b0;
      });
    }
  }
  std::vector<double> best_sub_ms[2];
  int64_t none_sub_bytes[2] = {0, 0};

  using Kind = CheckpointPolicy::Kind;
  std::vector<Row> rows;
  for (const CheckpointPolicy& p :
       {CheckpointPolicy(), CheckpointPolicy(Kind::selective, 2), CheckpointPolicy(Kind::selective),
        CheckpointPolicy(Kind::full, 2), CheckpointPolicy(Kind::full)})
    rows.push_back({p, 0, {}});

  auto step = [&](Row& r, bool timed) {
    model.set_activation_checkpointing(r.policy);
    model.zero_grad();
    tracker->reset_peaks();
    sub_ms[0] = sub_ms[1] = 0;
    sub_bytes[0] = sub_bytes[1] = 0;
    const double t0 = wall_ms();
    model.loss(ids, targets).backward();
    const double t1 = wall_ms();
    if (!r.policy.is_enabled()) {
      for (int k = 0; k < 2; ++k) {
        best_sub_ms[k].push_back(sub_ms[k]);
        none_sub_bytes[k] = sub_bytes[k];
      }
    }
    r.peak = std::max(r.peak, tracker->peak(MemCategory::activations));
    BRAID_CHECK(tracker->current(MemCategory::activations) == 0,
                "activation_checkpointing_bench: activations left after backward under ",
                r.policy.str());
    if (timed) r.ms.push_back(t1 - t0);
  };
  for (Row& r : rows) step(r, false);
  for (int s = 0; s < o.steps; ++s)
    for (Row& r : rows) step(r, true);

  const double mib = 1024.0 * 1024.0;
  const Row& base = rows.front();
  const double base_med = median(base.ms);
  const double base_best = *std::min_element(base.ms.begin(), base.ms.end());
  std::printf("\n%-18s %13s %8s %10s %9s %11s %9s\n", "policy", "peak act MiB", "saved %",
              "median ms", "best ms", "lost % med", "lost % best");
  for (const Row& r : rows) {
    const double med = median(r.ms), best = *std::min_element(r.ms.begin(), r.ms.end());
    std::printf("%-18s %13.1f %8.1f %10.1f %9.1f %11.1f %12.1f\n", r.policy.str().c_str(),
                static_cast<double>(r.peak) / mib,
                100.0 * (1.0 - static_cast<double>(r.peak) / static_cast<double>(base.peak)), med,
                best, 100.0 * (med / base_med - 1.0), 100.0 * (best / base_best - 1.0));
  }
  std::printf("\nwithout checkpointing, per sublayer, all %zu blocks (best of %d steps):\n",
              model.num_blocks(), o.steps + 1);
  std::printf("%-20s %12s %10s %10s\n", "sublayer", "kept MiB", "fwd ms", "MiB / ms");
  for (int k = 0; k < 2; ++k) {
    const double m = static_cast<double>(none_sub_bytes[k]) / mib;
    const double t = *std::min_element(best_sub_ms[k].begin(), best_sub_ms[k].end());
    std::printf("%-20s %12.1f %10.1f %10.3f\n", k == 0 ? "attention" : "mlp", m, t, m / t);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "activation_checkpointing_bench: %s\n", e.what());
  return 1;
}
