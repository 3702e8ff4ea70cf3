// LayerNorm and RMSNorm on the GPU (contract: kernels/ops.h, cpu/norm.cpp), llm.c style.
// Forward and the dinp part of the backward run one warp per row (128-bit loads when the
// pointers are aligned and C is a multiple of the pack size). dweight/dbias are reduced
// deterministically in two stages: column-parallel partial sums over fixed row chunks into
// f32 scratch, then one thread per column sums the chunks in order (in f64) and adds the result
// once into the gradient (its input's dtype or f32, Note [Parameter gradients]). With
// BRAID_CUDA_FUSION=1 (opt-in for now: runtime.h, fusion_enabled), rows of up to 32 * 4 packs
// (1024 columns of bf16/f16, 512 of f32) take the backward in one kernel instead
// (norm_backward_fused_kernel: dout and inp read from memory once, not twice; the two kernels
// took 2.0 ms a step of GPT-2 124M on an H100, about twice their traffic at the copy bandwidth).
#include "braid/kernels/checks.h"
#include "braid/kernels/cuda/common.cuh"
#include "braid/kernels/cuda/cuda_ops.h"

namespace braid::kernels::cuda {

namespace {

constexpr int kRowBlock = 256;  // 8 warps, one row each

// One warp per row. mean == nullptr: rmsnorm (no centring, no bias).
template <typename T, int P>
__global__ void norm_forward_kernel(T* __restrict__ out, float* __restrict__ mean,
                                    float* __restrict__ rstd, const T* __restrict__ inp,
                                    const T* __restrict__ weight, const T* __restrict__ bias,
                                    float eps, int64_t N, int64_t C) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const float fc = static_cast<float>(C);
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; n < N;
       n += warps) {
    const T* x = inp + n * C;
    float mu = 0.0f;
    if (mean) {
      float s = 0.0f;
      for (int64_t c = static_cast<int64_t>(lane) * P; c < C; c += 32 * P) {
        float v[P];
        load_vec<T, P>(x + c, v);
#pragma unroll
        for (int j = 0; j < P; ++j) s += v[j];
      }
      mu = warp_sum(s) / fc;
    }
    float ss = 0.0f;
    for (int64_t c = static_cast<int64_t>(lane) * P; c < C; c += 32 * P) {
      float v[P];
      load_vec<T, P>(x + c, v);
#pragma unroll
      for (int j = 0; j < P; ++j) ss += (v[j] - mu) * (v[j] - mu);
    }
    const float rs = 1.0f / sqrtf(warp_sum(ss) / fc + eps);
    T* o = out + n * C;
    for (int64_t c = static_cast<int64_t>(lane) * P; c < C; c += 32 * P) {
      float v[P], w[P], b[P];
      load_vec<T, P>(x + c, v);
      load_vec<T, P>(weight + c, w);
      if (bias) {
        load_vec<T, P>(bias + c, b);
      } else {
#pragma unroll
        for (int j = 0; j < P; ++j) b[j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < P; ++j) v[j] = bias ? (v[j] - mu) * rs * w[j] + b[j] : v[j] * rs * w[j];
      store_vec<T, P>(o + c, v);
    }
    if (lane == 0) {
      if (mean) mean[n] = mu;
      rstd[n] = rs;
    }
  }
}

// One row's sums over the lane's columns (c = lane * P, + 32 P, ...): sd = sum dnorm and
// sdn = sum dnorm * norm, dnorm = dout * weight, norm = (x - mu) * rs.
template <typename T, int P>
__device__ __forceinline__ void row_dnorm_sums(const T* x, const T* g, const T* weight, float mu,
                                               float rs, int64_t C, int lane, float& sd,
                                               float& sdn) {
  sd = 0.0f, sdn = 0.0f;
  for (int64_t c = static_cast<int64_t>(lane) * P; c < C; c += 32 * P) {
    float xv[P], gv[P], wv[P];
    load_vec<T, P>(x + c, xv);
    load_vec<T, P>(g + c, gv);
    load_vec<T, P>(weight + c, wv);
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const float dn = gv[j] * wv[j];
      sd += dn;
      sdn += dn * ((xv[j] - mu) * rs);
    }
  }
}

// dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), one warp per row.
// mean == nullptr: rmsnorm (no mean(dnorm) term).
template <typename T, int P>
__global__ void norm_backward_dinp_kernel(T* __restrict__ dinp, const T* __restrict__ dout,
                                          const T* __restrict__ inp, const T* __restrict__ weight,
                                          const float* __restrict__ mean,
                                          const float* __restrict__ rstd, int64_t N, int64_t C) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const float fc = static_cast<float>(C);
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; n < N;
       n += warps) {
    const T* x = inp + n * C;
    const T* g = dout + n * C;
    const float mu = mean ? mean[n] : 0.0f, rs = rstd[n];
    float sd, sdn;
    row_dnorm_sums<T, P>(x, g, weight, mu, rs, C, lane, sd, sdn);
    const float a = mean ? warp_sum(sd) / fc : 0.0f;
    const float b = warp_sum(sdn) / fc;
    T* d = dinp + n * C;
    for (int64_t c = static_cast<int64_t>(lane) * P; c < C; c += 32 * P) {
      float xv[P], gv[P], wv[P], dv[P];
      load_vec<T, P>(x + c, xv);
      load_vec<T, P>(g + c, gv);
      load_vec<T, P>(weight + c, wv);
      load_vec<T, P>(d + c, dv);
#pragma unroll
      for (int j = 0; j < P; ++j) {
        const float norm = (xv[j] - mu) * rs;
        dv[j] = dv[j] + rs * (gv[j] * wv[j] - a - norm * b);
      }
      store_vec<T, P>(d + c, dv);
    }
  }
}

// The whole backward in one pass, for packed rows of at most 32 * P * K columns (K <= 4: the
// column sums live in 2 K P registers per lane). Rows as norm_backward_dinp_kernel (one warp per
// row, the same arithmetic in the same order, so dinp is the same to the bit), and each lane
// also sums dout * norm and dout of its columns over the rows its warp takes; the dinp kernel
// and the stage-1 kernel below read dout and inp from memory twice, this once.
// Block b owns rows [b * rows, (b + 1) * rows), its warps rows b * rows + warp, + 8, ...; the
// 8 warps' sums are added in warp order in shared memory and stored as the block's partial:
// partial[b][0][c] = sum dout * norm, partial[b][1][c] = sum dout. dinp == nullptr: no dinp.
template <typename T, int P, int K>
__global__ void __launch_bounds__(kRowBlock)
    norm_backward_fused_kernel(T* __restrict__ dinp, float* __restrict__ partial,
                               const T* __restrict__ dout, const T* __restrict__ inp,
                               const T* __restrict__ weight, const float* __restrict__ mean,
                               const float* __restrict__ rstd, int64_t N, int64_t C, int64_t rows) {
  __shared__ float s_w[32 * P * K], s_b[32 * P * K];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float fc = static_cast<float>(C);
  float aw[K][P], ab[K][P];
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int j = 0; j < P; ++j) aw[k][j] = ab[k][j] = 0.0f;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * rows;
  const int64_t n1 = n0 + rows < N ? n0 + rows : N;
  for (int64_t n = n0 + warp; n < n1; n += kRowBlock / 32) {
    const T* x = inp + n * C;
    const T* g = dout + n * C;
    const float mu = mean ? mean[n] : 0.0f, rs = rstd[n];
    float sd, sdn;
    row_dnorm_sums<T, P>(x, g, weight, mu, rs, C, lane, sd, sdn);
    const float a = mean ? warp_sum(sd) / fc : 0.0f;
    const float b = warp_sum(sdn) / fc;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c = (static_cast<int64_t>(lane) + 32 * k) * P;
      if (c >= C) break;
      float xv[P], gv[P], wv[P], dv[P];
      load_vec<T, P>(x + c, xv);
      load_vec<T, P>(g + c, gv);
      load_vec<T, P>(weight + c, wv);
      if (dinp) {
        load_vec<T, P>(dinp + n * C + c, dv);
      } else {
#pragma unroll
        for (int j = 0; j < P; ++j) dv[j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < P; ++j) {
        const float norm = (xv[j] - mu) * rs;
        aw[k][j] += gv[j] * norm;
        ab[k][j] += gv[j];
        dv[j] = dv[j] + rs * (gv[j] * wv[j] - a - norm * b);
      }
      if (dinp) store_vec<T, P>(dinp + n * C + c, dv);
    }
  }
  for (int w = 0; w < kRowBlock / 32; ++w) {  // the warps' sums, in warp order
    if (warp == w) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int64_t c = (static_cast<int64_t>(lane) + 32 * k) * P;
        if (c >= C) break;
#pragma unroll
        for (int j = 0; j < P; ++j) {
          s_w[c + j] = w == 0 ? aw[k][j] : s_w[c + j] + aw[k][j];
          s_b[c + j] = w == 0 ? ab[k][j] : s_b[c + j] + ab[k][j];
        }
      }
    }
    __syncthreads();
  }
  float* p = partial + static_cast<int64_t>(blockIdx.x) * 2 * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    p[c] = s_w[c];
    p[C + c] = s_b[c];
  }
}

