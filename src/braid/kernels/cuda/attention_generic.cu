// The generic path of CUDA attention (Note [CUDA flash attention], attention.cu): SIMT f32
// arithmetic, any float dtype, head sizes 1 to 256.
#include <type_traits>

#include "braid/kernels/cuda/attention.cuh"

namespace braid::kernels::cuda::attention_impl {

namespace {

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
void launch_generic_forward(T* out, float* lse, const T* q, const T* k, const T* v, const Dims& d,
                            float scale) {
  const size_t smem = sizeof(float) * (kGQ * d.HS + kGK * (d.HS + 1) + kGK * d.HS);
  auto kernel = generic_forward_kernel<T, NC>;
  allow_smem(kernel, smem);
  dim3 grid(static_cast<unsigned>(ceil_div(d.Tq, kGQ)), static_cast<unsigned>(d.B * d.NH));
  kernel<<<grid, kThreads, smem, stream()>>>(out, lse, q, k, v, d, scale);
  BRAID_CUDA_LAUNCHED("attention_forward");
}

template <typename T, int NC>
void launch_generic_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
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

}  // namespace

template <typename T>
void generic_forward(T* out, float* lse, const T* q, const T* k, const T* v, const Dims& d,
                     float scale) {
  dispatch_chunks(d.HS, [&](auto nc) {
    launch_generic_forward<T, decltype(nc)::value>(out, lse, q, k, v, d, scale);
  });
}

template <typename T>
void generic_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                      const float* lse, const float* D, const Dims& d, float scale) {
  dispatch_chunks(d.HS, [&](auto nc) {
    launch_generic_backward<T, decltype(nc)::value>(dq, dk, dv, dout, q, k, v, lse, D, d, scale);
  });
}

template void generic_forward<float>(float*, float*, const float*, const float*, const float*,
                                     const Dims&, float);
template void generic_forward<bf16_t>(bf16_t*, float*, const bf16_t*, const bf16_t*, const bf16_t*,
                                      const Dims&, float);
template void generic_forward<f16_t>(f16_t*, float*, const f16_t*, const f16_t*, const f16_t*,
                                     const Dims&, float);
template void generic_backward<float>(float*, float*, float*, const float*, const float*,
                                      const float*, const float*, const float*, const float*,
                                      const Dims&, float);
template void generic_backward<bf16_t>(bf16_t*, bf16_t*, bf16_t*, const bf16_t*, const bf16_t*,
                                       const bf16_t*, const bf16_t*, const float*, const float*,
                                       const Dims&, float);
template void generic_backward<f16_t>(f16_t*, f16_t*, f16_t*, const f16_t*, const f16_t*,
                                      const f16_t*, const f16_t*, const float*, const float*,
                                      const Dims&, float);

}  // namespace braid::kernels::cuda::attention_impl
