// The kernel API: every op braid's layers run, on Tensors, dispatched on device and dtype.
// cpu/ holds the fast implementations (oneDNN/BLAS GEMM + fused OpenMP loops), reference/
// the naive twins that tests compare against (kernels_test.cpp, one harness for all ops).
//
// Shape letters: B batch, T sequence, C channels, V vocabulary, NH query heads, NKV key/value
// heads (GQA: NH % NKV == 0), HS head size, H hidden width of the MLP, N rows (= B*T).
//
// Conventions:
// - Inputs may be f32, bf16 or f16 unless noted (bf16 and f16 are computed in f32, stored
//   rounded to nearest even; an f16 result beyond 65504 is stored as inf, which loss scaling
//   relies on); token ids and targets are i32. Outputs have the dtype of their main input.
// - Forward kernels overwrite their outputs. Backward kernels ACCUMULATE (+=) into every
//   gradient they are given, activation gradients included; a null pointer means "not
//   wanted". The autograd engine zeroes gradient buffers once when it allocates them.
// - Note [Parameter gradients]: a gradient of a parameter (dweight, dbias, dwte, dwpe) has
//   the dtype of the op's inputs or f32, each chosen independently. With bf16 or f16 inputs
//   and an f32 gradient (mixed precision: f32 master weights and gradients, low-precision
//   compute) the kernel accumulates in f32 straight into the gradient, never rounding it to
//   the low dtype on the way (GEMMs write into it with beta = 1). Activation gradients (dinp, dx,
//   dq, ...) have the dtype of their input. Same-dtype calls are unaffected.
// - Work is parallelised with OpenMP over the calling thread's omp_get_max_threads().
// - Bad input (shape mismatch, token id out of range) throws braid::Error naming the
//   argument, the offending index and the numbers.
#pragma once

#include <cstdint>
#include <vector>

#include "braid/core/tensor.h"

namespace braid::kernels {

// ---- GEMM ----
// c[M,N] = alpha * op(a) @ op(b) + beta * c; op(x) = x^T when trans_x. 2-D, row-major.
// a, b, c share one dtype (f32, bf16 or f16; the low ones accumulate in f32, and f16 runs as an
// f32 GEMM on widened copies: Note [f16 GEMM], cpu/gemm_f16.cpp).
void matmul(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
            float alpha = 1.0f, float beta = 0.0f);
// Which library does GEMM ("onednn", "openblas", ...) and its measured peak in GFLOP/s for
// an n x n x n f32 product on the calling thread's OpenMP threads (for MFU reports).
const char* gemm_backend_name();
// On a device (a GPU: measure with n = 8192 to reach its peak) the products run there.
double measure_gemm_peak_gflops(int n = 1024, DType dtype = DType::f32,
                                Device device = Device::cpu());

// ---- Linear ----
// out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC] (bias may be null)
void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor* bias);
// dinp[N,C] += dout @ weight; dweight[OC,C] += dout^T @ inp; dbias[OC] += sum_n dout
void linear_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight);
// out[N,C] = x[N,C] + bias[C] (a bias added after a tensor-parallel reduction);
// dbias[C] += sum_n dout[n]
void bias_add_forward(Tensor& out, const Tensor& x, const Tensor& bias);
void bias_add_backward(Tensor& dbias, const Tensor& dout);

// ---- Embedding ----
// out[B,T,C] = wte[ids[b,t]] (+ wpe[t] when wpe is given; wpe is [maxT,C], T <= maxT)
void embedding_forward(Tensor& out, const Tensor& ids, const Tensor& wte, const Tensor* wpe);
void embedding_backward(Tensor* dwte, Tensor* dwpe, const Tensor& dout, const Tensor& ids);
// Vocab-parallel (Megatron): wte[Vl,C] holds rows [v0, v0+Vl) of the table; ids[B,T] are global
// (>= 0, no upper bound checked: the caller checks the global vocabulary). out[B,T,C] gets
// wte[id - v0] for ids in [v0, v0+Vl) and zero rows for the others (another rank holds them;
// the caller sums over ranks).
void embedding_slice_forward(Tensor& out, const Tensor& ids, const Tensor& wte, int64_t v0);
// dwte[id - v0] += dout rows for ids in [v0, v0+Vl), others skipped; same accumulation order as
// embedding_backward, so the slices of the full dwte match it bit for bit.
void embedding_slice_backward(Tensor& dwte, const Tensor& dout, const Tensor& ids, int64_t v0);

