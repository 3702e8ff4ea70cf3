// Element-wise CUDA kernels over flat tensors (cuda_ops.h; contracts in kernels/ops.h):
//   cast / convert, add_forward, axpy, scale        grid-stride maps, 8 elements per step
//                                                   (128-bit accesses) when aligned
//   sum_squares (f64)                               per-block partials finished on the host
//   copy_columns, add_columns, set_columns,         row-major [N, C] maps
//   bias_add_forward
//   bias_add_backward                               column sums in f64, as the CPU kernel
//   add_column_sums                                 dbias += column sums taken elsewhere
// max_abs and sum_squares_fixed, one tensor or a list, are in multi_tensor.cu.
#include <algorithm>
#include <cmath>
#include <vector>

#include "braid/kernels/checks.h"
#include "braid/kernels/cuda/common.cuh"
#include "braid/kernels/cuda/cuda_ops.h"

namespace braid::kernels::cuda {

namespace {

constexpr int kThreads = 256;

// ---- argument checks (the messages of the CPU kernels, cpu/common.cpp) ----

// Whether n is a multiple of 8 and every pointer 16-byte aligned: then 8 elements of any float
// dtype are one (bf16/f16) or two (f32) 128-bit accesses.
bool vec8(int64_t n, std::initializer_list<const void*> ptrs) {
  return packable<bf16_t>(n, ptrs);
}

// out[i] = f(a[i], b[i]) in f32, rounded once to TO. out may alias a or b. vec: the 8-wide path
// (n % 8 == 0, all pointers 16-byte aligned).
template <typename TO, typename TA, typename TB, typename F>
__global__ void map2_kernel(TO* out, const TA* a, const TB* b, int64_t n, bool vec, F f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vec) {
    for (int64_t i = first * 8; i < n; i += stride * 8) {
      float fa[8], fb[8], fo[8];
      load8(a + i, fa);
      load8(b + i, fb);
#pragma unroll
      for (int k = 0; k < 8; ++k) fo[k] = f(fa[k], fb[k]);
      store8(out + i, fo);
    }
  } else {
    for (int64_t i = first; i < n; i += stride) st(out + i, f(ld(a + i), ld(b + i)));
  }
}

template <typename TO, typename TA, typename TB, typename F>
void launch_map2(const char* op, TO* out, const TA* a, const TB* b, int64_t n, F f) {
  if (n <= 0) return;
  const bool vec = vec8(n, {out, a, b});
  map2_kernel<<<grid_for(vec ? n / 8 : n, kThreads), kThreads, 0, stream()>>>(out, a, b, n, vec, f);
  BRAID_CUDA_LAUNCHED(op);
}

struct First {
  __device__ float operator()(float a, float) const { return a; }
};
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Axpy {
  float alpha;
  __device__ float operator()(float y, float x) const { return y + alpha * x; }
};
struct Scale {
  float alpha;
  __device__ float operator()(float x, float) const { return alpha * x; }
};

// Calls fn(T{}) for f32, bf16 or f16; another dtype throws "<op>: <name> has dtype ..."
template <typename Fn>
void dispatch_named(DType dtype, const char* op, const char* name, Fn&& fn) {
  if (dtype == DType::f32) return fn(float{});
  if (dtype == DType::bf16) return fn(bf16_t{});
  if (dtype == DType::f16) return fn(f16_t{});
  BRAID_THROW(op, ": ", name, " has dtype ", dtype_name(dtype), ", expected f32, bf16 or f16");
}

void convert_impl(const char* op, void* dst, DType dst_dtype, const void* src, DType src_dtype,
                  int64_t n) {
  if (n <= 0) return;
  dispatch_named(dst_dtype, op, "out", [&](auto otag) {
    dispatch_named(src_dtype, op, "in", [&](auto itag) {
      using D = decltype(otag);
      using S = decltype(itag);
      if constexpr (std::is_same_v<D, S>) {
        BRAID_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(D),
                                         cudaMemcpyDeviceToDevice, stream()),
                         op);
      } else {  // bf16 <-> f16 through f32: widening is exact, one rounding
        const S* s = static_cast<const S*>(src);
        launch_map2(op, static_cast<D*>(dst), s, s, n, First{});
      }
    });
  });
}

// ---- reductions: one partial per block, finished on the host in block order ----
constexpr int kReduceBlocks = 1024;

