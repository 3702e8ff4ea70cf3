// Shared by the DDP parity tests (thread-backed ranks and real processes under mpirun): the
// tiny training config and the weight comparison.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "braid/nn/transformer.h"
#include "braid/train/trainer.h"
#include "testing/run_ranks.h"
#include "testing/tensor_compare.h"

namespace braid::train {

inline config::TrainConfig tiny(int64_t micro, int64_t accum, const std::string& strategy) {
  config::TrainConfig c;
  c.model.preset = "gpt2-tiny";
  c.data.random_tokens = true;
  c.data.seq_len = 16;
  c.training.micro_batch_size = micro;
  c.training.gradient_accumulation_steps = accum;
  c.training.max_steps = 10;
  c.training.eval_batches = 0;
  c.training.eval_interval = 0;
  c.optimizer.lr = 1e-3;
  c.optimizer.grad_clip = 1.0;
  c.schedule.type = "cosine";
  c.schedule.warmup_steps = 2;
  c.parallel.strategy = strategy;
  c.parallel.bucket_mb = 0.01;  // several buckets even for a tiny model
  c.output.export_model = false;
  c.output.samples = 0;
  return c;
}

inline TrainerOptions quiet() {
  TrainerOptions o;
  o.quiet = true;
  o.measure_peak = false;
  return o;
}

// Note [Key bias parity]: the gradient of GPT-2's attention key bias (the middle third of
// c_attn.bias) is exactly zero in exact arithmetic (a bias on k adds q.b to every score of a
// row, and softmax ignores shifts), so in floats it is rounding noise, which AdamW's
// m / (sqrt(v) + eps) turns into updates of arbitrary sign. Those elements can only agree to
// an absolute tolerance; every other element must agree to 1e-5 relative, with an absolute
// floor of 1e-5 of the weights' scale (init std 0.02: 2e-7) for elements whose gradient is
// mostly cancellation (tied wte rows of rare tokens), where summation order alone moves
// AdamW's update by a few 1e-8 per step.
// rtol / preset: looser for runs whose reductions split differently (tensor parallelism), and
// the model the weights are of.
inline ::testing::AssertionResult weights_match(const Tensor& actual, const Tensor& expected,
                                                double rtol, const nn::ModelConfig& mc) {
  const double kAtol = rtol * 0.02;
  nn::TransformerOptions o;
  o.init_weights = false;
  o.allocate_grads = false;
  nn::Transformer layout(mc, o);
  for (const auto& e : layout.flat().entries()) {
    auto check = [&](int64_t off, int64_t n, double rt, double atol, const char* part) {
      auto r = braid::testing::all_close(actual.flat_range(off, n), expected.flat_range(off, n), rt,
                                         atol);
      if (!r) r << " in " << e.name << part;
      return r;
    };
    const int64_t o0 = e.range.offset, C = mc.d_model;
    if (e.name.find("attn.c_attn.bias") != std::string::npos) {
      for (auto r : {check(o0, C, rtol, kAtol, " (q)"), check(o0 + 2 * C, C, rtol, kAtol, " (v)"),
                     check(o0 + C, C, 0, 1e-5, " (k, Note [Key bias parity])")})
        if (!r) return r;
    } else if (auto r = check(o0, e.range.size, rtol, kAtol, ""); !r) {
      return r;
    }
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult weights_match(const Tensor& actual, const Tensor& expected,
                                                double rtol = 1e-5,
                                                const std::string& preset = "gpt2-tiny") {
  return weights_match(actual, expected, rtol, nn::ModelConfig::preset(preset));
}

inline Tensor train_one(const config::TrainConfig& cfg) {
  Trainer t(cfg, nullptr, quiet());
  t.run();
  return t.model().flat().params().clone();
}

// A non-owning handle on a run_ranks group, for APIs that take shared_ptr.
inline std::shared_ptr<comm::ProcessGroup> borrow(comm::ProcessGroup& pg) {
  return std::shared_ptr<comm::ProcessGroup>(&pg, [](comm::ProcessGroup*) {});
}

// Builds a Trainer for cfg on each of n thread-backed ranks; returns each rank's error
// message ("" when construction succeeded).
inline std::vector<std::string> construction_errors(int n, const config::TrainConfig& cfg) {
  auto errors = braid::testing::run_ranks_collect(
      n, [&](comm::ProcessGroup& pg) { Trainer t(cfg, borrow(pg), quiet()); });
  std::vector<std::string> out;
  for (auto& e : errors) out.push_back(braid::testing::what(e));
  return out;
}

}  // namespace braid::train
