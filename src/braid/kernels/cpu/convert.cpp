// Element conversions between f32, bf16 and f16: the row helpers of common.h (load_row,
// store_row, add_row) and the cast op, all bit-identical to core/dtype.h's scalar conversions.
//
// Note [Vector conversions]: with AVX-512 a row is converted 16 elements at a time, the tail
// through the scalar conversions; elsewhere every element goes through them.
//  - bf16 -> f32 is a 16-bit shift. f32 -> bf16 rounds to nearest even with integer adds
//    (u + 0x7fff + lsb) >> 16 and keeps NaNs NaN (quiet bit set), exactly as
//    f32_to_bf16_bits. With AVX512-BF16, vcvtneps2bf16 does the same in one instruction
//    except that it flushes f32 denormals to zero (0x00400000 gives 0x0000, not 0x0040), so
//    it is used for the vectors that hold no denormal (vfpclassps), nearly all of them.
//  - f16 <-> f32 is vcvtph2ps / vcvtps2ph (AVX-512F) with round to nearest even, the
//    instructions the compiler emits for core/dtype.h's _Float16 casts: denormals exact,
//    overflow (|x| >= 65520) gives inf, NaNs stay NaN.
// GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics (their
// _mm512_undefined_* pass-through operands, GCC bug 105593): silenced for that header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstring>

#include "braid/kernels/cpu/common.h"
#include "braid/kernels/device.h"
#include "braid/kernels/ops.h"