// Stage 2 for the fused kernel's many partials: block (32, 8) over 32 columns, threadIdx.y
// sums chunks y, y + 8, ... in order (f64), then the 8 sums are added in order; grad[c] +=.
template <typename G>
__global__ void norm_param_sum8_kernel(G* __restrict__ grad, const float* __restrict__ partial,
                                       int which, int64_t chunks, int64_t C) {
  __shared__ double s[8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  double v = 0.0;
  if (c < C)
    for (int64_t k = threadIdx.y; k < chunks; k += 8)
      v += static_cast<double>(partial[(k * 2 + which) * C + c]);
  s[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    double t = 0.0;
#pragma unroll
    for (int y = 0; y < 8; ++y) t += s[y][threadIdx.x];
    st(grad + c, ld(grad + c) + static_cast<float>(t));
  }
}

// Stage 1 of the parameter gradients. Block (32, 8): threadIdx.x picks V consecutive columns
// of the block's 32 * V-column tile (V = the 128-bit pack when rows are aligned, else 1),
// threadIdx.y strides the rows of chunk blockIdx.y ([n0, n1), `chunk` rows).
// partial[blockIdx.y][0][c] = sum dout * norm, partial[blockIdx.y][1][c] = sum dout, summed
// over the 8 row lanes in fixed order.
template <typename T, int V>
__global__ void norm_param_partial_kernel(float* __restrict__ partial, const T* __restrict__ dout,
                                          const T* __restrict__ inp, const float* __restrict__ mean,
                                          const float* __restrict__ rstd, int64_t N, int64_t C,
                                          int64_t chunk) {
  __shared__ float sw[8][32 * V + 1];
  __shared__ float sb[8][32 * V + 1];
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x) * V;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t n1 = n0 + chunk < N ? n0 + chunk : N;
  float aw[V], ab[V];
#pragma unroll
  for (int i = 0; i < V; ++i) aw[i] = ab[i] = 0.0f;
  if (c0 < C) {
    for (int64_t n = n0 + threadIdx.y; n < n1; n += 8) {
      const float mu = mean ? mean[n] : 0.0f, rs = rstd[n];
      if constexpr (V > 1) {
        const Pack128<T> g = load128(dout + n * C + c0), x = load128(inp + n * C + c0);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          aw[i] += g.get(i) * ((x.get(i) - mu) * rs);
          ab[i] += g.get(i);
        }
      } else {
        const float g = ld(dout + n * C + c0);
        aw[0] += g * ((ld(inp + n * C + c0) - mu) * rs);
        ab[0] += g;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < V; ++i) {
    sw[threadIdx.y][threadIdx.x * V + i] = aw[i];
    sb[threadIdx.y][threadIdx.x * V + i] = ab[i];
  }
  __syncthreads();
  const int tid = threadIdx.y * 32 + threadIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 * V + tid;
  if (tid < 32 * V && c < C) {
    float w = 0.0f, b = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      w += sw[k][tid];
      b += sb[k][tid];
    }
    float* p = partial + static_cast<int64_t>(blockIdx.y) * 2 * C;
    p[c] = w;
    p[C + c] = b;
  }
}

// Stage 2: grad[c] += sum over chunks of partial[k][which][c], chunks in order, in f64.
template <typename G>
__global__ void norm_param_sum_kernel(G* __restrict__ grad, const float* __restrict__ partial,
                                      int which, int64_t chunks, int64_t C) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < C;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double s = 0.0;
    for (int64_t k = 0; k < chunks; ++k) s += static_cast<double>(partial[(k * 2 + which) * C + c]);
    st(grad + c, ld(grad + c) + static_cast<float>(s));
  }
}

