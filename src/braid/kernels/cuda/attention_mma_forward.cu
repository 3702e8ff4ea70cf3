// The tensor-core forward of CUDA attention (Note [CUDA flash attention], attention.cu).
#include "braid/kernels/cuda/attention_mma.cuh"

namespace braid::kernels::cuda::attention_impl {

namespace {

using namespace mma;

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

template <typename T, int HS>
void launch_fast_forward(T* out, float* lse, const T* q, const T* k, const T* v, const Dims& d,
                         float scale) {
  const size_t smem = sizeof(T) * 5 * kFB * (HS + 8);  // Q, two K and V
  auto kernel = fast_forward_kernel<T, HS>;
  allow_smem(kernel, smem);
  dim3 grid(static_cast<unsigned>(ceil_div(d.Tq, kFB)), static_cast<unsigned>(d.B * d.NH));
  kernel<<<grid, kThreads, smem, stream()>>>(out, lse, q, k, v, d, scale * kLog2e);
  BRAID_CUDA_LAUNCHED("attention_forward");
}

}  // namespace

template <typename T>
void mma_forward(T* out, float* lse, const T* q, const T* k, const T* v, const Dims& d,
                 float scale) {
  if (d.HS == 64) return launch_fast_forward<T, 64>(out, lse, q, k, v, d, scale);
  launch_fast_forward<T, 128>(out, lse, q, k, v, d, scale);
}

template void mma_forward<bf16_t>(bf16_t*, float*, const bf16_t*, const bf16_t*, const bf16_t*,
                                  const Dims&, float);
template void mma_forward<f16_t>(f16_t*, float*, const f16_t*, const f16_t*, const f16_t*,
                                 const Dims&, float);

}  // namespace braid::kernels::cuda::attention_impl
