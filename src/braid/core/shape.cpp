#include "braid/core/shape.h"

#include "braid/core/error.h"

namespace braid {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(const std::vector<int64_t>& dims) {
  BRAID_CHECK(dims.size() <= kMaxDims, "shape has ", dims.size(), " dimensions, at most ", kMaxDims,
              " are supported");
  ndim_ = static_cast<int>(dims.size());
  for (int i = 0; i < ndim_; ++i) {
    BRAID_CHECK(dims[i] >= 0, "shape dimension ", i, " is negative (", dims[i], ")");
    dims_[i] = dims[i];
  }
}

int64_t Shape::operator[](int i) const {
  int j = i < 0 ? i + ndim_ : i;
  BRAID_CHECK(j >= 0 && j < ndim_, "dimension ", i, " out of range for shape ", str());
  return dims_[j];
}

int64_t& Shape::operator[](int i) {
  int j = i < 0 ? i + ndim_ : i;
  BRAID_CHECK(j >= 0 && j < ndim_, "dimension ", i, " out of range for shape ", str());
  return dims_[j];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

bool Shape::operator==(const Shape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

}  // namespace braid
