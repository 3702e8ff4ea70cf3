// Helpers of the reference kernels: tensors in and out as f64 vectors.
#pragma once

#include <vector>

#include "braid/core/tensor.h"

namespace braid::kernels::reference {

using Vec = std::vector<double>;

inline Vec get(const Tensor& t) {
  std::vector<float> f = t.to_f32_vector();
  return Vec(f.begin(), f.end());
}
inline void put(Tensor& t, const Vec& v) {
  std::vector<float> f(v.begin(), v.end());
  convert_from_f32(f.data(), t.raw_data(), t.dtype(), t.numel());
}
inline void add_into(Tensor* t, const Vec& v) {
  if (!t) return;
  Vec cur = get(*t);
  for (size_t i = 0; i < cur.size(); ++i) cur[i] += v[i];
  put(*t, cur);
}
inline int64_t last_dim(const Tensor& t) {
  return t.size(t.dim() - 1);
}

}  // namespace braid::kernels::reference
