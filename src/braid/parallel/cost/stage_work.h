// The work of one rank's pipeline stage for one micro-batch, from the model's shapes and the
// profile's kernel rates, and the pipeline's time over such stages (internal to cost/:
// predict_step's parts, step_cost.cpp; Note [Step-time model], step_cost.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/nn/model_config.h"
#include "braid/parallel/cost/layout.h"
#include "braid/parallel/cost/machine_profile.h"

namespace braid::parallel::cost {

// One rank's work for one micro-batch of its stage (Note [Step-time model]), in seconds.
// Backward's parts include what it recomputes (recompute says how much of them that is).
struct StageWork {
  double gemm_f = 0, gemm_b = 0, attn_f = 0, attn_b = 0, mem_f = 0, mem_b = 0;
  double loss_f = 0, loss_b = 0, recompute = 0, overhead = 0;
  double weight = 0;  // of backward: the weight-gradient products (zb_h1's W passes)
  double forward() const { return gemm_f + attn_f + mem_f + loss_f + overhead / 3; }
  double backward() const { return gemm_b + attn_b + mem_b + loss_b + overhead * 2 / 3; }
};

// The shapes of the model as one tensor-parallel rank holds them.
struct Shapes {
  int64_t d = 0, h = 0, hs = 0, heads = 0, kv_heads = 0, vocab = 0;
  bool swiglu = false;
};

Shapes local_shapes(const nn::ModelConfig& m, int tp);

// Each kernel class's time at the profile's rates in the compute dtype.
class KernelCosts {
 public:
  KernelCosts(const ComputeRates& r, DType dtype) : r_(r), dtype_(dtype) {}

  // c[m, n] = a[m, k] b[k, n]
  double gemm(double m, double n, double k) const {
    const double dmin = std::min({m, n, k});
    const double eff = dmin / (dmin + r_.gemm_half_dim);
    return 2 * m * n * k / (r_.gemm_gflops(dtype_) * 1e9 * eff);
  }
  // Forward, and the backward's input- and weight-gradient products.
  double gemm_fwd(double n, double out, double in) const { return gemm(n, out, in); }
  double gemm_bwd(double n, double out, double in) const {
    return gemm(n, in, out) + gemm(out, in, n);
  }
  // In the compute dtype; optimizer-side classes run on f32 state whatever it is.
  double elementwise(const std::string& op_class, double elements) const {
    return elementwise(op_class, elements, dtype_);
  }
  double f32_elementwise(const std::string& op_class, double elements) const {
    return elementwise(op_class, elements, DType::f32);
  }
  double attention_fwd(double seqs, double t, double hs) const {
    return attn_factor() * seqs * (r_.attn_fwd_a_ns * t * t * hs + r_.attn_fwd_c_ns * t * hs) *
           1e-9;
  }
  double attention_bwd(double seqs, double t, double hs) const {
    return attn_factor() * seqs * (r_.attn_bwd_a_ns * t * t * hs + r_.attn_bwd_c_ns * t * hs) *
           1e-9;
  }
  double attn_factor() const { return dtype_ == DType::f32 ? 1.0 : r_.attn_bf16_factor; }
  double overhead(double ops) const { return ops * r_.op_overhead_us * 1e-6; }

 private:
  // The class's measured time per element (its ".bf16" one for a low dtype), else its bytes
  // (halved in a low dtype) at the streaming bandwidth.
  double elementwise(const std::string& op_class, double elements, DType dtype) const {
    const bool low = dtype != DType::f32;
    auto find = [&](const std::string& k) -> const double* {
      auto it = r_.elementwise_ns.find(k);
      return it == r_.elementwise_ns.end() ? nullptr : &it->second;
    };
    if (low) {
      if (const double* ns = find(op_class + ".bf16")) return *ns * 1e-9 * elements;
    }
    if (const double* ns = find(op_class)) return *ns * 1e-9 * elements;
    const double bytes = op_bytes(op_class) * (low ? 0.5 : 1.0);
    return bytes * elements / (r_.stream_gbs * 1e9);
  }

  const ComputeRates& r_;
  DType dtype_;
};

// One transformer block's work on a rank: its products, attention, memory-bound ops, what the
// checkpointing policy recomputes, and the framework's overhead.
StageWork block_work(const KernelCosts& mdl, const Shapes& s, const Layout& L, int64_t seq_len);

// Parameter elements of one tensor-parallel rank's stage.
struct StageParams {
  double blocks = 0, embedding = 0, head = 0;
  double total() const { return blocks + embedding + head; }
};

StageParams stage_params(const nn::ModelConfig& m, const Shapes& s, int stage, int pp,
                         double blocks);

// Blocks per rank for pp ranks of v chunks (balanced when they do not divide).
std::vector<double> stage_blocks(int64_t n_layer, int pp, int v);

// A pipeline's step over its stages' work (each for one micro-batch): the bubble, and the
// factor the slowest stage's parts take where ranks sharing cores let it run faster than its
// share (Note [Oversubscribed bubble]). S: ranks per core on a CPU node (1 with a core or a
// device each).
struct PipelineTime {
  double bubble = 0;
  double compute_scale = 1;
};
PipelineTime pipeline_time(const std::vector<StageWork>& stages, int slow, const Layout& L,
                           double S);

}  // namespace braid::parallel::cost