// ---- Normalisation (over the last dimension C; inp viewed as [N,C]) ----
// mean[N], rstd[N] are f32 saved for backward.
void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, float eps);
void layernorm_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd);
// out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps)
void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps);
void rmsnorm_backward(Tensor* dinp, Tensor* dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd);

// ---- Activations ----
// GELU, tanh approximation (HF "gelu_new" / "gelu_pytorch_tanh"), element-wise.
void gelu_forward(Tensor& out, const Tensor& inp);
// dinp += gelu'(inp) * dout; accumulate = false sets dinp instead (its old contents, which may be
// uninitialised, are neither read nor kept: a gradient buffer just allocated).
void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate = true);
// out[N,H] = silu(gate) * up
void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up);
void swiglu_backward(Tensor* dgate, Tensor* dup, const Tensor& dout, const Tensor& gate,
                     const Tensor& up);

// ---- Rotary position embedding (HF LLaMA convention: rotate_half over the two halves of
// each head, inv_freq[i] = theta^(-2i/HS), angle = float(position) * inv_freq[i]) ----
// x[B,T,NH,HS] -> out (may alias x). Row t is at position pos0 + t, or positions[t] with
// positions[T] i32 (>= 0, any order: a sequence shard's own positions, e.g. the two runs of a
// zig-zag context-parallel split). Equal positions give bit-identical results either way.
void rope_forward(Tensor& out, const Tensor& x, float theta, int64_t pos0 = 0);
void rope_backward(Tensor& dx, const Tensor& dout, float theta, int64_t pos0 = 0);
void rope_forward(Tensor& out, const Tensor& x, float theta, const Tensor& positions);
void rope_backward(Tensor& dx, const Tensor& dout, float theta, const Tensor& positions);

// ---- Self-attention, flash style (never stores a Tq x Tk matrix) ----
// q[B,Tq,NH,HS], k[B,Tk,NKV,HS], v[B,Tk,NKV,HS] -> out[B,Tq,NH,HS], lse[B,NH,Tq] (f32, the
// log-sum-exp of each softmax row, saved for backward). scale = 1/sqrt(HS).
// causal: query t sees keys 0..t (Tq == Tk). Not causal: every query sees all Tk >= 1 keys
// (any Tq, Tk).
// The backward recomputes P = exp(q k^T * scale - lse) from the lse it is given and uses
// D = rowsum(dout * out) from the out it is given: dv += P^T dout, dS = P (dout v^T - D) *
// scale, dq += dS k, dk += dS^T q.
// Note [Attention over key blocks]: so with out and lse those of a larger attention whose keys
// are split into blocks (ring attention: a block per context-parallel rank, causal on the
// diagonal block and not causal on blocks wholly before it), one call per block with that
// block's k, v and the FINAL out and lse gives exactly this block's share: dq summed over the
// blocks is the full dq, and each block's dk, dv are the full gradients of its keys. The
// forward's (out_i, lse_i) of the blocks merge as lse = log sum_i exp(lse_i), out = sum_i
// out_i exp(lse_i - lse).
void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       bool causal = true);
void attention_backward(Tensor* dq, Tensor* dk, Tensor* dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        bool causal = true);
// Causal attention over a packed projection (Note [Packed qkv], cpu/attention.cpp): qkv[B,T,W]
// holds each row's q (NH heads), k and v (NKV heads each) side by side, W = (NH + 2 NKV) HS, as
// GPT-2's fused projection makes them; out[B,T,NH,HS], lse[B,NH,T] f32 as attention_forward's.
// The results are attention_forward's and attention_backward's on the column slices, bit for
// bit. The backward writes dqkv[B,T,W] whole: added into (accumulate) or set. CPU (and the
// simulated device) only; a real device's model splits q, k and v instead.
void attention_forward_qkv(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t n_head,
                           int64_t n_kv_head);
