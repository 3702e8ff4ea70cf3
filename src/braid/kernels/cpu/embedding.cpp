// Token (+ position) embedding.
//   ids[B,T] i32 (a 1-D ids is [1,T]), wte[V,C], wpe[maxT,C] (optional, T <= maxT),
//   out[B,T,C] = wte[ids[b,t]] + wpe[t]
//   backward: dwte[ids[b,t]] += dout[b,t]; dwpe[t] += sum_b dout[b,t]
// Vocab slices (tensor parallelism): wte[Vl,C] holds rows [v0, v0+Vl) of the table; ids
//   outside the slice give zero rows forward and are skipped backward. The full-table ops are
//   the slice v0 = 0, Vl = V whose ids must all fall in it: one code path, the same bits.
// Ids are validated before any write: an id outside [0, V) (a slice: a negative id) throws
// naming its flat offset.
// The backward is race-free and deterministic: thread k owns the (local) vocabulary rows
// v % nthreads == k and visits positions in order, so every row sums its dout rows in
// position order whatever the thread count or the slicing. dwte and dwpe each have dout's
// dtype or f32 (Note [Parameter gradients], ops.h).
#include <algorithm>
#include <cstring>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::kernels {

using namespace cpu;

namespace {

struct EmbedDims {
  int64_t B, T, C, V;
};

// pos's dtype is checked by the caller. A slice (is_slice) checks ids >= 0 only.
EmbedDims check_embedding(const char* op, const Tensor& ids, const Tensor& table,
                          const char* table_name, const Tensor* pos, const char* pos_name,
                          bool is_slice = false) {
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
  const int32_t* id = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    if (is_slice) {
      BRAID_CHECK(id[i] >= 0, op, ": token id ", id[i], " at position ", i, " (flat offset in ids ",
                  ids.shape().str(), ") is negative");
    } else {
      BRAID_CHECK(id[i] >= 0 && id[i] < d.V, op, ": token id ", id[i], " at position ", i,
                  " (flat offset in ids ", ids.shape().str(), ") is out of range for vocab size ",
                  d.V);
    }
  }
  return d;
}

void check_v0(const char* op, int64_t v0) {
  BRAID_CHECK(v0 >= 0, op, ": v0=", v0, " must be >= 0");
}

// out[n] = wte[id[n] - v0] (+ wpe[n % T]), zero rows for ids outside [v0, v0 + V).
void forward_rows(const char* op, Tensor& out, const int32_t* id, const Tensor& wte,
                  const Tensor* wpe, const EmbedDims& d, int64_t v0) {
  int64_t C = d.C, T = d.T;
  dispatch_float(wte.dtype(), op, [&](auto tag) {
    using T_ = decltype(tag);
    const T_* w = wte.data<T_>();
    const T_* p = wpe ? wpe->data<T_>() : nullptr;
    T_* o = out.data<T_>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < d.B * T; ++n) {
      const int64_t v = static_cast<int64_t>(id[n]) - v0;
      T_* orow = o + n * C;
      if (v < 0 || v >= d.V) {
        std::memset(orow, 0, static_cast<size_t>(C) * sizeof(T_));  // +0 in every dtype
        continue;
      }
      const T_* wr = w + v * C;
      if (p) {
        const T_* pr = p + (n % T) * C;
        for (int64_t c0 = 0; c0 < C; c0 += kBlock) {  // Note [Blocked loops]
          const int64_t m = std::min(kBlock, C - c0);
          float wb[kBlock], pb[kBlock], ob[kBlock];
          const auto wv = f32_in(wr + c0, m, wb);
          const auto pv = f32_in(pr + c0, m, pb);
          float* ov = f32_out(orow + c0, ob);
          for (int64_t c = 0; c < m; ++c) ov[c] = wv[c] + pv[c];
          commit(orow + c0, ov, m);
        }
      } else {
        std::memcpy(orow, wr, static_cast<size_t>(C) * sizeof(T_));
      }
    }
  });
}

// dwte[id[n] - v0] += dout[n] for ids in [v0, v0 + V) (Note at the top: thread k owns the
// local rows v % nthreads == k).
void backward_rows(const char* op, Tensor& dwte, const Tensor& dout, const int32_t* id,
                   const EmbedDims& d, int64_t v0) {
  int64_t C = d.C, N = d.B * d.T;
  dispatch_float(dout.dtype(), op, [&](auto tag) {
    using T_ = decltype(tag);
    const T_* g = dout.data<T_>();
    dispatch_float(dwte.dtype(), op, [&](auto gtag) {
      using G = decltype(gtag);
      G* w = dwte.data<G>();
#pragma omp parallel
      {
        int nt = omp_get_num_threads(), k = omp_get_thread_num();
        for (int64_t n = 0; n < N; ++n) {
          const int64_t v = static_cast<int64_t>(id[n]) - v0;
          if (v < 0 || v >= d.V || v % nt != k) continue;
          G* wr = w + v * C;
          const T_* gr = g + n * C;
          for (int64_t c0 = 0; c0 < C; c0 += kBlock) {  // Note [Blocked loops]
            const int64_t m = std::min(kBlock, C - c0);
            float gb[kBlock], wb[kBlock];
            const auto gv = f32_in(gr + c0, m, gb);
            float* wv = f32_inout(wr + c0, m, wb);
            for (int64_t c = 0; c < m; ++c) wv[c] = wv[c] + gv[c];
            commit(wr + c0, wv, m);
          }
        }
      }
    });
  });
}

