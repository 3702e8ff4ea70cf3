#include "braid/parallel/estimate/scratch_estimate.h"

#include <algorithm>
#include <string>

#include "braid/core/error.h"
#include "braid/kernels/scratch_plan.h"
#include "braid/nn/tensor_parallel.h"
#include "braid/parallel/estimate/keyed_cache.h"

namespace braid::parallel {

namespace {

// One block's kernels (nn/block.cpp, attention.cpp, mlp.cpp) on tp rank 0's slices: Cl its
// heads' width, KVl its kv heads', Hl its MLP's; a row-parallel projection's bias is added
// after the all-reduce (nn/linear.cpp), outside its GEMM.
class BlockKernels {
 public:
  BlockKernels(const nn::ModelConfig& m, int64_t B, int64_t T, DType a, int tp,
               const ContextSplit& cp, kernels::ScratchPlan& plan)
      : m_(m), N_(B * T / cp.size), T_(T / cp.size), a_(a), tp_(tp), cp_(cp), plan_(plan) {
    const int64_t kv_parts = std::min<int64_t>(m.n_kv_head, tp);
    HS_ = m.head_size();
    NHl_ = m.n_head / tp;
    NKVl_ = m.n_kv_head / kv_parts;
    Cl_ = NHl_ * HS_;
    KVl_ = NKVl_ * HS_;
    Hl_ = m.d_ff / tp;
    bias_ = m.has_bias();
  }

  void norm_forward() {
    if (m_.is_gpt2())
      plan_.layernorm_forward(m_.d_model);
    else
      plan_.rmsnorm_forward(m_.d_model);
  }

  void forward() {
    const int64_t C = m_.d_model;
    norm_forward();
    if (m_.is_gpt2()) {
      plan_.linear_forward(N_, C, 3 * Cl_, bias_, a_);
    } else {
      plan_.linear_forward(N_, C, Cl_, false, a_);
      plan_.rope(T_, NHl_, HS_);
      plan_.linear_forward(N_, C, KVl_, false, a_);
      plan_.rope(T_, NKVl_, HS_);
      plan_.linear_forward(N_, C, KVl_, false, a_);
    }
    attention(false);
    plan_.linear_forward(N_, Cl_, C, row_bias(), a_);
    norm_forward();
    plan_.linear_forward(N_, C, Hl_, bias_, a_);
    if (!m_.is_gpt2()) plan_.linear_forward(N_, C, Hl_, false, a_);
    plan_.linear_forward(N_, Hl_, C, row_bias(), a_);
  }

  void backward() {
    const int64_t C = m_.d_model;
    if (bias_ && !row_bias()) plan_.bias_backward(C);
    plan_.linear_backward(N_, Hl_, C, row_bias(), a_);
    plan_.linear_backward(N_, C, Hl_, bias_, a_);
    if (!m_.is_gpt2()) plan_.linear_backward(N_, C, Hl_, false, a_);
    plan_.norm_backward(C);
    if (bias_ && !row_bias()) plan_.bias_backward(C);
    plan_.linear_backward(N_, Cl_, C, row_bias(), a_);
    attention(true);
    if (m_.is_gpt2()) {
      plan_.linear_backward(N_, C, 3 * Cl_, bias_, a_);
    } else {
      plan_.linear_backward(N_, C, KVl_, false, a_);
      plan_.rope(T_, NKVl_, HS_);
      plan_.linear_backward(N_, C, KVl_, false, a_);
      plan_.rope(T_, NHl_, HS_);
      plan_.linear_backward(N_, C, Cl_, false, a_);
    }
    plan_.norm_backward(C);
  }

 private:
  bool row_bias() const { return bias_ && tp_ == 1; }

  // The rank's T_ tokens attend: whole sequences (Ulysses: cp x T_ tokens of its heads), or ring
  // attention's blocks (Note [Ring attention]): its own causally, then each other rank's as
  // T_ x T_/2 (earlier ranks: their early half) or T_/2 x T_ (later: this rank's late queries).
  void attention(bool backward) {
    auto run = [&](int64_t Tq, int64_t Tk) {
      if (backward)
        plan_.attention_backward(Tq, Tk, HS_, a_);
      else
        plan_.attention_forward(Tq, Tk, HS_, a_);
    };
    if (cp_.size == 1 || cp_.ulysses) {
      const int64_t T = T_ * cp_.size;
      run(T, T);
      return;
    }
    run(T_, T_);
    run(T_, T_ / 2);
    run(T_ / 2, T_);
  }

  const nn::ModelConfig& m_;
  int64_t N_, T_;
  DType a_;
  int tp_;
  ContextSplit cp_;
  kernels::ScratchPlan& plan_;
  int64_t HS_ = 0, NHl_ = 0, NKVl_ = 0, Cl_ = 0, KVl_ = 0, Hl_ = 0;
  bool bias_ = false;
};

}  // namespace

namespace {

int64_t replay_scratch(const nn::ModelConfig& model, int64_t micro_batch_size, int64_t seq_len,
                       DType compute, int tp, const ActivationSpan& span, int threads,
                       const ContextSplit& cp) {
  kernels::ScratchPlan plan(threads);
  BlockKernels block(model, micro_batch_size, seq_len, compute, tp, cp, plan);
  const int64_t end = span.end < 0 ? model.n_layer : span.end;
  const int64_t N = micro_batch_size * seq_len / cp.size, C = model.d_model;
  // The LM head on tp rank 0's vocabulary rows (Note [Vocab-parallel cross-entropy]).
  const int64_t Vl = nn::padded_vocab(model.vocab_size, tp) / tp;
  const int64_t valid = std::min(Vl, model.vocab_size);
  if (end > span.begin) block.forward();  // every block asks the same: one is enough
  if (span.last) {
    block.norm_forward();
    plan.lm_head_ce(N, C, Vl, valid, false, compute);
    plan.lm_head_ce(N, C, Vl, valid, true, compute);
    plan.norm_backward(C);
  }
  if (end > span.begin) block.backward();
  // Under context parallelism GPT-2's position rows are a lookup of their own (nn/embedding.cpp).
  if (span.first) plan.embedding_backward(C, model.is_gpt2() && cp.size == 1);
  return plan.bytes();
}

}  // namespace

// Asking the GEMM library for its work memory is most of the cost (oneDNN builds a primitive
// descriptor per shape), and the planner asks for the same replay thousands of times: kept by
// what determines it (as Note [Unit cache], memory_estimate.cpp).
int64_t estimate_scratch(const nn::ModelConfig& model, int64_t micro_batch_size, int64_t seq_len,
                         DType compute, int tp, const ActivationSpan& span, int threads,
                         const ContextSplit& cp) {
  BRAID_CHECK(threads >= 1, "estimate-memory: threads per rank must be >= 1, got ", threads);
  const int64_t end = span.end < 0 ? model.n_layer : span.end;
  std::string key = model.shape_key() + model.activation_checkpointing.str();
  for (int64_t v : {micro_batch_size, seq_len, int64_t(compute), int64_t(tp), int64_t(threads),
                    int64_t(end > span.begin), int64_t(span.first), int64_t(span.last),
                    int64_t(cp.size), int64_t(cp.ulysses)}) {
    key += "|" + std::to_string(v);
  }
  static KeyedCache<int64_t> cache;
  return cache.get(key, [&] {
    return replay_scratch(model, micro_batch_size, seq_len, compute, tp, span, threads, cp);
  });
}

}  // namespace braid::parallel
