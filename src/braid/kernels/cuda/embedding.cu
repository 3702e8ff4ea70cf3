// Token (+ position) embedding on the GPU (contract: kernels/ops.h, cpu/embedding.cpp).
// Forward: ids are validated on the device before any write (a kernel records the first bad
// flat offset, which is copied back and reported with the CPU's message); then one thread per
// element (or 128-bit pack) gathers wte[id] (+ wpe[t]). Backward, deterministic:
//   dwpe[t] += sum_b dout[b,t], one thread per (t, c) summing b in order;
//   dwte: the ids are validated on the device, (local row, position) pairs are sorted by row
//   on the device (CUB's radix sort, stable: positions stay in order), and the first pair of
//   each row's run sums the run's dout rows in position order and adds them once into dwte.
// dwte and dwpe may be f32 for bf16/f16 dout (Note [Parameter gradients], ops.h).
#include <algorithm>
#include <climits>
#include <vector>

#include <cub/device/device_radix_sort.cuh>

#include "braid/kernels/checks.h"
#include "braid/kernels/cuda/common.cuh"
#include "braid/kernels/cuda/cuda_ops.h"

namespace braid::kernels::cuda {

namespace {

constexpr int kBlock = 256;

struct EmbedDims {
  int64_t B, T, C, V;
};

// ---- kernels ----

// first = min flat offset i with a bad ids[i] (slice: negative; else outside [0, V)).
__global__ void find_bad_id_kernel(unsigned long long* first, const int32_t* ids, int64_t n,
                                   int64_t V, bool is_slice) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t id = ids[i];
    if (id < 0 || (!is_slice && id >= V)) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

// out[n, c..c+P) = wte[ids[n] - v0] (+ wpe[n % T]); zero for ids outside [v0, v0 + V).
template <typename T, int P>
__global__ void embedding_forward_kernel(T* __restrict__ out, const int32_t* __restrict__ ids,
                                         const T* __restrict__ wte, const T* __restrict__ wpe,
                                         int64_t N, int64_t T_, int64_t C, int64_t V, int64_t v0) {
  const int64_t total = N * C;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * P; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x * P) {
    const int64_t n = i / C, c = i % C;  // C % P == 0: a pack never crosses a row
    const int64_t v = static_cast<int64_t>(ids[n]) - v0;
    if constexpr (P == 1) {
      float o = 0.0f;
      if (v >= 0 && v < V) {
        o = ld(wte + v * C + c);
        if (wpe) o += ld(wpe + (n % T_) * C + c);
      }
      st(out + i, o);
    } else {
      Pack128<T> o;
      if (v >= 0 && v < V) {
        o = load128(wte + v * C + c);
        if (wpe) {
          const Pack128<T> p = load128(wpe + (n % T_) * C + c);
#pragma unroll
          for (int j = 0; j < P; ++j) o.set(j, o.get(j) + p.get(j));
        }
      } else {
#pragma unroll
        for (int j = 0; j < P; ++j) o.set(j, 0.0f);
      }
      store128(out + i, o);
    }
  }
}

// dwpe[t, c] += sum_b dout[b, t, c], b in order, one rounding.
template <typename T, typename G>
__global__ void embedding_pos_backward_kernel(G* __restrict__ dwpe, const T* __restrict__ dout,
                                              int64_t B, int64_t T_, int64_t C) {
  const int64_t total = T_ * C;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = ld(dwpe + i);
    for (int64_t b = 0; b < B; ++b) acc += ld(dout + b * total + i);
    st(dwpe + i, acc);
  }
}

// keys[n] = the local row of position n (ids[n] - v0), or `none` when another rank holds it;
// vals[n] = n. Sorted stably by key (radix sort), each row's positions stay in order.
__global__ void embedding_keys_kernel(int32_t* keys, int32_t* vals, const int32_t* ids, int64_t N,
                                      int64_t v0, int64_t V, int32_t none) {
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < N;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t v = static_cast<int64_t>(ids[n]) - v0;
    keys[n] = v >= 0 && v < V ? static_cast<int32_t>(v) : none;
    vals[n] = static_cast<int32_t>(n);
  }
}

