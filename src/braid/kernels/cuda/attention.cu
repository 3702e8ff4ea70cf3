// Self-attention on CUDA, flash style, with GQA; causal, or with no mask over a separate key
// sequence (ops.h, "Self-attention, flash style").
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
#include "braid/kernels/cuda/common.cuh"
#include "braid/kernels/cuda/cuda_ops.h"

namespace braid::kernels::cuda {

void set_attention_path_for_testing(int path);

namespace {

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

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kThreads = 128;

struct Dims {
  int B, Tq, Tk, NH, NKV, HS, group;
  bool causal;
};

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

template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    BRAID_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)),
                     "attention: cudaFuncSetAttribute");
}

// Offsets of row t of head h (of n heads) in batch b of a [B,T,n,HS] tensor.
__device__ __forceinline__ int64_t row_off(int b, int t, int T, int h, int n, int HS) {
  return ((static_cast<int64_t>(b) * T + t) * n + h) * HS;
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

// ---------------------------------------------------------------------------------------------
// Generic path

constexpr int kGQ = 16;  // query rows per CTA (4 per warp)
constexpr int kGK = 32;  // keys per tile (one per lane)

// dst[rows][ld] (f32) = rows [t0, t0+rows) of head h of src (zero past T), times mul.
template <typename T>
__device__ void load_rows_f32(float* dst, int ld_dst, const T* src, int b, int t0, int rows, int T_,
                              int h, int n, int HS, float mul) {
  for (int e = threadIdx.x; e < rows * HS; e += blockDim.x) {
    const int r = e / HS, x = e % HS, t = t0 + r;
    dst[r * ld_dst + x] = t < T_ ? ld(src + row_off(b, t, T_, h, n, HS) + x) * mul : 0.0f;
  }
}

template <typename T, int NC>
__global__ void __launch_bounds__(kThreads)
    generic_forward_kernel(T* out, float* lse, const T* q, const T* k, const T* v, Dims d,
                           float scale) {
  extern __shared__ float smem[];
  const int HS = d.HS;
  float* Qs = smem;                 // [kGQ][HS], scaled
  float* Ks = Qs + kGQ * HS;        // [kGK][HS+1]
  float* Vs = Ks + kGK * (HS + 1);  // [kGK][HS]
  const int b = blockIdx.y / d.NH, h = blockIdx.y % d.NH, kvh = h / d.group;
  const int q0 = blockIdx.x * kGQ, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_rows_f32(Qs, HS, q, b, q0, kGQ, d.Tq, h, d.NH, HS, scale);
  float m[4], l[4], o[4][NC];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY, l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) o[i][c] = 0.0f;
  }
  const int key_end = d.causal ? min(d.Tk, q0 + kGQ) : d.Tk;
  for (int j0 = 0; j0 < key_end; j0 += kGK) {
    __syncthreads();
    load_rows_f32(Ks, HS + 1, k, b, j0, kGK, d.Tk, kvh, d.NKV, HS, 1.0f);
    load_rows_f32(Vs, HS, v, b, j0, kGK, d.Tk, kvh, d.NKV, HS, 1.0f);
    __syncthreads();
    const int key = j0 + lane, nj = min(kGK, d.Tk - j0);
    float p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = warp * 4 + i, t = q0 + r;
      float s = 0.0f;
      for (int x = 0; x < HS; ++x) s += Qs[r * HS + x] * Ks[lane * (HS + 1) + x];
      const bool valid = key < d.Tk && (!d.causal || key <= t);
      s = valid ? s : -INFINITY;
      const float m_new = fmaxf(m[i], warp_max(s));
      const float mu = m_new == -INFINITY ? 0.0f : m_new;
      p[i] = expf(s - mu);
      const float alpha = expf(m[i] - mu);
      l[i] = l[i] * alpha + warp_sum(p[i]);
      m[i] = m_new;
#pragma unroll
      for (int c = 0; c < NC; ++c) o[i][c] *= alpha;
    }
    for (int j = 0; j < nj; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float pj = __shfl_sync(0xffffffffu, p[i], j);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const int x = lane + 32 * c;
          if (x < HS) o[i][c] += pj * Vs[j * HS + x];
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = q0 + warp * 4 + i;
    if (t >= d.Tq) continue;
    const float inv = 1.0f / l[i];
    T* dst = out + row_off(b, t, d.Tq, h, d.NH, HS);
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int x = lane + 32 * c;
      if (x < HS) st(dst + x, o[i][c] * inv);
    }
    if (lane == 0) lse[(static_cast<int64_t>(b) * d.NH + h) * d.Tq + t] = m[i] + logf(l[i]);
  }
}

