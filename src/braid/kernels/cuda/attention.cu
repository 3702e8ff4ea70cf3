// Self-attention on CUDA, flash style, with GQA; causal, or with no mask over a separate key
// sequence (ops.h, "Self-attention, flash style"). This file checks the call, picks the path
// and takes the backward's D; the paths' kernels are in attention_generic.cu and
// attention_mma_{forward,backward}.cu (attention.cuh, attention_mma.cuh).
//   q[B,Tq,NH,HS], k[B,Tk,NKV,HS], v[B,Tk,NKV,HS], out[B,Tq,NH,HS], lse[B,NH,Tq] f32;
//   query head h reads key/value head h / (NH/NKV); scale = 1/sqrt(HS).
//
// Note [CUDA flash attention]
// No Tq x Tk matrix ever reaches global memory; scores live in registers (or shared memory)
// one tile at a time, and the softmax is taken online in f32 (running max m, sum l).
//
// Generic path (any float dtype, 1 <= HS <= 256), SIMT f32, 128 threads = 4 warps per CTA:
//   forward  grid (Tq/16, B*NH): 16 query rows per CTA (4 per warp), key tiles of 32 keys in
//            shared memory (f32); lane j of a warp scores key j of the tile against the warp's
//            rows, then each lane accumulates output dims lane, lane+32, ...
//   backward D[b,h,t] = sum_d dout*out (f32 scratch), then
//            dq:    grid (Tq/16, B*NH), as the forward: P = exp(S - lse), dP = dO V^T,
//                   dS = P (dP - D) scale, dq += dS K;
//            dk/dv: grid (Tk/32, B*NKV): the CTA owns 32 keys of one kv head and walks every
//                   query head of its group and every query tile of 16 rows, accumulating
//                   dV += P^T dO and dK += dS^T Q in shared memory (f32).
// Fast path (bf16 and f16, HS 64 or 128), FlashAttention-2 on tensor cores
//   (mma.sync m16n8k16, f32 accumulators), 128 threads = 4 warps, tiles of 64 x 64:
//   forward  grid (Tq/64, B*NH), the last query block first (causal: the longest rows start
//            first); each warp owns 16 query rows; Q, K, V tiles in shared memory;
//            S = Q K^T in registers, online softmax in registers, P is rounded to the input
//            dtype and reused from the accumulator registers as the A operand of O += P V.
//   dq       grid (Tq/64, B*NH): each warp owns 16 query rows, as the forward.
//   dk/dv    grid (Tk/64, B*NKV): each warp owns 16 keys and computes S^T = K Q^T and
//            dP^T = V dO^T, then dV += P^T dO and dK += dS^T Q over the group's query heads.
//   Fragments come from shared memory by ldmatrix (.trans for the k-major B of P V, dS K,
//   P^T dO, dS^T Q); rows are padded by 8 halves (no bank conflicts). The streamed tiles
//   (K, V; or Q, dO) are double-buffered with cp.async: tile i+1 loads while tile i computes.
// Every gradient has one writer per element (no atomics, deterministic): it is read, the f32
// sum added, and stored rounded (gradients accumulate, +=).
// Tails: rows past Tq and keys past Tk are loaded as zeros and masked (-inf scores, P = 0);
// causal tiles wholly above the diagonal are skipped; a row whose running max is still -inf
// is guarded (no inf - inf).
// BRAID_CUDA_ATTENTION=generic (read once) forces the generic path;
// set_attention_path_for_testing overrides it (0: as the environment says, 1: generic,
// 2: fast where it applies).
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "braid/kernels/checks.h"
#include "braid/kernels/cuda/attention.cuh"
#include "braid/kernels/cuda/common.cuh"
#include "braid/kernels/cuda/cuda_ops.h"