// N rows in chunks of at least 32 rows, at most max_chunks of them: the number of chunks, and
// the rows of each (the last may have fewer) in rows.
int64_t row_chunks(int64_t N, int64_t max_chunks, int64_t& rows) {
  const int64_t chunks = ceil_div(N, 32) < max_chunks ? ceil_div(N, 32) : max_chunks;
  rows = ceil_div(N, chunks);
  return ceil_div(N, rows);
}

unsigned row_grid(int64_t N) {
  return grid_for(N, kRowBlock / 32);
}

template <typename T>
void launch_forward(const char* op, T* out, float* mean, float* rstd, const T* inp, const T* weight,
                    const T* bias, float eps, int64_t N, int64_t C) {
  if (N == 0) return;
  constexpr int P = Pack128<T>::size;
  if (packable<T>(C, {out, inp, weight, bias})) {
    norm_forward_kernel<T, P>
        <<<row_grid(N), kRowBlock, 0, stream()>>>(out, mean, rstd, inp, weight, bias, eps, N, C);
  } else {
    norm_forward_kernel<T, 1>
        <<<row_grid(N), kRowBlock, 0, stream()>>>(out, mean, rstd, inp, weight, bias, eps, N, C);
  }
  BRAID_CUDA_LAUNCHED(op);
}

// Shared backward of both norms. mean == nullptr selects rmsnorm.
template <typename T, int K>
void launch_fused(T* dinp, float* partial, const T* dout, const T* inp, const T* weight,
                  const float* mean, const float* rstd, int64_t N, int64_t C, int64_t chunks,
                  int64_t rows) {
  norm_backward_fused_kernel<T, Pack128<T>::size, K>
      <<<static_cast<unsigned>(chunks), kRowBlock, 0, stream()>>>(dinp, partial, dout, inp, weight,
                                                                  mean, rstd, N, C, rows);
}

// The fused backward (norm_backward_fused_kernel) where the rows fit it; false where not.
template <typename T>
bool norm_backward_fused(const char* op, T* dinp, Tensor* dweight, Tensor* dbias, const T* dout,
                         const T* inp, const T* weight, const float* mean, const float* rstd,
                         int64_t N, int64_t C) {
  constexpr int P = Pack128<T>::size;
  const int64_t K = ceil_div(C, 32 * P);
  if (!dweight && !dbias) return false;
  if (K > 4 || !packable<T>(C, {dout, inp, weight}) || (dinp && !packable<T>(C, {dinp})))
    return false;
  // Blocks of 32 rows (4 per warp), at most 1024 of them (stage 2 reads each column's partials).
  int64_t rows;
  const int64_t chunks = row_chunks(N, 1024, rows);
  Scratch partial(static_cast<size_t>(chunks * 2 * C) * sizeof(float));
  float* p = partial.as<float>();
  switch (K) {
    case 1:
      launch_fused<T, 1>(dinp, p, dout, inp, weight, mean, rstd, N, C, chunks, rows);
      break;
    case 2:
      launch_fused<T, 2>(dinp, p, dout, inp, weight, mean, rstd, N, C, chunks, rows);
      break;
    case 3:
      launch_fused<T, 3>(dinp, p, dout, inp, weight, mean, rstd, N, C, chunks, rows);
      break;
    default:
      launch_fused<T, 4>(dinp, p, dout, inp, weight, mean, rstd, N, C, chunks, rows);
  }
  BRAID_CUDA_LAUNCHED(op);
  auto add = [&](Tensor& grad, int which) {
    dispatch_float(grad.dtype(), op, [&](auto gtag) {
      using G = decltype(gtag);
      norm_param_sum8_kernel<G>
          <<<static_cast<unsigned>(ceil_div(C, 32)), dim3(32, 8), 0, stream()>>>(ptr<G>(grad), p,
                                                                                 which, chunks, C);
      BRAID_CUDA_LAUNCHED(op);
    });
  };
  if (dweight) add(*dweight, 0);
  if (dbias) add(*dbias, 1);
  return true;
}