template <typename T, int NC>
__global__ void __launch_bounds__(kThreads)
    generic_dq_kernel(T* dq, const T* dout, const T* q, const T* k, const T* v, const float* lse,
                      const float* D, Dims d, float scale) {
  extern __shared__ float smem[];
  const int HS = d.HS;
  float* Qs = smem;                 // [kGQ][HS]
  float* dOs = Qs + kGQ * HS;       // [kGQ][HS]
  float* Ks = dOs + kGQ * HS;       // [kGK][HS+1]
  float* Vs = Ks + kGK * (HS + 1);  // [kGK][HS+1]
  const int b = blockIdx.y / d.NH, h = blockIdx.y % d.NH, kvh = h / d.group;
  const int q0 = blockIdx.x * kGQ, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_rows_f32(Qs, HS, q, b, q0, kGQ, d.Tq, h, d.NH, HS, 1.0f);
  load_rows_f32(dOs, HS, dout, b, q0, kGQ, d.Tq, h, d.NH, HS, 1.0f);
  const int64_t stat = (static_cast<int64_t>(b) * d.NH + h) * d.Tq;
  float row_lse[4], row_D[4], acc[4][NC];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = q0 + warp * 4 + i;
    row_lse[i] = t < d.Tq ? lse[stat + t] : 0.0f;
    row_D[i] = t < d.Tq ? D[stat + t] : 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[i][c] = 0.0f;
  }
  const int key_end = d.causal ? min(d.Tk, q0 + kGQ) : d.Tk;
  for (int j0 = 0; j0 < key_end; j0 += kGK) {
    __syncthreads();
    load_rows_f32(Ks, HS + 1, k, b, j0, kGK, d.Tk, kvh, d.NKV, HS, 1.0f);
    load_rows_f32(Vs, HS + 1, v, b, j0, kGK, d.Tk, kvh, d.NKV, HS, 1.0f);
    __syncthreads();
    const int key = j0 + lane, nj = min(kGK, d.Tk - j0);
    float ds[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = warp * 4 + i, t = q0 + r;
      float s = 0.0f, dp = 0.0f;
      for (int x = 0; x < HS; ++x) {
        s += Qs[r * HS + x] * Ks[lane * (HS + 1) + x];
        dp += dOs[r * HS + x] * Vs[lane * (HS + 1) + x];
      }
      const bool valid = t < d.Tq && key < d.Tk && (!d.causal || key <= t);
      const float p = valid ? expf(s * scale - row_lse[i]) : 0.0f;
      ds[i] = p * (dp - row_D[i]) * scale;
    }
    for (int j = 0; j < nj; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float dsj = __shfl_sync(0xffffffffu, ds[i], j);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const int x = lane + 32 * c;
          if (x < HS) acc[i][c] += dsj * Ks[j * (HS + 1) + x];
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = q0 + warp * 4 + i;
    if (t >= d.Tq) continue;
    T* dst = dq + row_off(b, t, d.Tq, h, d.NH, HS);
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int x = lane + 32 * c;
      if (x < HS) st(dst + x, ld(dst + x) + acc[i][c]);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    generic_dkdv_kernel(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const float* lse, const float* D, Dims d, float scale) {
  extern __shared__ float smem[];
  const int HS = d.HS;
  float* Ks = smem;                    // [kGK][HS+1]
  float* Vs = Ks + kGK * (HS + 1);     // [kGK][HS+1]
  float* Qs = Vs + kGK * (HS + 1);     // [kGQ][HS]
  float* dOs = Qs + kGQ * HS;          // [kGQ][HS]
  float* Ps = dOs + kGQ * HS;          // [kGQ][kGK+1]
  float* dSs = Ps + kGQ * (kGK + 1);   // [kGQ][kGK+1]
  float* dKa = dSs + kGQ * (kGK + 1);  // [kGK][HS]
  float* dVa = dKa + kGK * HS;         // [kGK][HS]
  float* lse_s = dVa + kGK * HS;       // [kGQ]
  float* D_s = lse_s + kGQ;            // [kGQ]
  const int b = blockIdx.y / d.NKV, kvh = blockIdx.y % d.NKV;
  const int j0 = blockIdx.x * kGK, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_rows_f32(Ks, HS + 1, k, b, j0, kGK, d.Tk, kvh, d.NKV, HS, 1.0f);
  load_rows_f32(Vs, HS + 1, v, b, j0, kGK, d.Tk, kvh, d.NKV, HS, 1.0f);
  for (int e = threadIdx.x; e < kGK * HS; e += blockDim.x) dKa[e] = 0.0f, dVa[e] = 0.0f;
  const int key = j0 + lane;
  const int i_begin = d.causal ? (j0 / kGQ) * kGQ : 0;
  for (int hh = 0; hh < d.group; ++hh) {
    const int h = kvh * d.group + hh;
    const int64_t stat = (static_cast<int64_t>(b) * d.NH + h) * d.Tq;
    for (int i0 = i_begin; i0 < d.Tq; i0 += kGQ) {
      __syncthreads();
      load_rows_f32(Qs, HS, q, b, i0, kGQ, d.Tq, h, d.NH, HS, 1.0f);
      load_rows_f32(dOs, HS, dout, b, i0, kGQ, d.Tq, h, d.NH, HS, 1.0f);
      if (threadIdx.x < kGQ) {
        const int t = i0 + threadIdx.x;
        lse_s[threadIdx.x] = t < d.Tq ? lse[stat + t] : 0.0f;
        D_s[threadIdx.x] = t < d.Tq ? D[stat + t] : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = warp * 4 + i, t = i0 + r;
        float s = 0.0f, dp = 0.0f;
        for (int x = 0; x < HS; ++x) {
          s += Qs[r * HS + x] * Ks[lane * (HS + 1) + x];
          dp += dOs[r * HS + x] * Vs[lane * (HS + 1) + x];
        }
        const bool valid = t < d.Tq && key < d.Tk && (!d.causal || key <= t);
        const float p = valid ? expf(s * scale - lse_s[r]) : 0.0f;
        Ps[r * (kGK + 1) + lane] = p;
        dSs[r * (kGK + 1) + lane] = p * (dp - D_s[r]) * scale;
      }
      __syncthreads();
      for (int e = threadIdx.x; e < kGK * HS; e += blockDim.x) {
        const int j = e / HS, x = e % HS;
        float av = 0.0f, ak = 0.0f;
#pragma unroll
        for (int r = 0; r < kGQ; ++r) {
          av += Ps[r * (kGK + 1) + j] * dOs[r * HS + x];
          ak += dSs[r * (kGK + 1) + j] * Qs[r * HS + x];
        }
        dVa[e] += av;
        dKa[e] += ak;
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kGK * HS; e += blockDim.x) {
    const int j = e / HS, x = e % HS;
    if (j0 + j >= d.Tk) continue;
    const int64_t off = row_off(b, j0 + j, d.Tk, kvh, d.NKV, HS) + x;
    if (dk) st(dk + off, ld(dk + off) + dKa[e]);
    if (dv) st(dv + off, ld(dv + off) + dVa[e]);
  }
}

template <typename T, int NC>
void generic_forward(T* out, float* lse, const T* q, const T* k, const T* v, const Dims& d,
                     float scale) {
  const size_t smem = sizeof(float) * (kGQ * d.HS + kGK * (d.HS + 1) + kGK * d.HS);
  auto kernel = generic_forward_kernel<T, NC>;
  allow_smem(kernel, smem);
  dim3 grid(static_cast<unsigned>(ceil_div(d.Tq, kGQ)), static_cast<unsigned>(d.B * d.NH));
  kernel<<<grid, kThreads, smem, stream()>>>(out, lse, q, k, v, d, scale);
  BRAID_CUDA_LAUNCHED("attention_forward");
}

template <typename T, int NC>
void generic_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                      const float* lse, const float* D, const Dims& d, float scale) {
  if (dq) {
    const size_t smem = sizeof(float) * (2 * kGQ * d.HS + 2 * kGK * (d.HS + 1));
    auto kernel = generic_dq_kernel<T, NC>;
    allow_smem(kernel, smem);
    dim3 grid(static_cast<unsigned>(ceil_div(d.Tq, kGQ)), static_cast<unsigned>(d.B * d.NH));
    kernel<<<grid, kThreads, smem, stream()>>>(dq, dout, q, k, v, lse, D, d, scale);
    BRAID_CUDA_LAUNCHED("attention_backward");
  }
  if ((dk || dv) && d.Tk > 0) {
    const size_t smem = sizeof(float) * (2 * kGK * (d.HS + 1) + 2 * kGQ * d.HS +
                                         2 * kGQ * (kGK + 1) + 2 * kGK * d.HS + 2 * kGQ);
    auto kernel = generic_dkdv_kernel<T>;
    allow_smem(kernel, smem);
    dim3 grid(static_cast<unsigned>(ceil_div(d.Tk, kGK)), static_cast<unsigned>(d.B * d.NKV));
    kernel<<<grid, kThreads, smem, stream()>>>(dk, dv, dout, q, k, v, lse, D, d, scale);
    BRAID_CUDA_LAUNCHED("attention_backward");
  }
}

// Calls fn(std::integral_constant<int, NC>) with NC = 32-column chunks covering HS.
template <typename Fn>
void dispatch_chunks(int HS, Fn&& fn) {
  if (HS <= 32) return fn(std::integral_constant<int, 1>{});
  if (HS <= 64) return fn(std::integral_constant<int, 2>{});
  if (HS <= 128) return fn(std::integral_constant<int, 4>{});
  return fn(std::integral_constant<int, 8>{});
}

// ---------------------------------------------------------------------------------------------
// Fast path: tensor cores (mma.sync m16n8k16, bf16/f16 inputs, f32 accumulators).
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), g = lane / 4, c = lane % 4:
//   A 16x16 row-major: a[0] = A[g][2c..2c+1], a[1] = A[g+8][2c..], a[2] = A[g][2c+8..],
//                      a[3] = A[g+8][2c+8..] (two 16-bit values per register, low = lower col)
//   B 16x8 (k x n):    b[0] = B[2c..2c+1][g], b[1] = B[2c+8..2c+9][g] (low = lower k)
//   C 16x8 f32:        c[0..1] = C[g][2c..2c+1], c[2..3] = C[g+8][2c..2c+1]
// So the accumulators of two adjacent 8-column blocks of C are, once packed, the A fragment
// of the 16 columns they cover (the FlashAttention-2 register reuse of P and dS).

constexpr int kFB = 64;  // query rows and keys per tile (16 per warp)

template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T, lo in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, bf16_t>) {
    __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
    std::memcpy(&r, &p, 4);
  } else {
    __half2 p = __floats2half2_rn(lo, hi);
    std::memcpy(&r, &p, 4);
  }
  return r;
}
// dst[kFB][HS+8] = rows [t0, t0+kFB) of head h of src (zero past T), 16 bytes at a time by
// cp.async (zero-filled past T: a source size of 0 reads nothing); part of the calling
// thread's next cp.async group.
template <typename T, int HS>
__device__ __forceinline__ void load_tile_async(T* dst, const T* src, int b, int t0, int T_, int h,
                                                int n) {
  constexpr int kLd = HS + 8, kPer = HS / 8;
  for (int e = threadIdx.x; e < kFB * kPer; e += kThreads) {
    const int r = e / kPer, x = (e % kPer) * 8, t = t0 + r;
    const T* from = t < T_ ? src + row_off(b, t, T_, h, n, HS) + x : src;
    const auto to = static_cast<uint32_t>(__cvta_generic_to_shared(dst + r * kLd + x));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(from),
                 "r"(t < T_ ? 16 : 0)
                 : "memory");
  }
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most n of this thread's cp.async groups are pending.
template <int n>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory");
}

