// The dimensions and layout of one CPU attention call (internal to cpu/attention.cpp and
// cpu/attention_bf16.cpp), and the bf16 tile kernels' entry points (Note [bf16 attention tiles],
// attention_bf16.h).
#pragma once

#include <cstdint>

#include "braid/kernels/cpu/attention_tiles.h"
#include "braid/kernels/cpu/common.h"

namespace braid::kernels::cpu {

struct AttnDims {
  int64_t B, Tq, Tk, NH, NKV, HS;
  bool causal;
  // Where q's and k/v's rows lie (Note [Packed qkv]): a row's stride in elements, the same for
  // dq and dk/dv; out and dout are always [B,Tq,NH,HS]. Gradients are added into (accumulate)
  // or set.
  int64_t q_rs = NH * HS, kv_rs = NKV * HS;
  bool accumulate = true;

  int64_t q_off(int64_t b, int64_t h) const { return b * Tq * q_rs + h * HS; }
  int64_t kv_off(int64_t b, int64_t kvh) const { return b * Tk * kv_rs + kvh * HS; }
  int64_t o_off(int64_t b, int64_t h) const { return (b * Tq * NH + h) * HS; }
  int64_t o_rs() const { return NH * HS; }
  // A gradient row: added into dst or set.
  template <typename T>
  void put_grad(T* dst, const float* src, int64_t n) const {
    if (accumulate)
      add_row(dst, src, n);
    else
      store_row(dst, src, n);
  }

  // Key blocks query block i0 (of bq rows) reads: [0, key_end).
  int64_t key_end(int64_t i0, int64_t bq) const { return causal ? i0 + bq : Tk; }
  // Query blocks key block j0 is read by: [query_begin, Tq).
  int64_t query_begin(int64_t j0) const { return causal ? j0 : 0; }
  // The tile's diag (attention_tiles.h): the causal mask, or none.
  int64_t diag(int64_t i0, int64_t j0) const { return causal ? i0 - j0 : kNoMask; }
};

#ifdef __AVX512BF16__
// forward_impl and backward_impl (cpu/attention.cpp) for bf16 on vdpbf16ps tiles.
void forward_bf16(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                  const AttnDims& d);
void backward_bf16(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k,
                   const bf16* v, const bf16* out, const float* lse, const AttnDims& d);
#endif

}  // namespace braid::kernels::cpu
