#include "braid/nn/tensor_parallel.h"

#include <algorithm>
#include <cstring>

#include "braid/core/error.h"

namespace braid::nn {

int64_t padded_vocab(int64_t vocab, int tp) {
  return (vocab + tp - 1) / tp * tp;
}

namespace {

// The local and whole shapes must be a slice and its whole (Note [Placements]).
void check_slice(const Shape& whole, const Shape& local, const TpSlice& s, const char* op) {
  BRAID_CHECK(whole.dim() == local.dim() && (!s.is_split() || (s.dim >= 0 && s.dim < whole.dim())),
              op, ": full shape ", whole.str(), " and local shape ", local.str(),
              " do not fit a split of dim ", s.dim);
  const Shape want = s.local_shape(whole);
  BRAID_CHECK(want == local, op, ": full shape ", whole.str(), " and local shape ", local.str(),
              " do not fit ", s.str(), " (which gives ", want.str(), ")");
}

}  // namespace

void take_slice(const Tensor& full, Tensor& local, const TpSlice& slice) {
  BRAID_CHECK(full.dtype() == DType::f32 && local.dtype() == DType::f32,
              "take_slice: f32 tensors only");
  const float* src = full.data<float>();
  float* dst = local.data<float>();
  check_slice(full.shape(), local.shape(), slice, "take_slice");
  for_each_run(full.shape(), slice, 0, local.numel(), [&](int64_t l, int64_t f, int64_t n) {
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
  check_slice(full.shape(), local.shape(), slice, "place_slice");
  for_each_run(full.shape(), slice, 0, local.numel(), [&](int64_t l, int64_t f, int64_t n) {
    if (f >= 0) std::memcpy(dst + f, src + l, static_cast<size_t>(n) * sizeof(float));
  });
}

}  // namespace braid::nn
