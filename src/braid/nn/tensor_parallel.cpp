#include "braid/nn/tensor_parallel.h"

#include <algorithm>
#include <cstring>

#include "braid/core/error.h"

namespace braid::nn {

int64_t padded_vocab(int64_t vocab, int tp) {
  return (vocab + tp - 1) / tp * tp;
}

namespace {

// Walks the local slice: fn(local offset, full offset or -1 for padding, run length).
template <typename Fn>
void for_each_run(const Shape& full, const Shape& local, const TpSlice& s, const char* op, Fn fn) {
  BRAID_CHECK(full.dim() == local.dim() && s.dim >= 0 && s.dim < full.dim(), op, ": full shape ",
              full.str(), " and local shape ", local.str(), " do not fit a split of dim ", s.dim);
  const int d = s.dim;
  const int64_t real = full[d];
  const int64_t padded = s.padded > 0 ? s.padded : real;
  BRAID_CHECK(
      padded % (s.sections * s.parts) == 0 && local[d] * s.parts == padded && real <= padded, op,
      ": dim ", d, " of ", full.str(), " (padded ", padded, ") does not split into ", s.sections,
      " sections of ", s.parts, " parts of ", local[d] / s.sections);
  for (int i = 0; i < full.dim(); ++i)
    BRAID_CHECK(i == d || full[i] == local[i], op, ": full shape ", full.str(), " and local shape ",
                local.str(), " differ outside dim ", d);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= full[i];
  for (int i = d + 1; i < full.dim(); ++i) inner *= full[i];
  const int64_t section = padded / s.sections, part = local[d] / s.sections;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < local[d]; ++j) {
      const int64_t g = (j / part) * section + s.part * part + j % part;
      fn((o * local[d] + j) * inner, g < real ? (o * real + g) * inner : -1, inner);
    }
  }
}

}  // namespace

void take_slice(const Tensor& full, Tensor& local, const TpSlice& slice) {
  BRAID_CHECK(full.dtype() == DType::f32 && local.dtype() == DType::f32,
              "take_slice: f32 tensors only");
  const float* src = full.data<float>();
  float* dst = local.data<float>();
  for_each_run(full.shape(), local.shape(), slice, "take_slice",
               [&](int64_t l, int64_t f, int64_t n) {
                 if (f < 0) {
                   std::fill(dst + l, dst + l + n, 0.0f);
                 } else {
                   std::memcpy(dst + l, src + f, static_cast<size_t>(n) * sizeof(float));
                 }
               });
}

void place_slice(const Tensor& local, Tensor& full, const TpSlice& slice) {
  BRAID_CHECK(full.dtype() == DType::f32 && local.dtype() == DType::f32,
              "place_slice: f32 tensors only");
  const float* src = local.data<float>();
  float* dst = full.data<float>();
  for_each_run(full.shape(), local.shape(), slice, "place_slice",
               [&](int64_t l, int64_t f, int64_t n) {
                 if (f >= 0) std::memcpy(dst + f, src + l, static_cast<size_t>(n) * sizeof(float));
               });
}

}  // namespace braid::nn
