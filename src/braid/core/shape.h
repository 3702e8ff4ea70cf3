// Shape: up to 8 dimensions, stored inline (no allocation in the hot path).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace braid {

class Shape {
 public:
  static constexpr int kMaxDims = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int dim() const { return ndim_; }
  int64_t operator[](int i) const;  // negative i counts from the back
  int64_t& operator[](int i);
  int64_t numel() const;
  std::vector<int64_t> vec() const { return {dims_.begin(), dims_.begin() + ndim_}; }
  std::string str() const;  // "[2, 3, 4]"
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

}  // namespace braid