namespace braid::kernels::cuda {

void set_attention_path_for_testing(int path);

namespace {

using attention_impl::Dims;
using attention_impl::kThreads;

std::atomic<int> g_path_override{0};

bool generic_forced() {
  static const bool forced = [] {
    const char* e = std::getenv("BRAID_CUDA_ATTENTION");
    return e != nullptr && std::strcmp(e, "generic") == 0;
  }();
  const int o = g_path_override.load();
  if (o == 1) return true;
  if (o == 2) return false;
  return forced;
}

// ---------------------------------------------------------------------------------------------
// Checks (the CPU op's messages)

// The shapes were checked by the ops.h entry (cpu/attention.cpp); here only what the CUDA
// kernels add: head sizes up to 256 and grid and index limits.
Dims cuda_dims(const char* op, const Tensor& q, const Tensor& k, bool causal) {
  const int64_t B = q.size(0), Tq = q.size(1), Tk = k.size(1), NH = q.size(2), NKV = k.size(2),
                HS = q.size(3);
  BRAID_CHECK(HS >= 1 && HS <= 256, op, ": head size HS=", HS,
              " is not supported on CUDA (1 <= HS <= 256)");
  BRAID_CHECK(B * NH <= 65535 && B * NKV <= 65535 && Tq < (int64_t{1} << 30) &&
                  Tk < (int64_t{1} << 30) && B * Tq * NH * HS < (int64_t{1} << 31) &&
                  B * Tk * NKV * HS < (int64_t{1} << 31),
              op, ": q ", q.shape().str(), " and k ", k.shape().str(), " are too large");
  return Dims{
      static_cast<int>(B),   static_cast<int>(Tq), static_cast<int>(Tk),       static_cast<int>(NH),
      static_cast<int>(NKV), static_cast<int>(HS), static_cast<int>(NH / NKV), causal};
}

// ---------------------------------------------------------------------------------------------
// D[b,h,t] = sum_d dout * out, one warp per row.

template <typename T>
__global__ void __launch_bounds__(kThreads)
    rowdot_kernel(float* D, const T* dout, const T* out, Dims d) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= static_cast<int64_t>(d.B) * d.Tq * d.NH) return;
  const int h = static_cast<int>(n % d.NH);
  const int64_t bt = n / d.NH;
  const int t = static_cast<int>(bt % d.Tq), b = static_cast<int>(bt / d.Tq);
  const T* o = out + n * d.HS;
  const T* g = dout + n * d.HS;
  float s = 0.0f;
  for (int x = lane; x < d.HS; x += 32) s += ld(o + x) * ld(g + x);
  s = warp_sum(s);
  if (lane == 0) D[(static_cast<int64_t>(b) * d.NH + h) * d.Tq + t] = s;
}

bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Whether the tensor-core path takes this call.
template <typename T>
bool use_fast(const Dims& d, std::initializer_list<const void*> ptrs) {
  if constexpr (std::is_same_v<T, float>) {
    return false;
  } else {
    return (d.HS == 64 || d.HS == 128) && !generic_forced() && aligned16(ptrs);
  }
}

}  // namespace

void set_attention_path_for_testing(int path) {
  g_path_override.store(path);
}

void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       bool causal) {
  const char* op = "attention_forward";
  check_cuda(op, {&out, &lse, &q, &k, &v});
  const Dims d = cuda_dims(op, q, k, causal);
  if (d.B == 0 || d.NH == 0 || d.Tq == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.HS));
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* o = ptr<T>(out);
    float* l = ptr<float>(lse);
    const T *qp = ptr<T>(q), *kp = ptr<T>(k), *vp = ptr<T>(v);
    if constexpr (!std::is_same_v<T, float>) {
      if (use_fast<T>(d, {o, qp, kp, vp})) {
        return attention_impl::mma_forward<T>(o, l, qp, kp, vp, d, scale);
      }
    }
    attention_impl::generic_forward<T>(o, l, qp, kp, vp, d, scale);
  });
}

void attention_backward(Tensor* dq, Tensor* dk, Tensor* dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        bool causal) {
  const char* op = "attention_backward";
  check_cuda(op, {dq, dk, dv, &dout, &q, &k, &v, &out, &lse});
  const Dims d = cuda_dims(op, q, k, causal);
  if (!dq && !dk && !dv) return;
  // No queries: nothing flows to any gradient.
  if (d.B == 0 || d.NH == 0 || d.Tq == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.HS));
  const int64_t rows = static_cast<int64_t>(d.B) * d.Tq * d.NH;
  Scratch D_scratch(sizeof(float) * static_cast<size_t>(rows));
  float* D = D_scratch.as<float>();
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T *g = ptr<T>(dout), *o = ptr<T>(out), *qp = ptr<T>(q), *kp = ptr<T>(k), *vp = ptr<T>(v);
    T* dqp = dq ? ptr<T>(*dq) : nullptr;
    T* dkp = dk ? ptr<T>(*dk) : nullptr;
    T* dvp = dv ? ptr<T>(*dv) : nullptr;
    const float* l = ptr<float>(lse);
    rowdot_kernel<T>
        <<<static_cast<unsigned>(ceil_div(rows, kThreads / 32)), kThreads, 0, stream()>>>(D, g, o,
                                                                                          d);
    BRAID_CUDA_LAUNCHED(op);
    if constexpr (!std::is_same_v<T, float>) {
      if (use_fast<T>(d, {g, qp, kp, vp, dqp, dkp, dvp})) {
        return attention_impl::mma_backward<T>(dqp, dkp, dvp, g, qp, kp, vp, l, D, d, scale);
      }
    }
    attention_impl::generic_backward<T>(dqp, dkp, dvp, g, qp, kp, vp, l, D, d, scale);
  });
}

}  // namespace braid::kernels::cuda
