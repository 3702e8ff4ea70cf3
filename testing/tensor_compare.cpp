#include "testing/tensor_compare.h"

#include <cmath>
#include <cstring>
#include <sstream>

namespace braid::testing {

CompareResult compare(const Tensor& actual, const Tensor& expected, double floor) {
  CompareResult r;
  auto a = actual.to_f32_vector();
  auto b = expected.to_f32_vector();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(a[i]) != std::isnan(b[i])) d = INFINITY;
    double rel = d / std::max(std::fabs(static_cast<double>(b[i])), floor);
    if (d > r.max_abs) r.max_abs = d;
    if (rel > r.max_rel || r.worst < 0) {
      r.max_rel = std::max(rel, r.max_rel);
      if (rel >= r.max_rel) r.worst = static_cast<int64_t>(i);
    }
  }
  return r;
}

std::string CompareResult::describe(const Tensor& a, const Tensor& b) const {
  std::ostringstream os;
  os << "max abs err " << max_abs << ", max rel err " << max_rel;
  if (worst >= 0) {
    os << " at flat index " << worst << " (actual " << a.to_f32_vector()[worst] << ", expected "
       << b.to_f32_vector()[worst] << ")";
  }
  return os.str();
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol,
                                     double atol) {
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure()
           << "shape " << actual.shape().str() << " vs expected " << expected.shape().str();
  auto a = actual.to_f32_vector();
  auto b = expected.to_f32_vector();
  for (size_t i = 0; i < a.size(); ++i) {
    double tol = atol + rtol * std::fabs(static_cast<double>(b[i]));
    double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= tol)) {
      return ::testing::AssertionFailure()
             << "element " << i << ": actual " << a[i] << ", expected " << b[i] << " (|diff| " << d
             << " > tol " << tol << "); overall "
             << compare(actual, expected).describe(actual, expected);
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult bit_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return ::testing::AssertionFailure()
           << "dtype/shape differ: " << dtype_name(a.dtype()) << a.shape().str() << " vs "
           << dtype_name(b.dtype()) << b.shape().str();
  if (a.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) != 0)
    return ::testing::AssertionFailure() << "bytes differ: " << compare(a, b).describe(a, b);
  return ::testing::AssertionSuccess();
}

}  // namespace braid::testing