// Four 8x8 matrices of 16-bit values from shared memory (ldmatrix): lanes 8i..8i+7 give the
// row addresses of matrix i, and r[i] gets this lane's fragment of it: row lane/4, columns
// 2(lane%4) and 2(lane%4)+1 (trans: column lane/4, rows 2(lane%4) and 2(lane%4)+1).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}

// acc[8][4] += X_w Y^T where X_w is 16 rows of X (rows start at x) and Y the kFB rows at y,
// both [*, HS+8] in shared memory: a 16 x 64 tile of dot products over HS.
// A fragment (ldmatrix matrices: rows 0-7 / 8-15 x columns k0 / k0+8): lane l points at row
// l%16, column k0 + (l/16)*8. B fragments of n-blocks 2p and 2p+1 (matrices: Y rows 16p..+7
// at k0, at k0+8, rows 16p+8..+15 at k0, at k0+8): lane l points at Y row 16p + l%8 +
// (l/16)*8, column k0 + ((l/8)%2)*8. Rows are 16-byte aligned (HS+8 halves = 16k bytes) and
// 4 words apart in banks, so the 8 rows of a matrix hit 32 distinct banks.
template <typename T, int HS>
__device__ __forceinline__ void tile_dots(float (&acc)[8][4], const T* x, const T* y) {
  constexpr int kLd = HS + 8;
  const int lane = threadIdx.x % 32;
  const T* xa = x + (lane % 16) * kLd + (lane / 16) * 8;
  const T* yb = y + (lane % 8 + (lane / 16) * 8) * kLd + ((lane / 8) % 2) * 8;
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
    uint32_t a[4];
    ldsm_x4(a, xa + kk * 16);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t bb[4];
      ldsm_x4(bb, yb + np * 16 * kLd + kk * 16);
      mma16816<T>(acc[2 * np], a, bb[0], bb[1]);
      mma16816<T>(acc[2 * np + 1], a, bb[2], bb[3]);
    }
  }
}