__device__ __forceinline__ double warp_sum_f64(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Thread 0 gets the block's sum (blockDim.x a multiple of 32).
__device__ __forceinline__ double block_sum_f64(double v) {
  __shared__ double shared[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum_f64(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : 0.0;
  return warp_sum_f64(v);
}

template <typename T>
__global__ void sum_squares_kernel(double* partial, const T* x, int64_t n) {
  double acc = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double e = ld(x + i);
    acc += e * e;
  }
  acc = block_sum_f64(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// ---- row-major [N, C] maps ----
// read: narrow[n, w] = wide[n, start + w]; add: wide[n, start + w] += narrow[n, w] (rounded
// once); write: wide[n, start + w] = narrow[n, w]. vec: W, CT and start multiples of 8 and the
// base pointers 16-byte aligned.
enum class Columns { read, add, write };

template <typename T, Columns kMode>
__global__ void columns_kernel(T* wide, T* narrow, int64_t N, int64_t W, int64_t CT, int64_t start,
                               bool vec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vec) {
    const int64_t W8 = W / 8, total = N * W8;
    for (int64_t j = first; j < total; j += stride) {
      const int64_t n = j / W8, w = (j % W8) * 8;
      T* pw = wide + n * CT + start + w;
      T* pn = narrow + n * W + w;
      float a[8], b[8];
      if constexpr (kMode == Columns::add) {
        load8(pw, a);
        load8(pn, b);
#pragma unroll
        for (int k = 0; k < 8; ++k) a[k] += b[k];
        store8(pw, a);
      } else if constexpr (kMode == Columns::write) {
        load8(pn, b);
        store8(pw, b);
      } else {
        load8(pw, a);
        store8(pn, a);
      }
    }
  } else {
    const int64_t total = N * W;
    for (int64_t j = first; j < total; j += stride) {
      const int64_t n = j / W, w = j % W;
      T* pw = wide + n * CT + start + w;
      T* pn = narrow + n * W + w;
      if constexpr (kMode == Columns::add) {
        st(pw, ld(pw) + ld(pn));
      } else if constexpr (kMode == Columns::write) {
        *pw = *pn;
      } else {
        *pn = *pw;
      }
    }
  }
}

template <typename T>
__global__ void bias_add_kernel(T* out, const T* x, const T* bias, int64_t N, int64_t C, bool vec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = N * C;
  if (vec) {
    for (int64_t i = first * 8; i < total; i += stride * 8) {
      const int64_t c = i % C;  // C % 8 == 0: the 8 elements share a row
      float a[8], b[8];
      load8(x + i, a);
      load8(bias + c, b);
#pragma unroll
      for (int k = 0; k < 8; ++k) a[k] += b[k];
      store8(out + i, a);
    }
  } else {
    for (int64_t i = first; i < total; i += stride) st(out + i, ld(x + i) + ld(bias + i % C));
  }
}

// dbias[c] += sum_n dout[n, c] in two deterministic stages (a one-stage kernel walking all N
// rows per column is latency-bound: 20x slower on GPT-2's 16k-row batches).
// Stage 1: block (32 lanes x 8 row lanes) per (column tile, row chunk): partial[k][c] = the
// chunk's column sum, in f32, row lanes combined in fixed order. Each lane owns V consecutive
// columns (V = 8 for bf16/f16 and 4 for f32 when the rows are 16-byte aligned: one 128-bit load
// per row, a warp reading 512 contiguous bytes; else V = 1).
template <typename T, int V>
__global__ void column_partial_kernel(float* partial, const T* dout, int64_t N, int64_t C,
                                      int64_t chunk) {
  __shared__ float part[8][32 * V + 1];
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x) * V;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t n1 = n0 + chunk < N ? n0 + chunk : N;
  float acc[V];
#pragma unroll
  for (int i = 0; i < V; ++i) acc[i] = 0.0f;
  if (c0 < C) {
    for (int64_t n = n0 + threadIdx.y; n < n1; n += 8) {
      if constexpr (V > 1) {
        const Pack128<T> p = load128(dout + n * C + c0);
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] += p.get(i);
      } else {
        acc[0] += ld(dout + n * C + c0);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < V; ++i) part[threadIdx.y][threadIdx.x * V + i] = acc[i];
  __syncthreads();
  // The block's 32 * V columns, summed over the 8 row lanes by the first 32 * V threads.
  const int tid = threadIdx.y * 32 + threadIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 * V + tid;
  if (tid < 32 * V && c < C) {
    float s = 0;
    for (int r = 0; r < 8; ++r) s += part[r][tid];
    partial[static_cast<int64_t>(blockIdx.y) * C + c] = s;
  }
}

// Stage 2: dbias[c] = float(ld(dbias[c]) + sum over chunks in order, in f64), as the CPU's
// add_sums adds its f64 sums.
template <typename G>
__global__ void column_sum_kernel(G* dbias, const float* partial, int64_t chunks, int64_t C) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < C;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double s = 0;
    for (int64_t k = 0; k < chunks; ++k) s += partial[k * C + c];
    st(dbias + c, static_cast<float>(static_cast<double>(ld(dbias + c)) + s));
  }
}

}  // namespace

void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n) {
  convert_impl("convert", dst, dst_dtype, src, src_dtype, n);
}

