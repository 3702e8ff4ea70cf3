// The tensor-core backward of CUDA attention (Note [CUDA flash attention], attention.cu): dq,
// then dk and dv, each gradient element with one writer.
#include "braid/kernels/cuda/attention_mma.cuh"

namespace braid::kernels::cuda::attention_impl {

namespace {

using namespace mma;

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
void launch_fast_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
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

}  // namespace

template <typename T>
void mma_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                  const float* lse, const float* D, const Dims& d, float scale) {
  if (d.HS == 64) return launch_fast_backward<T, 64>(dq, dk, dv, dout, q, k, v, lse, D, d, scale);
  launch_fast_backward<T, 128>(dq, dk, dv, dout, q, k, v, lse, D, d, scale);
}

template void mma_backward<bf16_t>(bf16_t*, bf16_t*, bf16_t*, const bf16_t*, const bf16_t*,
                                   const bf16_t*, const bf16_t*, const float*, const float*,
                                   const Dims&, float);
template void mma_backward<f16_t>(f16_t*, f16_t*, f16_t*, const f16_t*, const f16_t*, const f16_t*,
                                  const f16_t*, const float*, const float*, const Dims&, float);

}  // namespace braid::kernels::cuda::attention_impl