void attention_backward_qkv(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                            const Tensor& lse, int64_t n_head, int64_t n_kv_head, bool accumulate);
// The merge of Note [Attention over key blocks], one block into running f32 accumulators:
// out_acc[B,T,NH,HS] and lse_acc[B,NH,T] absorb a block's out[B,n,NH,HS] (any float dtype) and
// lse[B,NH,n] (f32) at rows [t0, t0+n):
//   l = log(e^lse_acc + e^lse), out_acc = out_acc e^(lse_acc - l) + out e^(lse - l), lse_acc = l
// (max-shifted). An accumulator row at lse_acc = -inf takes the block as it is.
void attention_merge(Tensor& out_acc, Tensor& lse_acc, const Tensor& out, const Tensor& lse,
                     int64_t t0);

// ---- LM head fused with softmax cross-entropy, in row chunks (never B*T*V logits) ----
// x[N,C], weight[V,C], targets[N] i32 (ignore_index rows contribute nothing).
// Returns the summed loss over counted rows; lse[N] (f32) saved for backward; *count gets
// the number of counted rows.
double lm_head_ce_forward(Tensor& lse, int64_t* count, const Tensor& x, const Tensor& weight,
                          const Tensor& targets, int32_t ignore_index = -100);
// dx += scale * dL/dx, dweight += scale * dL/dweight, where L is the summed loss.
void lm_head_ce_backward(Tensor* dx, Tensor* dweight, const Tensor& x, const Tensor& weight,
                         const Tensor& targets, const Tensor& lse, float scale,
                         int32_t ignore_index = -100);
// Forward and backward in one pass, for callers that know the gradient scale up front (e.g.
// scale = dloss / count with count from the targets): returns the summed loss, fills lse and
// *count, and accumulates dx, dweight exactly as lm_head_ce_backward would. It skips the
// backward's logits recompute (one of the four lm-head GEMMs).
double lm_head_ce_forward_backward(Tensor& lse, int64_t* count, Tensor* dx, Tensor* dweight,
                                   const Tensor& x, const Tensor& weight, const Tensor& targets,
                                   float scale, int32_t ignore_index = -100);
// Vocab-parallel pieces (Megatron; Note [Vocab-parallel cross-entropy], cpu/cross_entropy.cpp):
// weight[Vl,C] holds vocabulary rows [v0, v0+Vl), of which the first `valid` (0..Vl) are real;
// the rest is padding, left out of every max and sum and given no gradient. targets[N] are
// global ids: t == ignore_index or t >= 0 (the global upper bound is the caller's check).
// Per row n over the real local logits z = x[n] @ weight[0:valid]^T, all three f32 [N]:
//   row_max[n] = max z, sumexp[n] = sum exp(z - row_max[n]) (-inf and 0 when valid == 0),
//   target_logit[n] = z[t - v0] when v0 <= t < v0 + valid, else 0.
// Ignored rows get the same row_max and sumexp as any other row and target_logit 0, so the
// combined lse below equals lm_head_ce_forward's lse for every row; the caller leaves ignored
// rows out of the loss and the count. Combine over the ranks: M = all_reduce max(row_max),
// S = all_reduce sum(sumexp * exp(row_max - M)), lse = M + log S,
// loss_n = lse - all_reduce sum(target_logit).
void lm_head_ce_partial_forward(Tensor& row_max, Tensor& sumexp, Tensor& target_logit,
                                const Tensor& x, const Tensor& weight, const Tensor& targets,
                                int64_t v0, int64_t valid, int32_t ignore_index = -100);
// This slice's part of the gradient of scale * sum_n loss_n, given the global lse[N] (f32):
// dlogits = exp(z - lse) * scale on real columns, minus scale at a local target's column; 0 on
// padding columns and ignored rows. dx[N,C] += dlogits @ weight (a partial sum: the caller
// all-reduces dx), dweight[Vl,C] += dlogits^T @ x (padding rows untouched).
void lm_head_ce_partial_backward(Tensor* dx, Tensor* dweight, const Tensor& x, const Tensor& weight,
                                 const Tensor& targets, const Tensor& lse, float scale, int64_t v0,
                                 int64_t valid, int32_t ignore_index = -100);