// Over the sorted (key, position) pairs: the first pair of each run of equal keys (its head)
// sums the run's dout rows in position order into dwte[key], one rounding. Block
// (blockIdx.x = column tile, blockIdx.y strides the sorted pairs).
template <typename T, typename G>
__global__ void embedding_rows_backward_kernel(G* __restrict__ dwte, const T* __restrict__ dout,
                                               const int32_t* __restrict__ keys,
                                               const int32_t* __restrict__ positions, int64_t N,
                                               int64_t C, int32_t none) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t j = blockIdx.y; j < N; j += gridDim.y) {
    const int32_t key = keys[j];
    if (key == none || (j > 0 && keys[j - 1] == key)) continue;
    G* w = dwte + static_cast<int64_t>(key) * C + c;
    float acc = ld(w);
    for (int64_t i = j; i < N && keys[i] == key; ++i)
      acc += ld(dout + static_cast<int64_t>(positions[i]) * C + c);
    st(w, acc);
  }
}

// ---- host side ----

void check_v0(const char* op, int64_t v0) {
  BRAID_CHECK(v0 >= 0, op, ": v0=", v0, " must be >= 0");
}

[[noreturn]] void throw_bad_id(const char* op, const Tensor& ids, int64_t i, int32_t id,
                               bool is_slice, int64_t V) {
  if (is_slice)
    BRAID_THROW(op, ": token id ", id, " at position ", i, " (flat offset in ids ",
                ids.shape().str(), ") is negative");
  BRAID_THROW(op, ": token id ", id, " at position ", i, " (flat offset in ids ", ids.shape().str(),
              ") is out of range for vocab size ", V);
}

// The CPU's shape checks (ids are validated separately: on the device or on the host).
EmbedDims check_embedding(const char* op, const Tensor& ids, const Tensor& table,
                          const char* table_name, const Tensor* pos, const char* pos_name) {
  check_dtype(op, "ids", ids, DType::i32);
  check_float(op, table_name, table);
  BRAID_CHECK(table.dim() == 2, op, ": ", table_name, " must be [V,C], got ", table.shape().str());
  BRAID_CHECK(ids.dim() == 1 || ids.dim() == 2, op, ": ids must be [B,T] or [T], got ",
              ids.shape().str());
  EmbedDims d{ids.dim() == 2 ? ids.size(0) : 1, ids.size(-1), table.size(1), table.size(0)};
  if (pos) {
    BRAID_CHECK(pos->dim() == 2 && pos->size(1) == d.C, op, ": ", pos_name, " ", pos->shape().str(),
                " must be [maxT,", d.C, "]");
    BRAID_CHECK(d.T <= pos->size(0), op, ": sequence length T=", d.T, " exceeds ", pos_name,
                " rows maxT=", pos->size(0));
  }
  return d;
}

// Device-side validation of ids: throws the CPU's message for the first bad flat offset.
void validate_ids_on_device(const char* op, const Tensor& ids, int64_t V, bool is_slice) {
  const int64_t n = ids.numel();
  if (n == 0) return;
  Scratch first(sizeof(unsigned long long));
  auto* f = first.as<unsigned long long>();
  BRAID_CUDA_CHECK(cudaMemsetAsync(f, 0xff, sizeof(unsigned long long), stream()), op);
  const int32_t* id = ptr<int32_t>(ids);
  find_bad_id_kernel<<<grid_for(n, kBlock), kBlock, 0, stream()>>>(f, id, n, V, is_slice);
  BRAID_CUDA_LAUNCHED(op);
  unsigned long long bad = 0;
  copy_to_host(&bad, f, sizeof(bad));
  if (bad == ULLONG_MAX) return;
  int32_t value = 0;
  copy_to_host(&value, id + bad, sizeof(value));
  throw_bad_id(op, ids, static_cast<int64_t>(bad), value, is_slice, V);
}