template <typename T>
void norm_backward(const char* op, T* dinp, Tensor* dweight, Tensor* dbias, const T* dout,
                   const T* inp, const T* weight, const float* mean, const float* rstd, int64_t N,
                   int64_t C) {
  if (N == 0 || C == 0) return;
  if (fusion_enabled() &&
      norm_backward_fused<T>(op, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C))
    return;
  if (dinp) {
    constexpr int P = Pack128<T>::size;
    if (packable<T>(C, {dinp, dout, inp, weight})) {
      norm_backward_dinp_kernel<T, P>
          <<<row_grid(N), kRowBlock, 0, stream()>>>(dinp, dout, inp, weight, mean, rstd, N, C);
    } else {
      norm_backward_dinp_kernel<T, 1>
          <<<row_grid(N), kRowBlock, 0, stream()>>>(dinp, dout, inp, weight, mean, rstd, N, C);
    }
    BRAID_CUDA_LAUNCHED(op);
  }
  if (!dweight && !dbias) return;
  // Row chunks: at least 32 rows each, at most 128 chunks (scratch 2 * chunks * C floats): stage
  // 2 reads the chunks of a column one after another, so more would make it latency-bound.
  int64_t chunk;
  const int64_t chunks = row_chunks(N, 128, chunk);
  Scratch partial(static_cast<size_t>(chunks * 2 * C) * sizeof(float));
  float* p = partial.as<float>();
  constexpr int P = Pack128<T>::size;
  const bool packed = packable<T>(C, {dout, inp});
  dim3 grid(static_cast<unsigned>(ceil_div(C, packed ? 32 * P : 32)),
            static_cast<unsigned>(chunks));
  if (packed) {
    norm_param_partial_kernel<T, P>
        <<<grid, dim3(32, 8), 0, stream()>>>(p, dout, inp, mean, rstd, N, C, chunk);
  } else {
    norm_param_partial_kernel<T, 1>
        <<<grid, dim3(32, 8), 0, stream()>>>(p, dout, inp, mean, rstd, N, C, chunk);
  }
  BRAID_CUDA_LAUNCHED(op);
  auto add = [&](Tensor& grad, int which) {
    dispatch_float(grad.dtype(), op, [&](auto gtag) {
      using G = decltype(gtag);
      norm_param_sum_kernel<G>
          <<<grid_for(C, 256), 256, 0, stream()>>>(ptr<G>(grad), p, which, chunks, C);
      BRAID_CUDA_LAUNCHED(op);
    });
  };
  if (dweight) add(*dweight, 0);
  if (dbias) add(*dbias, 1);
}

}  // namespace

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, float eps) {
  const char* op = "layernorm_forward";
  check_cuda(op, {&out, &mean, &rstd, &inp, &weight, &bias});
  const int64_t N = rows_of(inp), C = cols_of(inp);  // checked by the ops.h entry
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_forward<T>(op, ptr<T>(out), ptr<float>(mean), ptr<float>(rstd), ptr<T>(inp),
                      ptr<T>(weight), ptr<T>(bias), eps, N, C);
  });
}

void layernorm_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd) {
  const char* op = "layernorm_backward";
  check_cuda(op, {dinp, dweight, dbias, &dout, &inp, &weight, &mean, &rstd});
  const int64_t N = rows_of(inp), C = cols_of(inp);  // checked by the ops.h entry
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    norm_backward<T>(op, dinp ? ptr<T>(*dinp) : nullptr, dweight, dbias, ptr<T>(dout), ptr<T>(inp),
                     ptr<T>(weight), ptr<float>(mean), ptr<float>(rstd), N, C);
  });
}

void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                     float eps) {
  const char* op = "rmsnorm_forward";
  check_cuda(op, {&out, &rstd, &inp, &weight});
  const int64_t N = rows_of(inp), C = cols_of(inp);  // checked by the ops.h entry
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_forward<T>(op, ptr<T>(out), nullptr, ptr<float>(rstd), ptr<T>(inp), ptr<T>(weight),
                      nullptr, eps, N, C);
  });
}

void rmsnorm_backward(Tensor* dinp, Tensor* dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd) {
  const char* op = "rmsnorm_backward";
  check_cuda(op, {dinp, dweight, &dout, &inp, &weight, &rstd});
  const int64_t N = rows_of(inp), C = cols_of(inp);  // checked by the ops.h entry
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    norm_backward<T>(op, dinp ? ptr<T>(*dinp) : nullptr, dweight, nullptr, ptr<T>(dout),
                     ptr<T>(inp), ptr<T>(weight), nullptr, ptr<float>(rstd), N, C);
  });
}

}  // namespace braid::kernels::cuda