// Logits for generation: logits[N,V] = x @ weight^T (f32 out).
void lm_head_logits(Tensor& logits, const Tensor& x, const Tensor& weight);

// ---- Column slices (GPT-2's fused qkv projection) ----
// out[N,W] = inp[N, start:start+W]
void copy_columns(Tensor& out, const Tensor& inp, int64_t start);
// dinp[N, start:start+W] += dout[N,W]
void add_columns(Tensor& dinp, const Tensor& dout, int64_t start);
// out[N, start:start+W] = inp[N,W] (the other columns untouched)
void set_columns(Tensor& out, const Tensor& inp, int64_t start);

// ---- Dtype conversion ----
// out = in converted to out's dtype (f32, bf16 or f16 each way; equal numel, any shapes),
// bit-identical to core/dtype.h's scalar conversions: round to nearest even, NaN stays NaN,
// f16 overflow gives inf.
void cast(Tensor& out, const Tensor& in);

// ---- Element-wise helpers ----
void add_forward(Tensor& out, const Tensor& a, const Tensor& b);  // out = a + b
void axpy(Tensor& y, const Tensor& x, float alpha);  // y += alpha * x (dtypes may differ)
void scale(Tensor& x, float alpha);                  // x *= alpha
// Each tensor of xs *= alpha (undefined and empty ones skipped): the calls one by one, as one
// launch on a GPU (Note [Multi-tensor launches]). The tensors must all be on one device.
void scale(std::vector<Tensor>& xs, float alpha);
double sum_squares(const Tensor& x);  // sum x^2 in f64 (for global grad norms)

// ---- Exact sums of squares (Note [Exact norm], cpu/exact_norm.cpp) ----
// max |x_i| (0 when empty); +inf when any element is inf or nan.
float max_abs(const Tensor& x);
// sum_i floor(x_i^2 * 2^shift), exactly. Needs every x_i^2 * 2^shift < 2^55: take shift from
// the max |x| over every piece that will be summed (optim::exact_norm_shift).
__int128 sum_squares_fixed(const Tensor& x, int shift);
// The sums at several shifts, sums[k] = sum_squares_fixed(x, shifts[k]) for k < count, in one
// pass over x on the CPU (each term the same bits as the call's, so the same integers); on a
// GPU, one call per shift.
void sum_squares_fixed(const Tensor& x, const int* shifts, int count, __int128* sums);
// The same over several tensors (undefined and empty ones skipped) as one reduction: equal to
// the max / the sum of the calls one by one, with one round trip to the host on a GPU instead
// of one per tensor. The tensors must all be on one device.
float max_abs(const std::vector<Tensor>& xs);
__int128 sum_squares_fixed(const std::vector<Tensor>& xs, int shift);

// ---- Optimiser steps, fused over flat buffers (param f32; grad f32, bf16 or f16) ----
// AdamW with decoupled weight decay and bias correction at step t (1-based):
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (mhat / (sqrt(vhat) + eps) + wd p)
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                float beta2, float eps, float weight_decay, int64_t t);
// The same, also writing the updated param rounded to compute's dtype (bf16 or f16) into
// compute: the bits of cast(compute, param) after the step, in the step's one pass.
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                float beta2, float eps, float weight_decay, int64_t t, Tensor& compute);
// One slice of an AdamW step over several: the tensors of adamw_step (compute may be null: with
// it, the variant that writes the rounded masters) and the slice's group's lr and weight decay.
struct AdamWSlice {
  Tensor* param;
  const Tensor* grad;
  Tensor* m;
  Tensor* v;
  Tensor* compute;
  float lr, weight_decay;
};
// adamw_step for each slice, bit for bit: the calls one by one, as one launch per many slices
// on a GPU (Note [Multi-tensor launches]). The tensors must all be on one device.
void adamw_step(const std::vector<AdamWSlice>& slices, float beta1, float beta2, float eps,
                int64_t t);
// SGD: g' = g + wd p; buf = momentum buf + g' (first step buf = g'); p -= lr buf
// (nesterov: p -= lr (g' + momentum buf)). momentum_buf may be undefined when momentum == 0.
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, float lr, float momentum,
              float weight_decay, bool nesterov, bool first_step);

}  // namespace braid::kernels