void launch_forward(const char* op, Tensor& out, const Tensor& ids, const Tensor& wte,
                    const Tensor* wpe, const EmbedDims& d, int64_t v0) {
  const int64_t N = d.B * d.T;
  if (N * d.C == 0) return;
  dispatch_float(wte.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* o = ptr<T>(out);
    const T* w = ptr<T>(wte);
    const T* p = wpe ? ptr<T>(*wpe) : nullptr;
    const int32_t* id = ptr<int32_t>(ids);
    constexpr int P = Pack128<T>::size;
    if (packable<T>(d.C, {o, w, p})) {
      embedding_forward_kernel<T, P><<<grid_for(N * d.C / P, kBlock), kBlock, 0, stream()>>>(
          o, id, w, p, N, d.T, d.C, d.V, v0);
    } else {
      embedding_forward_kernel<T, 1>
          <<<grid_for(N * d.C, kBlock), kBlock, 0, stream()>>>(o, id, w, p, N, d.T, d.C, d.V, v0);
    }
    BRAID_CUDA_LAUNCHED(op);
  });
}

// dwte[ids[n] - v0] += dout[n] for ids in [v0, v0 + V) (ids already validated), sorted on the
// device: no copy of the ids to the host.
void launch_rows_backward(const char* op, Tensor& dwte, const Tensor& dout, const Tensor& ids,
                          const EmbedDims& d, int64_t v0) {
  const int64_t N = ids.numel();
  if (N == 0 || d.C == 0 || d.V == 0) return;
  BRAID_CHECK(N < INT32_MAX && d.V < INT32_MAX, op, ": ", N, " positions over ", d.V,
              " rows exceed the device sort's 32-bit keys");
  const int32_t none = static_cast<int32_t>(d.V);
  Scratch pairs(static_cast<size_t>(4 * N) * sizeof(int32_t));
  int32_t* keys_in = pairs.as<int32_t>();
  int32_t* vals_in = keys_in + N;
  int32_t* keys = vals_in + N;
  int32_t* positions = keys + N;
  embedding_keys_kernel<<<grid_for(N, kBlock), kBlock, 0, stream()>>>(
      keys_in, vals_in, ptr<int32_t>(ids), N, v0, d.V, none);
  BRAID_CUDA_LAUNCHED(op);
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) <= d.V) ++bits;  // keys in [0, V]
  size_t temp_bytes = 0;
  BRAID_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys, vals_in, positions,
                                      static_cast<int>(N), 0, bits, stream()),
      op);
  Scratch temp(std::max<size_t>(temp_bytes, 16));
  BRAID_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, keys_in, keys, vals_in, positions,
                                      static_cast<int>(N), 0, bits, stream()),
      op);
  dispatch_float(dout.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    dispatch_float(dwte.dtype(), op, [&](auto gtag) {
      using G = decltype(gtag);
      const int64_t tiles = ceil_div(d.C, kBlock);
      dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(std::min<int64_t>(N, 65535)));
      embedding_rows_backward_kernel<T, G><<<grid, kBlock, 0, stream()>>>(
          ptr<G>(dwte), ptr<T>(dout), keys, positions, N, d.C, none);
      BRAID_CUDA_LAUNCHED(op);
    });
  });
}

void launch_pos_backward(const char* op, Tensor& dwpe, const Tensor& dout, const EmbedDims& d) {
  if (d.T * d.C == 0) return;
  dispatch_float(dout.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    dispatch_float(dwpe.dtype(), op, [&](auto gtag) {
      using G = decltype(gtag);
      embedding_pos_backward_kernel<T, G><<<grid_for(d.T * d.C, kBlock), kBlock, 0, stream()>>>(
          ptr<G>(dwpe), ptr<T>(dout), d.B, d.T, d.C);
      BRAID_CUDA_LAUNCHED(op);
    });
  });
}

}  // namespace

