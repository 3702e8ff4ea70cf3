#include "braid/comm/reduce_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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

template <typename C>
void reduce_typed(const void* const* srcs_v, int n, void* dst_v, void* dst2_v, int64_t count,
                  ReduceOp op) {
  using Elem = typename C::Elem;
  using Acc = typename C::Acc;
  Acc acc[kBlock];
  Elem* dst = static_cast<Elem*>(dst_v);
  Elem* dst2 = static_cast<Elem*>(dst2_v);
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t m = std::min(kBlock, count - b);
    const Elem* s0 = static_cast<const Elem*>(srcs_v[0]) + b;
    for (int64_t i = 0; i < m; ++i) acc[i] = C::load(s0[i]);
    for (int r = 1; r < n; ++r) {
      const Elem* s = static_cast<const Elem*>(srcs_v[r]) + b;
      switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg:
          for (int64_t i = 0; i < m; ++i) acc[i] = add<Acc>(acc[i], C::load(s[i]));
          break;
        case ReduceOp::max:
          for (int64_t i = 0; i < m; ++i) acc[i] = pick_max<Acc>(acc[i], C::load(s[i]));
          break;
        case ReduceOp::min:
          for (int64_t i = 0; i < m; ++i) acc[i] = pick_min<Acc>(acc[i], C::load(s[i]));
          break;
      }
    }
    if (op == ReduceOp::avg) {
      if constexpr (std::is_floating_point_v<Acc>) {
        const Acc fn = static_cast<Acc>(n);
        for (int64_t i = 0; i < m; ++i) acc[i] = acc[i] / fn;
      } else {
        for (int64_t i = 0; i < m; ++i) acc[i] = acc[i] / n;  // truncates toward zero
      }
    }
    Elem* d = dst + b;
    for (int64_t i = 0; i < m; ++i) d[i] = C::store(acc[i]);
    if (dst2) std::memcpy(dst2 + b, d, static_cast<size_t>(m) * sizeof(Elem));
  }
}

}  // namespace

void reduce_ranks(const void* const* srcs, int n, void* dst, void* dst2, int64_t count, DType dtype,
                  ReduceOp op) {
  if (count <= 0) return;
  switch (dtype) {
    case DType::f32:
      return reduce_typed<F32>(srcs, n, dst, dst2, count, op);
    case DType::bf16:
      return reduce_typed<BF16>(srcs, n, dst, dst2, count, op);
    case DType::f16:
      return reduce_typed<F16>(srcs, n, dst, dst2, count, op);
    case DType::i32:
      return reduce_typed<Int<int32_t>>(srcs, n, dst, dst2, count, op);
    case DType::i64:
      return reduce_typed<Int<int64_t>>(srcs, n, dst, dst2, count, op);
    case DType::u8:
      return reduce_typed<Int<uint8_t>>(srcs, n, dst, dst2, count, op);
  }
  BRAID_THROW("reduce_ranks: unknown dtype ", static_cast<int>(dtype));
}

}  // namespace braid::comm
