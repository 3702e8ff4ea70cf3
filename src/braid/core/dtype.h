// Element types and the 16-bit float conversions every layer uses.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace braid {

enum class DType : uint8_t { f32, bf16, f16, i32, i64, u8 };

size_t dtype_size(DType d);
std::string_view dtype_name(DType d);
DType dtype_from_name(std::string_view name);  // throws on unknown names
bool is_floating(DType d);

// bfloat16: the top 16 bits of an IEEE float, rounded to nearest even.
struct bf16 {
  uint16_t bits;
};
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_bits_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE half precision through the compiler's _Float16 (SSE/AVX512-FP16 or soft-float).
struct f16 {
  uint16_t bits;
};
inline uint16_t f32_to_f16_bits(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
inline float f16_bits_to_f32(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<f16> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::u8;
};

}  // namespace braid