void embedding_forward(Tensor& out, const Tensor& ids, const Tensor& wte, const Tensor* wpe) {
  const char* op = "embedding_forward";
  check_cuda(op, {&out, &ids, &wte, wpe});
  EmbedDims d = check_embedding(op, ids, wte, "wte", wpe, "wpe");
  validate_ids_on_device(op, ids, d.V, false);
  if (wpe) check_same_dtype(op, "wpe", *wpe, "wte", wte);
  check_same_dtype(op, "out", out, "wte", wte);
  BRAID_CHECK(out.numel() == d.B * d.T * d.C, op, ": out has shape ", out.shape().str(),
              ", expected [", d.B, ",", d.T, ",", d.C, "]");
  launch_forward(op, out, ids, wte, wpe, d, 0);
}

void embedding_slice_forward(Tensor& out, const Tensor& ids, const Tensor& wte, int64_t v0) {
  const char* op = "embedding_slice_forward";
  check_cuda(op, {&out, &ids, &wte});
  EmbedDims d = check_embedding(op, ids, wte, "wte", nullptr, "");
  validate_ids_on_device(op, ids, d.V, true);
  check_v0(op, v0);
  check_same_dtype(op, "out", out, "wte", wte);
  BRAID_CHECK(out.numel() == d.B * d.T * d.C, op, ": out has shape ", out.shape().str(),
              ", expected [", d.B, ",", d.T, ",", d.C, "]");
  launch_forward(op, out, ids, wte, nullptr, d, v0);
}

void embedding_backward(Tensor* dwte, Tensor* dwpe, const Tensor& dout, const Tensor& ids) {
  const char* op = "embedding_backward";
  check_cuda(op, {dwte, dwpe, &dout, &ids});
  check_float(op, "dout", dout);
  if (!dwte && !dwpe) return;
  BRAID_CHECK(dwte || ids.dtype() == DType::i32, op, ": ids must be i32");
  EmbedDims d{};
  if (dwte) {
    d = check_embedding(op, ids, *dwte, "dwte", dwpe, "dwpe");
    validate_ids_on_device(op, ids, d.V, false);
    check_param_grad(op, "dwte", *dwte, "dout", dout);
  } else {
    check_dtype(op, "ids", ids, DType::i32);
    d = {ids.dim() == 2 ? ids.size(0) : 1, ids.size(-1), dwpe->size(-1), 0};
    BRAID_CHECK(dwpe->dim() == 2 && d.T <= dwpe->size(0), op, ": dwpe ", dwpe->shape().str(),
                " cannot hold T=", d.T, " positions");
  }
  if (dwpe) check_param_grad(op, "dwpe", *dwpe, "dout", dout);
  BRAID_CHECK(dout.numel() == d.B * d.T * d.C, op, ": dout has shape ", dout.shape().str(),
              ", expected [", d.B, ",", d.T, ",", d.C, "]");
  if (dwte) launch_rows_backward(op, *dwte, dout, ids, d, 0);
  if (dwpe) launch_pos_backward(op, *dwpe, dout, d);
}

void embedding_slice_backward(Tensor& dwte, const Tensor& dout, const Tensor& ids, int64_t v0) {
  const char* op = "embedding_slice_backward";
  check_cuda(op, {&dwte, &dout, &ids});
  check_float(op, "dout", dout);
  EmbedDims d = check_embedding(op, ids, dwte, "dwte", nullptr, "");
  validate_ids_on_device(op, ids, d.V, true);
  check_v0(op, v0);
  check_param_grad(op, "dwte", dwte, "dout", dout);
  BRAID_CHECK(dout.numel() == d.B * d.T * d.C, op, ": dout has shape ", dout.shape().str(),
              ", expected [", d.B, ",", d.T, ",", d.C, "]");
  launch_rows_backward(op, dwte, dout, ids, d, v0);
}

}  // namespace braid::kernels::cuda