void cast(Tensor& out, const Tensor& in) {
  const char* op = "cast";
  check_cuda(op, {&out, &in});
  check_defined(op, "in", in);
  check_numel(op, "out", out, in.numel());
  convert_impl(op, out.device_data(), out.dtype(), in.device_data(), in.dtype(), in.numel());
}

void add_forward(Tensor& out, const Tensor& a, const Tensor& b) {
  const char* op = "add_forward";
  check_cuda(op, {&out, &a, &b});
  check_float(op, "a", a);
  check_same_dtype(op, "b", b, "a", a);
  check_same_dtype(op, "out", out, "a", a);
  BRAID_CHECK(a.numel() == b.numel() && out.numel() == a.numel(), op, ": a ", a.shape().str(),
              ", b ", b.shape().str(), " and out ", out.shape().str(), " differ in size");
  dispatch_float(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_map2(op, ptr<T>(out), ptr<T>(a), ptr<T>(b), a.numel(), Add{});
  });
}

void axpy(Tensor& y, const Tensor& x, float alpha) {
  const char* op = "axpy";
  check_cuda(op, {&y, &x});
  check_float(op, "y", y);
  check_float(op, "x", x);
  BRAID_CHECK(x.numel() == y.numel(), op, ": y ", y.shape().str(), " and x ", x.shape().str(),
              " differ in size");
  dispatch_float(y.dtype(), op, [&](auto ytag) {
    dispatch_float(x.dtype(), op, [&](auto xtag) {
      using TY = decltype(ytag);
      using TX = decltype(xtag);
      TY* py = ptr<TY>(y);
      launch_map2(op, py, static_cast<const TY*>(py), ptr<TX>(x), x.numel(), Axpy{alpha});
    });
  });
}

void scale(Tensor& x, float alpha) {
  const char* op = "scale";
  check_cuda(op, {&x});
  check_float(op, "x", x);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* p = ptr<T>(x);
    launch_map2(op, p, static_cast<const T*>(p), static_cast<const T*>(p), x.numel(), Scale{alpha});
  });
}

double sum_squares(const Tensor& x) {
  const char* op = "sum_squares";
  check_cuda(op, {&x});
  check_float(op, "x", x);
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  const unsigned blocks = grid_for(n, kThreads, kReduceBlocks);
  Scratch partial(blocks * sizeof(double));
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    sum_squares_kernel<<<blocks, kThreads, 0, stream()>>>(partial.as<double>(), ptr<T>(x), n);
    BRAID_CUDA_LAUNCHED(op);
  });
  std::vector<double> host(blocks);
  copy_to_host(host.data(), partial.get(), blocks * sizeof(double));
  double total = 0;
  for (double p : host) total += p;
  return total;
}

void copy_columns(Tensor& out, const Tensor& inp, int64_t start) {
  const char* op = "copy_columns";
  check_cuda(op, {&out, &inp});
  check_float(op, "inp", inp);
  check_same_dtype(op, "out", out, "inp", inp);
  const int64_t W = cols_of(out), CT = cols_of(inp), N = rows_of(out);
  BRAID_CHECK(rows_of(inp) == rows_of(out), op, ": inp ", inp.shape().str(), " and out ",
              out.shape().str(), " have different row counts");
  BRAID_CHECK(start >= 0 && start + W <= CT, op, ": columns [", start, ", ", start + W,
              ") out of range for inp ", inp.shape().str());
  if (N * W == 0) return;
  dispatch_float(inp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* wide = const_cast<T*>(ptr<T>(inp));  // only read (Columns::read)
    T* narrow = ptr<T>(out);
    const bool vec = W % 8 == 0 && CT % 8 == 0 && start % 8 == 0 && vec8(8, {wide, narrow});
    columns_kernel<T, Columns::read>
        <<<grid_for(vec ? N * W / 8 : N * W, kThreads), kThreads, 0, stream()>>>(wide, narrow, N, W,
                                                                                 CT, start, vec);
    BRAID_CUDA_LAUNCHED(op);
  });
}

void add_columns(Tensor& dinp, const Tensor& dout, int64_t start) {
  const char* op = "add_columns";
  check_cuda(op, {&dinp, &dout});
  check_float(op, "dinp", dinp);
  check_same_dtype(op, "dout", dout, "dinp", dinp);
  const int64_t W = cols_of(dout), CT = cols_of(dinp), N = rows_of(dout);
  BRAID_CHECK(rows_of(dinp) == rows_of(dout), op, ": dinp ", dinp.shape().str(), " and dout ",
              dout.shape().str(), " have different row counts");
  BRAID_CHECK(start >= 0 && start + W <= CT, op, ": columns [", start, ", ", start + W,
              ") out of range for dinp ", dinp.shape().str());
  if (N * W == 0) return;
  dispatch_float(dinp.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* wide = ptr<T>(dinp);
    T* narrow = const_cast<T*>(ptr<T>(dout));  // only read (Columns::add writes wide)
    const bool vec = W % 8 == 0 && CT % 8 == 0 && start % 8 == 0 && vec8(8, {wide, narrow});
    columns_kernel<T, Columns::add>
        <<<grid_for(vec ? N * W / 8 : N * W, kThreads), kThreads, 0, stream()>>>(wide, narrow, N, W,
                                                                                 CT, start, vec);
    BRAID_CUDA_LAUNCHED(op);
  });
}

