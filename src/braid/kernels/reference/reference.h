// Naive twins of every op in kernels/ops.h: same signatures and contracts, in
// braid::kernels::reference. Plain loops in f64 over f32 copies of the inputs, written to be
// obviously correct; they are test oracles only (attention here materialises T x T).
// Every output is computed in f64 and rounded once to its own tensor's dtype, so mixed
// dtypes (an f32 parameter gradient of bf16 inputs, Note [Parameter gradients] in ops.h)
// need nothing special.
#pragma once

#include <cstdint>

#include "braid/core/tensor.h"

namespace braid::kernels::reference {

// c[M,N] = alpha * op(a) @ op(b) + beta * c
void matmul(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
            float alpha = 1.0f, float beta = 0.0f);

void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor* bias);
void linear_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight);

void embedding_forward(Tensor& out, const Tensor& ids, const Tensor& wte, const Tensor* wpe);
void embedding_backward(Tensor* dwte, Tensor* dwpe, const Tensor& dout, const Tensor& ids);
void embedding_slice_forward(Tensor& out, const Tensor& ids, const Tensor& wte, int64_t v0);
void embedding_slice_backward(Tensor& dwte, const Tensor& dout, const Tensor& ids, int64_t v0);

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, float eps);
void layernorm_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd);
void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps);
void rmsnorm_backward(Tensor* dinp, Tensor* dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd);

void gelu_forward(Tensor& out, const Tensor& inp);
void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate = true);
void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up);
void swiglu_backward(Tensor* dgate, Tensor* dup, const Tensor& dout, const Tensor& gate,
                     const Tensor& up);

void rope_forward(Tensor& out, const Tensor& x, float theta, int64_t pos0 = 0);
void rope_backward(Tensor& dx, const Tensor& dout, float theta, int64_t pos0 = 0);
void rope_forward(Tensor& out, const Tensor& x, float theta, const Tensor& positions);
void rope_backward(Tensor& dx, const Tensor& dout, float theta, const Tensor& positions);

void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       bool causal = true);
// Recomputes the softmax from q, k, v: the gradient of this call's attention alone.
void attention_backward(Tensor* dq, Tensor* dk, Tensor* dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        bool causal = true);
void attention_merge(Tensor& out_acc, Tensor& lse_acc, const Tensor& out, const Tensor& lse,
                     int64_t t0);

double lm_head_ce_forward(Tensor& lse, int64_t* count, const Tensor& x, const Tensor& weight,
                          const Tensor& targets, int32_t ignore_index = -100);
void lm_head_ce_backward(Tensor* dx, Tensor* dweight, const Tensor& x, const Tensor& weight,
                         const Tensor& targets, const Tensor& lse, float scale,
                         int32_t ignore_index = -100);
double lm_head_ce_forward_backward(Tensor& lse, int64_t* count, Tensor* dx, Tensor* dweight,
                                   const Tensor& x, const Tensor& weight, const Tensor& targets,
                                   float scale, int32_t ignore_index = -100);
void lm_head_ce_partial_forward(Tensor& row_max, Tensor& sumexp, Tensor& target_logit,
                                const Tensor& x, const Tensor& weight, const Tensor& targets,
                                int64_t v0, int64_t valid, int32_t ignore_index = -100);
void lm_head_ce_partial_backward(Tensor* dx, Tensor* dweight, const Tensor& x, const Tensor& weight,
                                 const Tensor& targets, const Tensor& lse, float scale, int64_t v0,
                                 int64_t valid, int32_t ignore_index = -100);
void lm_head_logits(Tensor& logits, const Tensor& x, const Tensor& weight);

void copy_columns(Tensor& out, const Tensor& inp, int64_t start);
void add_columns(Tensor& dinp, const Tensor& dout, int64_t start);
void set_columns(Tensor& out, const Tensor& inp, int64_t start);

void cast(Tensor& out, const Tensor& in);

void add_forward(Tensor& out, const Tensor& a, const Tensor& b);
void axpy(Tensor& y, const Tensor& x, float alpha);
void scale(Tensor& x, float alpha);
double sum_squares(const Tensor& x);
float max_abs(const Tensor& x);
__int128 sum_squares_fixed(const Tensor& x, int shift);

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                float beta2, float eps, float weight_decay, int64_t t);
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, float lr, float momentum,
              float weight_decay, bool nesterov, bool first_step);

}  // namespace braid::kernels::reference
