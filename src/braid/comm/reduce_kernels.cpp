#include "braid/comm/reduce_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "braid/core/error.h"

namespace braid::comm {

namespace {

constexpr int64_t kBlock = 1024;  // elements per block: the accumulator stays in L1

// Element codecs: how one stored element becomes an accumulator value and back.
struct F32 {
  using Elem = float;
  using Acc = float;
  static Acc load(Elem e) { return e; }
  static Elem store(Acc a) { return a; }
};
struct BF16 {
  using Elem = uint16_t;
  using Acc = float;
  static Acc load(Elem e) { return bf16_bits_to_f32(e); }
  static Elem store(Acc a) { return f32_to_bf16_bits(a); }
};
struct F16 {
  using Elem = uint16_t;
  using Acc = float;
  static Acc load(Elem e) { return f16_bits_to_f32(e); }
  static Elem store(Acc a) { return f32_to_f16_bits(a); }
};
template <typename T>
struct Int {
  using Elem = T;
  using Acc = int64_t;
  static Acc load(Elem e) { return e; }
  static Elem store(Acc a) { return static_cast<Elem>(a); }  // modular, as C++20 defines it
};

template <typename Acc>
inline Acc add(Acc a, Acc b) {
  if constexpr (std::is_integral_v<Acc>) {
    return static_cast<Acc>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));  // wraps
  } else {
    return a + b;
  }
}

// max/min propagate NaN so a diverged rank is never hidden.
template <typename Acc>
inline Acc pick_max(Acc a, Acc b) {
  if constexpr (std::is_floating_point_v<Acc>) {
    return (b > a || b != b) ? b : a;
  } else {
    return b > a ? b : a;
  }
}
template <typename Acc>
inline Acc pick_min(Acc a, Acc b) {
  if constexpr (std::is_floating_point_v<Acc>) {
    return (b < a || b != b) ? b : a;
  } else {
    return b < a ? b : a;
  }
}

template <typename Acc>
inline Acc combine(Acc a, Acc b, ReduceOp op) {
  switch (op) {
    case ReduceOp::max:
      return pick_max<Acc>(a, b);
    case ReduceOp::min:
      return pick_min<Acc>(a, b);
    default:
      return add<Acc>(a, b);
  }
}

// The last combine of a block, fused with avg's division and both stores, specialised per op
// so the loop vectorises. `omp simd`: a destination may alias a source element for element,
// which is safe here, and without it the compiler's overlap check would pick the scalar loop.
template <typename C, ReduceOp kOp, bool kFirst>
void finish_block(const typename C::Acc* acc, const typename C::Elem* s0, const typename C::Elem* s,
                  typename C::Elem* d, typename C::Elem* d2, int64_t m, int n) {
  using Acc = typename C::Acc;
  [[maybe_unused]] const Acc fn = static_cast<Acc>(n);
#pragma omp simd
  for (int64_t i = 0; i < m; ++i) {
    Acc a = kFirst ? C::load(s0[i]) : acc[i];
    Acc v = combine<Acc>(a, C::load(s[i]), combine_of(kOp));
    if constexpr (kOp == ReduceOp::avg) v = v / fn;  // integers truncate toward zero
    typename C::Elem e = C::store(v);
    d[i] = e;
    if (d2) d2[i] = e;
  }
}

// Note [Streaming stores]: a reduce_scatter output of many MiB is a fresh buffer that is not in
// cache; ordinary stores first read every line of it from memory (read for ownership), a third
// of the memory traffic of a 2-rank reduce_scatter. Non-temporal stores write the lines without
// reading them. Each block is reduced into an L1 buffer, then streamed out; an sfence at the end
// orders the streamed lines before the barrier's release that hands them to other threads.
void stream_copy(void* dst, const void* src, int64_t bytes) {
#if defined(__AVX__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  int64_t i = 0;
  if (reinterpret_cast<uintptr_t>(d) % 32 == 0)
    for (; i + 32 <= bytes; i += 32)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
  std::memcpy(d + i, s + i, static_cast<size_t>(bytes - i));
#else
  std::memcpy(dst, src, static_cast<size_t>(bytes));
#endif
}

void stream_fence() {
#if defined(__AVX__)
  _mm_sfence();
#endif
}