void set_columns(Tensor& out, const Tensor& inp, int64_t start) {
  const char* op = "set_columns";
  check_cuda(op, {&out, &inp});
  // Shapes and dtypes checked by the ops.h entry (cpu/columns.cpp).
  const int64_t W = cols_of(inp), CT = cols_of(out), N = rows_of(inp);
  if (N * W == 0) return;
  dispatch_float(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* wide = ptr<T>(out);
    T* narrow = const_cast<T*>(ptr<T>(inp));  // only read (Columns::write writes wide)
    const bool vec = W % 8 == 0 && CT % 8 == 0 && start % 8 == 0 && vec8(8, {wide, narrow});
    columns_kernel<T, Columns::write>
        <<<grid_for(vec ? N * W / 8 : N * W, kThreads), kThreads, 0, stream()>>>(wide, narrow, N, W,
                                                                                 CT, start, vec);
    BRAID_CUDA_LAUNCHED(op);
  });
}

void bias_add_forward(Tensor& out, const Tensor& x, const Tensor& bias) {
  const char* op = "bias_add_forward";
  check_cuda(op, {&out, &x, &bias});
  const int64_t C = bias.numel(), N = rows_of(x);  // checked by the ops.h entry (cpu/bias.cpp)
  if (N * C == 0) return;
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* po = ptr<T>(out);
    const T* px = ptr<T>(x);
    const T* pb = ptr<T>(bias);
    const bool vec = C % 8 == 0 && vec8(8, {po, px, pb});
    bias_add_kernel<<<grid_for(vec ? N * C / 8 : N * C, kThreads), kThreads, 0, stream()>>>(
        po, px, pb, N, C, vec);
    BRAID_CUDA_LAUNCHED(op);
  });
}

void bias_add_backward(Tensor& dbias, const Tensor& dout) {
  const char* op = "bias_add_backward";
  check_cuda(op, {&dbias, &dout});
  // Checked by the ops.h entry (cpu/bias.cpp), or by linear_backward's when it calls this.
  const int64_t C = dbias.numel(), N = rows_of(dout);
  if (C == 0) return;
  dispatch_float(dout.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    dispatch_float(dbias.dtype(), op, [&](auto gtag) {
      using G = decltype(gtag);
      int64_t chunks = std::min<int64_t>(128, std::max<int64_t>(1, ceil_div(N, 64)));
      const int64_t chunk = ceil_div(std::max<int64_t>(N, 1), chunks);
      chunks = std::max<int64_t>(1, ceil_div(N, chunk));
      Scratch partial(static_cast<size_t>(chunks * C) * sizeof(float));
      constexpr int P = Pack128<T>::size;
      const bool packed = packable<T>(C, {ptr<T>(dout)});  // every row 16-byte aligned
      const int64_t per_block = packed ? 32 * P : 32;
      const dim3 grid(static_cast<unsigned>(ceil_div(C, per_block)), static_cast<unsigned>(chunks));
      if (packed) {
        column_partial_kernel<T, P>
            <<<grid, dim3(32, 8), 0, stream()>>>(partial.as<float>(), ptr<T>(dout), N, C, chunk);
      } else {
        column_partial_kernel<T, 1>
            <<<grid, dim3(32, 8), 0, stream()>>>(partial.as<float>(), ptr<T>(dout), N, C, chunk);
      }
      BRAID_CUDA_LAUNCHED(op);
      column_sum_kernel<<<grid_for(C, 256), 256, 0, stream()>>>(ptr<G>(dbias), partial.as<float>(),
                                                                chunks, C);
      BRAID_CUDA_LAUNCHED(op);
    });
  });
}

void add_column_sums(Tensor& dbias, const float* sums) {
  const char* op = "add_column_sums";
  check_cuda(op, {&dbias});
  const int64_t C = dbias.numel();
  if (C == 0) return;
  dispatch_float(dbias.dtype(), op, [&](auto gtag) {
    using G = decltype(gtag);
    column_sum_kernel<<<grid_for(C, 256), 256, 0, stream()>>>(ptr<G>(dbias), sums, 1, C);
    BRAID_CUDA_LAUNCHED(op);
  });
}

}  // namespace braid::kernels::cuda