namespace braid::kernels::cpu {

namespace {

#if defined(__AVX512F__)
constexpr int64_t kVec = 16;

inline __m512 ld16(const float* p) {
  return _mm512_loadu_ps(p);
}
inline __m512 ld16(const bf16* p) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
inline __m512 ld16(const f16* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline void st16(float* p, __m512 v) {
  _mm512_storeu_ps(p, v);
}
inline void st16_bf16_integer(bf16* p, __m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
}
inline void st16(bf16* p, __m512 v) {
#if defined(__AVX512BF16__)
  // vcvtneps2bf16 rounds and quiets NaNs as f32_to_bf16_bits does, in one instruction, but
  // flushes f32 denormals to zero: a vector holding one (class bit 0x20) takes the integer path.
  if (_mm512_fpclass_ps_mask(v, 0x20) == 0) [[likely]] {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
    return;
  }
#endif
  st16_bf16_integer(p, v);
}
inline void st16(f16* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// dst[0:16) = src[0:16) (converted); dst[0:16) += src[0:16) (f32 add, one rounding).
template <typename D, typename S>
inline void convert_block(D* dst, const S* src) {
  st16(dst, ld16(src));
}
template <typename D>
inline void add_block(D* dst, const float* src) {
  st16(dst, _mm512_add_ps(ld16(dst), _mm512_loadu_ps(src)));
}
#else
constexpr int64_t kVec = 1;  // portable: the scalar conversions of core/dtype.h

template <typename D, typename S>
inline void convert_block(D* dst, const S* src) {
  st(dst, ld(src));
}
template <typename D>
inline void add_block(D* dst, const float* src) {
  st(dst, ld(dst) + *src);
}
#endif

template <typename D, typename S>
void convert_row(D* dst, const S* src, int64_t n) {
  int64_t i = 0;
  for (; i + kVec <= n; i += kVec) convert_block(dst + i, src + i);
  for (; i < n; ++i) st(&dst[i], ld(&src[i]));
}

template <typename D>
void add_row_impl(D* dst, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + kVec <= n; i += kVec) add_block(dst + i, src + i);
  for (; i < n; ++i) st(&dst[i], ld(&dst[i]) + src[i]);
}

}  // namespace

void load_row(float* dst, const float* src, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void load_row(float* dst, const bf16* src, int64_t n) {
  convert_row(dst, src, n);
}
void load_row(float* dst, const f16* src, int64_t n) {
  convert_row(dst, src, n);
}
void store_row(float* dst, const float* src, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void store_row(bf16* dst, const float* src, int64_t n) {
  convert_row(dst, src, n);
}
void store_row(f16* dst, const float* src, int64_t n) {
  convert_row(dst, src, n);
}
void add_row(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}
void add_row(bf16* dst, const float* src, int64_t n) {
  add_row_impl(dst, src, n);
}
void add_row(f16* dst, const float* src, int64_t n) {
  add_row_impl(dst, src, n);
}

namespace {

template <typename D>
void write_back_impl(D* dst, const float* src, int64_t n, float beta) {
  constexpr int64_t kBlock = 2048;
#pragma omp parallel for schedule(static) if (n > 4 * kBlock)
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t m = std::min(kBlock, n - i0);
    if (beta == 0.0f) {
      store_row(dst + i0, src + i0, m);
    } else if (beta == 1.0f) {
      add_row(dst + i0, src + i0, m);
    } else {
      float buf[kBlock];
      load_row(buf, dst + i0, m);
      for (int64_t j = 0; j < m; ++j) buf[j] = src[i0 + j] + beta * buf[j];
      store_row(dst + i0, buf, m);
    }
  }
}

}  // namespace

void write_back(float* dst, const float* src, int64_t n, float beta) {
  write_back_impl(dst, src, n, beta);
}
void write_back(bf16* dst, const float* src, int64_t n, float beta) {
  write_back_impl(dst, src, n, beta);
}
void write_back(f16* dst, const float* src, int64_t n, float beta) {
  write_back_impl(dst, src, n, beta);
}

}  // namespace braid::kernels::cpu

namespace braid::kernels {

using namespace cpu;

namespace {

// Calls fn(T{}) with T = float, bf16 or f16 according to dtype; other dtypes throw.
template <typename Fn>
void dispatch_cast(DType dtype, const char* name, Fn&& fn) {
  if (dtype == DType::f32) return fn(float{});
  if (dtype == DType::bf16) return fn(bf16{});
  if (dtype == DType::f16) return fn(f16{});
  BRAID_THROW("cast: ", name, " has dtype ", dtype_name(dtype), ", expected f32, bf16 or f16");
}

}  // namespace

void cast(Tensor& out, const Tensor& in) {
  BRAID_DEVICE_DISPATCH(cast, (out, in), &out, &in);
  const char* op = "cast";
  check_cpu(op, {&out, &in});
  check_defined(op, "in", in);
  check_numel(op, "out", out, in.numel());
  // Blocks of 16 Ki elements (64 KiB of f32): big enough to amortise the loop, small enough to
  // spread a 1M-element tensor over every thread. Small tensors stay on the calling thread.
  constexpr int64_t kBlock = 1 << 14;
  const int64_t n = in.numel(), nblocks = (n + kBlock - 1) / kBlock;
  dispatch_cast(out.dtype(), "out", [&](auto otag) {
    dispatch_cast(in.dtype(), "in", [&](auto itag) {
      using D = decltype(otag);
      using S = decltype(itag);
      D* dst = out.data<D>();
      const S* src = in.data<S>();
#pragma omp parallel for schedule(static) if (nblocks > 1)
      for (int64_t b = 0; b < nblocks; ++b) {
        const int64_t i0 = b * kBlock, m = std::min(kBlock, n - i0);
        if constexpr (std::is_same_v<D, S>) {
          std::memcpy(dst + i0, src + i0, static_cast<size_t>(m) * sizeof(D));
        } else if constexpr (std::is_same_v<D, float> || std::is_same_v<S, float>) {
          convert_row(dst + i0, src + i0, m);
        } else {  // bf16 <-> f16 through f32, 1 Ki elements at a time
          float tmp[1024];
          for (int64_t j = 0; j < m; j += 1024) {
            const int64_t k = std::min<int64_t>(1024, m - j);
            load_row(tmp, src + i0 + j, k);
            store_row(dst + i0 + j, tmp, k);
          }
        }
      }
    });
  });
}

}  // namespace braid::kernels