// acc[HS/8][4] += P Y where P (16 x 64) is in C-fragment registers p[8][4] and Y is [kFB][HS+8]
// in shared memory (rows are the k dimension). B fragments of n-blocks 2p and 2p+1 by
// ldmatrix.trans (matrices: Y rows k0..+7 at column 16p, rows k0+8..+15 at 16p, rows k0..+7
// at 16p+8, rows k0+8..+15 at 16p+8): lane l points at row k0 + l%16, column 16p + (l/16)*8.
template <typename T, int HS>
__device__ __forceinline__ void tile_mul(float (&acc)[HS / 8][4], const float (&p)[8][4],
                                         const T* y) {
  constexpr int kLd = HS + 8;
  const int lane = threadIdx.x % 32;
  const T* yb = y + (lane % 16) * kLd + (lane / 16) * 8;
#pragma unroll
  for (int kk = 0; kk < kFB / 16; ++kk) {
    uint32_t a[4];
    a[0] = pack2<T>(p[2 * kk][0], p[2 * kk][1]);
    a[1] = pack2<T>(p[2 * kk][2], p[2 * kk][3]);
    a[2] = pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[3] = pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
    for (int np = 0; np < HS / 16; ++np) {
      uint32_t bb[4];
      ldsm_x4_trans(bb, yb + kk * 16 * kLd + np * 16);
      mma16816<T>(acc[2 * np], a, bb[0], bb[1]);
      mma16816<T>(acc[2 * np + 1], a, bb[2], bb[3]);
    }
  }
}

