// cast and the row conversions of cpu/common.h are bit-identical to core/dtype.h's scalar
// conversions (Note [Vector conversions]; a cast to the same dtype is a copy): every 16-bit pattern
// exhaustively, and for f32 the special values, denormals, rounding ties at every exponent, the f16
// overflow edge and random bit patterns; lengths with vector tails; tensors big enough to run in
// parallel.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <vector>

#include "braid/core/rng.h"
#include "braid/kernels/cpu/common.h"
#include "braid/kernels/ops.h"
#include "braid/kernels/reference/reference.h"

namespace braid::kernels {
namespace {

constexpr DType kFloats[] = {DType::f32, DType::bf16, DType::f16};

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The f32 inputs that matter for rounding, then random bit patterns up to n in all.
std::vector<float> f32_cases(size_t n) {
  std::vector<uint32_t> u = {0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00400000,
                             0x007fffff, 0x807fffff, 0x00800000, 0x7f7fffff, 0xff7fffff,
                             0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001,
                             0xff800001, 0x7fa00000, 0x7fffffff, 0x7f7f8000, 0x7f7f7fff};
  for (uint32_t e = 0; e < 256; ++e) {
    for (uint32_t sign : {0u, 1u}) {
      const uint32_t base = sign << 31 | e << 23;
      // bf16 keeps 7 mantissa bits: ties at 0x8000 below an even and an odd last bit
      for (uint32_t m : {0x008000u, 0x018000u, 0x007fffu, 0x008001u, 0x7f8000u, 0x7fffffu})
        u.push_back(base | m);
      // f16 keeps 10: ties at 0x1000 (and f16 denormal ties further down)
      for (uint32_t m : {0x001000u, 0x003000u, 0x000fffu, 0x001001u, 0x002000u, 0x7ff000u})
        u.push_back(base | m);
    }
  }
  // f16's largest finite 65504 and the edge where rounding overflows to inf (65520)
  for (float f : {65504.0f, 65519.0f, 65519.996f, 65520.0f, 65536.0f, 1e9f, 6.1e-5f, 6e-8f,
                  2.9802322e-8f, 2.9802326e-8f, 5.9604645e-8f})
    u.push_back(std::bit_cast<uint32_t>(f)), u.push_back(std::bit_cast<uint32_t>(-f));
  Rng rng(99);
  while (u.size() < n) u.push_back(static_cast<uint32_t>(rng.next_u64()));
  std::vector<float> f(u.size());
  for (size_t i = 0; i < u.size(); ++i) f[i] = from_bits(u[i]);
  return f;
}

uint32_t bits_at(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::f32) return std::bit_cast<uint32_t>(t.data<float>()[i]);
  return t.dtype() == DType::bf16 ? t.data<bf16>()[i].bits : t.data<f16>()[i].bits;
}

// The scalar conversion of core/dtype.h from src's element i to dtype d, as raw bits (a
// copy when d is src's dtype: signalling NaNs are not quietened).
uint32_t scalar_bits(const Tensor& src, int64_t i, DType d) {
  if (d == src.dtype()) return bits_at(src, i);
  float f = 0;
  switch (src.dtype()) {
    case DType::f32:
      f = src.data<float>()[i];
      break;
    case DType::bf16:
      f = bf16_bits_to_f32(src.data<bf16>()[i].bits);
      break;
    default:
      f = f16_bits_to_f32(src.data<f16>()[i].bits);
      break;
  }
  if (d == DType::bf16) return f32_to_bf16_bits(f);
  if (d == DType::f16) return f32_to_f16_bits(f);
  return std::bit_cast<uint32_t>(f);
}

// cast(out, src) for every float dtype of out, element by element against scalar_bits.
void expect_cast_exact(const Tensor& src) {
  for (DType d : kFloats) {
    Tensor out = Tensor::empty(src.shape(), d);
    cast(out, src);
    int64_t bad = 0;
    for (int64_t i = 0; i < src.numel(); ++i) {
      const uint32_t want = scalar_bits(src, i, d), got = bits_at(out, i);
      if (want != got && ++bad <= 5) {
        ADD_FAILURE() << dtype_name(src.dtype()) << " -> " << dtype_name(d) << " element " << i
                      << " (input bits 0x" << std::hex << bits_at(src, i) << "): got 0x" << got
                      << ", scalar conversion gives 0x" << want;
      }
    }
    EXPECT_EQ(bad, 0) << dtype_name(src.dtype()) << " -> " << dtype_name(d);
  }
}

TEST(Cast, EverySixteenBitPatternMatchesTheScalarConversion) {
  for (DType s : {DType::bf16, DType::f16}) {
    Tensor src = Tensor::empty(Shape{65536}, s);
    auto* p = static_cast<uint16_t*>(src.raw_data());
    for (uint32_t i = 0; i < 65536; ++i) p[i] = static_cast<uint16_t>(i);
    expect_cast_exact(src);
  }
}

TEST(Cast, F32SpecialsTiesDenormalsAndRandomBitsMatchTheScalarConversion) {
  std::vector<float> f = f32_cases(1 << 20);
  expect_cast_exact(Tensor::from_vector(f, Shape{static_cast<int64_t>(f.size())}));
}

TEST(Cast, OddLengthsAndViewsConvertEveryElement) {
  std::vector<float> f = f32_cases(4096);
  Tensor all = Tensor::from_vector(f, Shape{static_cast<int64_t>(f.size())});
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{17}, int64_t{33}, int64_t{1000}}) {
    Tensor piece = all.flat_range(3, n);  // an unaligned start
    expect_cast_exact(piece);
    for (DType d : {DType::bf16, DType::f16}) {
      Tensor low = Tensor::empty(Shape{n}, d);
      cast(low, piece);
      expect_cast_exact(low);
    }
  }
}