template <typename C, ReduceOp kOp>
void reduce_op(const void* const* srcs_v, int n, void* dst_v, void* dst2_v, int64_t count,
               bool stream) {
  using Elem = typename C::Elem;
  using Acc = typename C::Acc;
  constexpr ReduceOp kCombine = combine_of(kOp);
  Acc acc[kBlock];
  alignas(64) Elem staged[kBlock];  // Note [Streaming stores]
  Elem* dst = static_cast<Elem*>(dst_v);
  Elem* dst2 = static_cast<Elem*>(dst2_v);
  auto src = [&](int r, int64_t b) { return static_cast<const Elem*>(srcs_v[r]) + b; };
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t m = std::min(kBlock, count - b);
    Elem* d = stream ? staged : dst + b;
    Elem* d2 = dst2 ? dst2 + b : nullptr;
    if (n == 1) {
      // One rank: avg divides by 1; the value still goes through the accumulator type.
      for (int64_t i = 0; i < m; ++i) {
        Elem e = C::store(C::load(src(0, b)[i]));
        d[i] = e;
        if (d2) d2[i] = e;
      }
    } else if (n == 2) {
      finish_block<C, kOp, true>(nullptr, src(0, b), src(1, b), d, d2, m, n);
    } else {
      // Sources are read block by block before the final pass writes, so a destination that
      // aliases a source element for element is safe.
      const Elem* s0 = src(0, b);
      const Elem* s1 = src(1, b);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i)
        acc[i] = combine<Acc>(C::load(s0[i]), C::load(s1[i]), kCombine);
      for (int r = 2; r < n - 1; ++r) {
        const Elem* s = src(r, b);
#pragma omp simd
        for (int64_t i = 0; i < m; ++i) acc[i] = combine<Acc>(acc[i], C::load(s[i]), kCombine);
      }
      finish_block<C, kOp, false>(acc, nullptr, src(n - 1, b), d, d2, m, n);
    }
    if (stream) stream_copy(dst + b, staged, m * static_cast<int64_t>(sizeof(Elem)));
  }
  if (stream) stream_fence();
}

template <typename C>
void reduce_typed(const void* const* srcs, int n, void* dst, void* dst2, int64_t count, ReduceOp op,
                  bool stream) {
  switch (op) {
    case ReduceOp::sum:
      return reduce_op<C, ReduceOp::sum>(srcs, n, dst, dst2, count, stream);
    case ReduceOp::avg:
      return reduce_op<C, ReduceOp::avg>(srcs, n, dst, dst2, count, stream);
    case ReduceOp::max:
      return reduce_op<C, ReduceOp::max>(srcs, n, dst, dst2, count, stream);
    case ReduceOp::min:
      return reduce_op<C, ReduceOp::min>(srcs, n, dst, dst2, count, stream);
  }
}

}  // namespace

void reduce_ranks(const void* const* srcs, int n, void* dst, void* dst2, int64_t count, DType dtype,
                  ReduceOp op, bool stream) {
  if (count <= 0) return;
  BRAID_CHECK(!stream || !dst2, "reduce_ranks: streaming stores take one destination");
  switch (dtype) {
    case DType::f32:
      return reduce_typed<F32>(srcs, n, dst, dst2, count, op, stream);
    case DType::bf16:
      return reduce_typed<BF16>(srcs, n, dst, dst2, count, op, stream);
    case DType::f16:
      return reduce_typed<F16>(srcs, n, dst, dst2, count, op, stream);
    case DType::i32:
      return reduce_typed<Int<int32_t>>(srcs, n, dst, dst2, count, op, stream);
    case DType::i64:
      return reduce_typed<Int<int64_t>>(srcs, n, dst, dst2, count, op, stream);
    case DType::u8:
      return reduce_typed<Int<uint8_t>>(srcs, n, dst, dst2, count, op, stream);
  }
  BRAID_THROW("reduce_ranks: unknown dtype ", static_cast<int>(dtype));
}

void divide_by_ranks(float* x, int64_t count, int ranks) {
  const auto fn = static_cast<float>(ranks);
  for (int64_t i = 0; i < count; ++i) x[i] = x[i] / fn;
}

}  // namespace braid::comm