template <typename T, int HS>
__global__ void __launch_bounds__(kThreads)
    fast_forward_kernel(T* out, float* lse, const T* q, const T* k, const T* v, Dims d,
                        float scale_log2) {
  constexpr int kLd = HS + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* Qs = reinterpret_cast<T*>(smem_raw);
  T* KVs = Qs + kFB * kLd;  // two buffers of K, V: [2][2][kFB][kLd]
  const int b = blockIdx.y / d.NH, h = blockIdx.y % d.NH, kvh = h / d.group;
  // The longest causal rows first (less tail at the end of the grid).
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kFB;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int row0 = q0 + warp * 16 + g, row1 = row0 + 8;
  const int key_end = d.causal ? min(d.Tk, q0 + kFB) : d.Tk;
  const int tiles = (key_end + kFB - 1) / kFB;
  load_tile_async<T, HS>(Qs, q, b, q0, d.Tq, h, d.NH);
  load_tile_async<T, HS>(KVs, k, b, 0, d.Tk, kvh, d.NKV);
  load_tile_async<T, HS>(KVs + kFB * kLd, v, b, 0, d.Tk, kvh, d.NKV);
  cp_async_commit();
  float o[HS / 8][4];
#pragma unroll
  for (int nd = 0; nd < HS / 8; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  for (int it = 0; it < tiles; ++it) {
    const int j0 = it * kFB;
    const T* Ks = KVs + (it % 2) * 2 * kFB * kLd;
    const T* Vs = Ks + kFB * kLd;
    if (it + 1 < tiles) {  // prefetch the next tile into the other buffer
      T* next = KVs + ((it + 1) % 2) * 2 * kFB * kLd;
      load_tile_async<T, HS>(next, k, b, j0 + kFB, d.Tk, kvh, d.NKV);
      load_tile_async<T, HS>(next + kFB * kLd, v, b, j0 + kFB, d.Tk, kvh, d.NKV);
    }
    cp_async_commit();
    cp_async_wait<1>();  // this tile's group (and Q) has landed
    __syncthreads();
    float s[8][4];
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
    tile_dots<T, HS>(s, Qs + warp * 16 * kLd, Ks);
    // Scores in the log2 domain, masked.
    const bool need_mask = j0 + kFB > d.Tk || (d.causal && j0 + kFB - 1 > q0 + warp * 16);
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j0 + nb * 8 + 2 * c + (e & 1), row = e < 2 ? row0 : row1;
        float x = s[nb][e] * scale_log2;
        if (need_mask && (key >= d.Tk || (d.causal && key > row))) x = -INFINITY;
        s[nb][e] = x;
      }
      mx0 = fmaxf(mx0, fmaxf(s[nb][0], s[nb][1]));
      mx1 = fmaxf(mx1, fmaxf(s[nb][2], s[nb][3]));
    }
#pragma unroll
    for (int o_ = 1; o_ <= 2; o_ <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o_));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o_));
    }
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float mu0 = mn0 == -INFINITY ? 0.0f : mn0, mu1 = mn1 == -INFINITY ? 0.0f : mn1;
    const float alpha0 = exp2f(m0 - mu0), alpha1 = exp2f(m1 - mu1);
    m0 = mn0, m1 = mn1;
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      s[nb][0] = exp2f(s[nb][0] - mu0);
      s[nb][1] = exp2f(s[nb][1] - mu0);
      s[nb][2] = exp2f(s[nb][2] - mu1);
      s[nb][3] = exp2f(s[nb][3] - mu1);
      sum0 += s[nb][0] + s[nb][1];
      sum1 += s[nb][2] + s[nb][3];
    }
    l0 = l0 * alpha0 + sum0;  // this thread's share of the row sum (reduced at the end)
    l1 = l1 * alpha1 + sum1;
#pragma unroll
    for (int nd = 0; nd < HS / 8; ++nd) {
      o[nd][0] *= alpha0, o[nd][1] *= alpha0;
      o[nd][2] *= alpha1, o[nd][3] *= alpha1;
    }
    tile_mul<T, HS>(o, s, Vs);
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
  cp_async_wait<0>();