// dwpe[t] += sum_b dout[b,t]
void backward_pos(const char* op, Tensor& dwpe, const Tensor& dout, const EmbedDims& d) {
  int64_t C = d.C, T = d.T;
  dispatch_float(dout.dtype(), op, [&](auto tag) {
    using T_ = decltype(tag);
    const T_* g = dout.data<T_>();
    dispatch_float(dwpe.dtype(), op, [&](auto gtag) {
      using G = decltype(gtag);
      G* p = dwpe.data<G>();
      const TeamScratch<float> acc_s(0, C);
#pragma omp parallel for schedule(static)
      for (int64_t t = 0; t < T; ++t) {
        float* acc = acc_s.mine();  // per thread; one rounding per element for bf16, f16
        G* pr = p + t * C;
        load_row(acc, pr, C);
        for (int64_t b = 0; b < d.B; ++b) {
          const T_* gr = g + (b * T + t) * C;
          for (int64_t c0 = 0; c0 < C; c0 += kBlock) {
            const int64_t m = std::min(kBlock, C - c0);
            float gb[kBlock];
            const auto gv = f32_in(gr + c0, m, gb);
            for (int64_t c = 0; c < m; ++c) acc[c0 + c] += gv[c];
          }
        }
        store_row(pr, acc, C);
      }
    });
  });
}

}  // namespace

void embedding_forward(Tensor& out, const Tensor& ids, const Tensor& wte, const Tensor* wpe) {
  BRAID_DEVICE_DISPATCH(embedding_forward, (out, ids, wte, wpe), &out, &ids, &wte, wpe);
  const char* op = "embedding_forward";
  check_cpu(op, {&out, &ids, &wte, wpe});
  EmbedDims d = check_embedding(op, ids, wte, "wte", wpe, "wpe");
  if (wpe) check_same_dtype(op, "wpe", *wpe, "wte", wte);
  check_same_dtype(op, "out", out, "wte", wte);
  BRAID_CHECK(out.numel() == d.B * d.T * d.C, op, ": out has shape ", out.shape().str(),
              ", expected [", d.B, ",", d.T, ",", d.C, "]");
  forward_rows(op, out, ids.data<int32_t>(), wte, wpe, d, 0);
}

void embedding_slice_forward(Tensor& out, const Tensor& ids, const Tensor& wte, int64_t v0) {
  BRAID_DEVICE_DISPATCH(embedding_slice_forward, (out, ids, wte, v0), &out, &ids, &wte);
  const char* op = "embedding_slice_forward";
  check_cpu(op, {&out, &ids, &wte});
  EmbedDims d = check_embedding(op, ids, wte, "wte", nullptr, "", true);
  check_v0(op, v0);
  check_same_dtype(op, "out", out, "wte", wte);
  BRAID_CHECK(out.numel() == d.B * d.T * d.C, op, ": out has shape ", out.shape().str(),
              ", expected [", d.B, ",", d.T, ",", d.C, "]");
  forward_rows(op, out, ids.data<int32_t>(), wte, nullptr, d, v0);
}

void embedding_backward(Tensor* dwte, Tensor* dwpe, const Tensor& dout, const Tensor& ids) {
  BRAID_DEVICE_DISPATCH(embedding_backward, (dwte, dwpe, dout, ids), dwte, dwpe, &dout, &ids);
  const char* op = "embedding_backward";
  check_cpu(op, {dwte, dwpe, &dout, &ids});
  check_float(op, "dout", dout);
  if (!dwte && !dwpe) return;
  BRAID_CHECK(dwte || ids.dtype() == DType::i32, op, ": ids must be i32");
  // Validate against dwte when given (its rows are the vocabulary); dwpe alone needs C only.
  EmbedDims d{};
  if (dwte) {
    d = check_embedding(op, ids, *dwte, "dwte", dwpe, "dwpe");
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
  const int32_t* id = ids.data<int32_t>();
  if (dwte) backward_rows(op, *dwte, dout, id, d, 0);
  if (dwpe) backward_pos(op, *dwpe, dout, d);
}

void embedding_slice_backward(Tensor& dwte, const Tensor& dout, const Tensor& ids, int64_t v0) {
  BRAID_DEVICE_DISPATCH(embedding_slice_backward, (dwte, dout, ids, v0), &dwte, &dout, &ids);
  const char* op = "embedding_slice_backward";
  check_cpu(op, {&dwte, &dout, &ids});
  check_float(op, "dout", dout);
  EmbedDims d = check_embedding(op, ids, dwte, "dwte", nullptr, "", true);
  check_v0(op, v0);
  check_param_grad(op, "dwte", dwte, "dout", dout);
  BRAID_CHECK(dout.numel() == d.B * d.T * d.C, op, ": dout has shape ", dout.shape().str(),
              ", expected [", d.B, ",", d.T, ",", d.C, "]");
  backward_rows(op, dwte, dout, ids.data<int32_t>(), d, v0);
}

}  // namespace braid::kernels