TEST(Cast, MatchesItsReferenceTwinAndKeepsShapesApart) {
  Rng rng(5);
  for (DType s : kFloats) {
    Tensor in = Tensor::randn(Shape{7, 300}, rng, 3.0f, s);
    for (DType d : kFloats) {
      Tensor out = Tensor::empty(Shape{2100}, d), out_r = out.clone();  // numel decides
      cast(out, in);
      reference::cast(out_r, in);
      EXPECT_EQ(std::memcmp(out.raw_data(), out_r.raw_data(), out.nbytes()), 0)
          << dtype_name(s) << " -> " << dtype_name(d);
    }
  }
  Tensor a = Tensor::zeros(Shape{4}), b = Tensor::zeros(Shape{5}, DType::bf16);
  EXPECT_THROW(cast(b, a), Error);
  Tensor i = Tensor::zeros(Shape{4}, DType::i32);
  EXPECT_THROW(cast(i, a), Error);
}

// Note [f16 element access]: the integer f16 conversions equal core/dtype.h's.
TEST(F16ElementAccess, MatchesCoreOnEveryF16AndTheF32Cases) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const f16 h{static_cast<uint16_t>(b)};
    ASSERT_EQ(std::bit_cast<uint32_t>(cpu::ld(&h)),
              std::bit_cast<uint32_t>(f16_bits_to_f32(h.bits)))
        << "f16 bits 0x" << std::hex << b;
  }
  for (float v : f32_cases(1 << 22)) {
    f16 h;
    cpu::st(&h, v);
    ASSERT_EQ(h.bits, f32_to_f16_bits(v))
        << "f32 bits 0x" << std::hex << std::bit_cast<uint32_t>(v);
  }
}

TEST(RowHelpers, LoadStoreAddMatchElementwiseLdSt) {
  std::vector<float> f = f32_cases(1000);
  for (int64_t n : {int64_t{1}, int64_t{16}, int64_t{31}, int64_t{1000}}) {
    std::vector<float> src(f.begin(), f.begin() + n), back(n), addend(n, 0.375f);
    std::vector<bf16> b(n), b_add(n);
    std::vector<f16> h(n), h_add(n);
    cpu::store_row(b.data(), src.data(), n);
    cpu::store_row(h.data(), src.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(b[i].bits, f32_to_bf16_bits(src[i])) << i;
      ASSERT_EQ(h[i].bits, f32_to_f16_bits(src[i])) << i;
    }
    cpu::load_row(back.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(cpu::ld(&b[i]))) << i;
    cpu::load_row(back.data(), h.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(cpu::ld(&h[i]))) << i;
    b_add = b, h_add = h;
    cpu::add_row(b_add.data(), addend.data(), n);
    cpu::add_row(h_add.data(), addend.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(b_add[i].bits, f32_to_bf16_bits(cpu::ld(&b[i]) + 0.375f)) << i;
      ASSERT_EQ(h_add[i].bits, f32_to_f16_bits(cpu::ld(&h[i]) + 0.375f)) << i;
    }
  }
}

}  // namespace
}  // namespace braid::kernels