#pragma unroll
  for (int o_ = 1; o_ <= 2; o_ <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, o_);
    l1 += __shfl_xor_sync(0xffffffffu, l1, o_);
  }
  const int64_t stat = (static_cast<int64_t>(b) * d.NH + h) * d.Tq;
  if (row0 < d.Tq) {
    const float inv = 1.0f / l0;
    T* dst = out + row_off(b, row0, d.Tq, h, d.NH, HS) + 2 * c;
#pragma unroll
    for (int nd = 0; nd < HS / 8; ++nd) {
      const uint32_t val = pack2<T>(o[nd][0] * inv, o[nd][1] * inv);
      *reinterpret_cast<uint32_t*>(dst + nd * 8) = val;
    }
    if (c == 0) lse[stat + row0] = m0 * kLn2 + logf(l0);
  }
  if (row1 < d.Tq) {
    const float inv = 1.0f / l1;
    T* dst = out + row_off(b, row1, d.Tq, h, d.NH, HS) + 2 * c;
#pragma unroll
    for (int nd = 0; nd < HS / 8; ++nd) {
      const uint32_t val = pack2<T>(o[nd][2] * inv, o[nd][3] * inv);
      *reinterpret_cast<uint32_t*>(dst + nd * 8) = val;
    }
    if (c == 0) lse[stat + row1] = m1 * kLn2 + logf(l1);
  }
}

// dst[2c..2c+1] += (a, b), in f32, stored rounded.
template <typename T>
__device__ __forceinline__ void add2(T* dst, float a, float b) {
  st(dst, ld(dst) + a);
  st(dst + 1, ld(dst + 1) + b);
}

template <typename T, int HS>
__global__ void __launch_bounds__(kThreads)
    fast_dq_kernel(T* dq, const T* dout, const T* q, const T* k, const T* v, const float* lse,
                   const float* D, Dims d, float scale) {
  constexpr int kLd = HS + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* Qs = reinterpret_cast<T*>(smem_raw);
  T* dOs = Qs + kFB * kLd;
  T* KVs = dOs + kFB * kLd;  // two buffers of K, V: [2][2][kFB][kLd]
  const int b = blockIdx.y / d.NH, h = blockIdx.y % d.NH, kvh = h / d.group;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kFB;  // the longest causal rows first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int row0 = q0 + warp * 16 + g, row1 = row0 + 8;
  const float scale_log2 = scale * kLog2e;
  const int key_end = d.causal ? min(d.Tk, q0 + kFB) : d.Tk;
  const int tiles = (key_end + kFB - 1) / kFB;
  load_tile_async<T, HS>(Qs, q, b, q0, d.Tq, h, d.NH);
  load_tile_async<T, HS>(dOs, dout, b, q0, d.Tq, h, d.NH);
  load_tile_async<T, HS>(KVs, k, b, 0, d.Tk, kvh, d.NKV);
  load_tile_async<T, HS>(KVs + kFB * kLd, v, b, 0, d.Tk, kvh, d.NKV);
  cp_async_commit();
  const int64_t stat = (static_cast<int64_t>(b) * d.NH + h) * d.Tq;
  const float lse0 = row0 < d.Tq ? lse[stat + row0] * kLog2e : 0.0f;
  const float lse1 = row1 < d.Tq ? lse[stat + row1] * kLog2e : 0.0f;
  const float D0 = row0 < d.Tq ? D[stat + row0] : 0.0f;
  const float D1 = row1 < d.Tq ? D[stat + row1] : 0.0f;
  float acc[HS / 8][4];
#pragma unroll
  for (int nd = 0; nd < HS / 8; ++nd) acc[nd][0] = acc[nd][1] = acc[nd][2] = acc[nd][3] = 0.0f;
  for (int it = 0; it < tiles; ++it) {
    const int j0 = it * kFB;
    const T* Ks = KVs + (it % 2) * 2 * kFB * kLd;
    const T* Vs = Ks + kFB * kLd;
    if (it + 1 < tiles) {  // prefetch the next tile into the other buffer
      T* next = KVs + ((it + 1) % 2) * 2 * kFB * kLd;
      load_tile_async<T, HS>(next, k, b, j0 + kFB, d.Tk, kvh, d.NKV);
      load_tile_async<T, HS>(next + kFB * kLd, v, b, j0 + kFB, d.Tk, kvh, d.NKV);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    float s[8][4], dp[8][4];
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
      dp[nb][0] = dp[nb][1] = dp[nb][2] = dp[nb][3] = 0.0f;
    }
    tile_dots<T, HS>(s, Qs + warp * 16 * kLd, Ks);
    tile_dots<T, HS>(dp, dOs + warp * 16 * kLd, Vs);
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j0 + nb * 8 + 2 * c + (e & 1), row = e < 2 ? row0 : row1;
        const bool valid = row < d.Tq && key < d.Tk && (!d.causal || key <= row);
        const float p = valid ? exp2f(s[nb][e] * scale_log2 - (e < 2 ? lse0 : lse1)) : 0.0f;
        s[nb][e] = p * (dp[nb][e] - (e < 2 ? D0 : D1)) * scale;  // dS
      }
    }
    tile_mul<T, HS>(acc, s, Ks);
    __syncthreads();
  }
  cp_async_wait<0>();
  if (row0 < d.Tq) {
    T* dst = dq + row_off(b, row0, d.Tq, h, d.NH, HS) + 2 * c;
#pragma unroll
    for (int nd = 0; nd < HS / 8; ++nd) add2(dst + nd * 8, acc[nd][0], acc[nd][1]);
  }
  if (row1 < d.Tq) {
    T* dst = dq + row_off(b, row1, d.Tq, h, d.NH, HS) + 2 * c;
#pragma unroll
    for (int nd = 0; nd < HS / 8; ++nd) add2(dst + nd * 8, acc[nd][2], acc[nd][3]);
  }
}

template <typename T, int HS>
__global__ void __launch_bounds__(kThreads)
    fast_dkdv_kernel(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                     const float* lse, const float* D, Dims d, float scale) {
  constexpr int kLd = HS + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* Ks = reinterpret_cast<T*>(smem_raw);
  T* Vs = Ks + kFB * kLd;
  T* QdOs = Vs + kFB * kLd;  // two buffers of Q, dO: [2][2][kFB][kLd]
  // Two buffers of the query rows' lse (log2 domain) and D: [2][2][kFB].
  float* stats_s = reinterpret_cast<float*>(QdOs + 4 * kFB * kLd);
  const int b = blockIdx.y / d.NKV, kvh = blockIdx.y % d.NKV;
  const int j0 = blockIdx.x * kFB, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int key0 = j0 + warp * 16 + g, key1 = key0 + 8;
  const float scale_log2 = scale * kLog2e;
  // Work items: (query head hh of the group, query tile i0), hh major.
  const int i_begin = d.causal ? j0 : 0;  // causal: queries before j0 see none of these keys
  const int q_tiles = i_begin < d.Tq ? (d.Tq - i_begin + kFB - 1) / kFB : 0;
  const int items = d.group * q_tiles;
  // Queues item `it` into buffer it % 2: Q and dO by cp.async, lse and D by plain stores
  // (seen after the __syncthreads that precedes their use).
  auto load_item = [&](int it) {
    const int h = kvh * d.group + it / q_tiles, i0 = i_begin + (it % q_tiles) * kFB;
    T* Qb = QdOs + (it % 2) * 2 * kFB * kLd;
    load_tile_async<T, HS>(Qb, q, b, i0, d.Tq, h, d.NH);
    load_tile_async<T, HS>(Qb + kFB * kLd, dout, b, i0, d.Tq, h, d.NH);
    if (threadIdx.x < kFB) {
      const int t = i0 + threadIdx.x;
      const int64_t stat = (static_cast<int64_t>(b) * d.NH + h) * d.Tq;
      float* st_b = stats_s + (it % 2) * 2 * kFB;
      st_b[threadIdx.x] = t < d.Tq ? lse[stat + t] * kLog2e : 0.0f;
      st_b[kFB + threadIdx.x] = t < d.Tq ? D[stat + t] : 0.0f;
    }
  };
  load_tile_async<T, HS>(Ks, k, b, j0, d.Tk, kvh, d.NKV);
  load_tile_async<T, HS>(Vs, v, b, j0, d.Tk, kvh, d.NKV);
  if (items > 0) load_item(0);
  cp_async_commit();
  float dka[HS / 8][4], dva[HS / 8][4];
#pragma unroll
  for (int nd = 0; nd < HS / 8; ++nd) {
    dka[nd][0] = dka[nd][1] = dka[nd][2] = dka[nd][3] = 0.0f;
    dva[nd][0] = dva[nd][1] = dva[nd][2] = dva[nd][3] = 0.0f;
  }
  for (int it = 0; it < items; ++it) {
    const int i0 = i_begin + (it % q_tiles) * kFB;
    const T* Qs = QdOs + (it % 2) * 2 * kFB * kLd;
    const T* dOs = Qs + kFB * kLd;
    const float* lse_s = stats_s + (it % 2) * 2 * kFB;
    const float* D_s = lse_s + kFB;
    if (it + 1 < items) load_item(it + 1);  // prefetch into the other buffer
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    // P^T and dP^T: 16 keys (this warp's) x 64 queries.
    float p[8][4];
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) p[nb][0] = p[nb][1] = p[nb][2] = p[nb][3] = 0.0f;
    tile_dots<T, HS>(p, Ks + warp * 16 * kLd, Qs);
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = nb * 8 + 2 * c + (e & 1), row = i0 + qi, key = e < 2 ? key0 : key1;
        const bool valid = row < d.Tq && key < d.Tk && (!d.causal || key <= row);
        p[nb][e] = valid ? exp2f(p[nb][e] * scale_log2 - lse_s[qi]) : 0.0f;
      }
    }
    tile_mul<T, HS>(dva, p, dOs);  // dV += P^T dO
    float ds[8][4];
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) ds[nb][0] = ds[nb][1] = ds[nb][2] = ds[nb][3] = 0.0f;
    tile_dots<T, HS>(ds, Vs + warp * 16 * kLd, dOs);
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = nb * 8 + 2 * c + (e & 1);
        ds[nb][e] = p[nb][e] * (ds[nb][e] - D_s[qi]) * scale;
      }
    }
    tile_mul<T, HS>(dka, ds, Qs);  // dK += dS^T Q
    __syncthreads();               // every warp is done with this buffer before it is refilled
  }
  cp_async_wait<0>();
  if (key0 < d.Tk) {
    const int64_t off = row_off(b, key0, d.Tk, kvh, d.NKV, HS) + 2 * c;
#pragma unroll
    for (int nd = 0; nd < HS / 8; ++nd) {
      if (dk) add2(dk + off + nd * 8, dka[nd][0], dka[nd][1]);
      if (dv) add2(dv + off + nd * 8, dva[nd][0], dva[nd][1]);
    }
  }
  if (key1 < d.Tk) {
    const int64_t off = row_off(b, key1, d.Tk, kvh, d.NKV, HS) + 2 * c;
#pragma unroll
    for (int nd = 0; nd < HS / 8; ++nd) {
      if (dk) add2(dk + off + nd * 8, dka[nd][2], dka[nd][3]);
      if (dv) add2(dv + off + nd * 8, dva[nd][2], dva[nd][3]);
    }
  }
}

template <typename T, int HS>
void fast_forward(T* out, float* lse, const T* q, const T* k, const T* v, const Dims& d,
                  float scale) {
  const size_t smem = sizeof(T) * 5 * kFB * (HS + 8);  // Q, two K and V
  auto kernel = fast_forward_kernel<T, HS>;
  allow_smem(kernel, smem);
  dim3 grid(static_cast<unsigned>(ceil_div(d.Tq, kFB)), static_cast<unsigned>(d.B * d.NH));
  kernel<<<grid, kThreads, smem, stream()>>>(out, lse, q, k, v, d, scale * kLog2e);
  BRAID_CUDA_LAUNCHED("attention_forward");
}

template <typename T, int HS>
void fast_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                   const float* lse, const float* D, const Dims& d, float scale) {
  if (dq) {
    const size_t smem = sizeof(T) * 6 * kFB * (HS + 8);  // Q, dO, two K and V
    auto kernel = fast_dq_kernel<T, HS>;
    allow_smem(kernel, smem);
    dim3 grid(static_cast<unsigned>(ceil_div(d.Tq, kFB)), static_cast<unsigned>(d.B * d.NH));
    kernel<<<grid, kThreads, smem, stream()>>>(dq, dout, q, k, v, lse, D, d, scale);
    BRAID_CUDA_LAUNCHED("attention_backward");
  }
  if ((dk || dv) && d.Tk > 0) {
    // K, V, two Q and dO, two lse and D
    const size_t smem = sizeof(T) * 6 * kFB * (HS + 8) + sizeof(float) * 4 * kFB;
    auto kernel = fast_dkdv_kernel<T, HS>;
    allow_smem(kernel, smem);
    dim3 grid(static_cast<unsigned>(ceil_div(d.Tk, kFB)), static_cast<unsigned>(d.B * d.NKV));
    kernel<<<grid, kThreads, smem, stream()>>>(dk, dv, dout, q, k, v, lse, D, d, scale);
    BRAID_CUDA_LAUNCHED("attention_backward");
  }
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
        if (d.HS == 64) return fast_forward<T, 64>(o, l, qp, kp, vp, d, scale);
        return fast_forward<T, 128>(o, l, qp, kp, vp, d, scale);
      }
    }
    dispatch_chunks(d.HS, [&](auto nc) {
      generic_forward<T, decltype(nc)::value>(o, l, qp, kp, vp, d, scale);
    });
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
        if (d.HS == 64) return fast_backward<T, 64>(dqp, dkp, dvp, g, qp, kp, vp, l, D, d, scale);
        return fast_backward<T, 128>(dqp, dkp, dvp, g, qp, kp, vp, l, D, d, scale);
      }
    }
    dispatch_chunks(d.HS, [&](auto nc) {
      generic_backward<T, decltype(nc)::value>(dqp, dkp, dvp, g, qp, kp, vp, l, D, d, scale);
    });
  });
}

}  // namespace braid::kernels::cuda
