#include "braid/core/tensor.h"

#include <cstring>

namespace braid {

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return empty(shape, dtype, MemoryScope::current_category(), MemoryScope::current_tracker(),
               device);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, MemCategory category) {
  return empty(shape, dtype, category, MemoryScope::current_tracker());
}

Tensor Tensor::empty(const Shape& shape, DType dtype, MemCategory category,
                     std::shared_ptr<MemoryTracker> tracker, Device device) {
  return allocate(shape, dtype, category, std::move(tracker), device, /*pinned=*/false);
}

Tensor Tensor::pinned(const Shape& shape, DType dtype, MemCategory category) {
  return allocate(shape, dtype, category, MemoryScope::current_tracker(), Device::cpu(),
                  /*pinned=*/true);
}

Tensor Tensor::allocate(const Shape& shape, DType dtype, MemCategory category,
                        std::shared_ptr<MemoryTracker> tracker, Device device, bool pinned,
                        bool zeroed) {
  Tensor t;
  size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  t.storage_ =
      std::make_shared<Storage>(bytes, device, category, std::move(tracker), pinned, zeroed);
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  return zeros(shape, dtype, MemoryScope::current_category(), MemoryScope::current_tracker());
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, MemCategory category,
                     std::shared_ptr<MemoryTracker> tracker, Device device) {
  return allocate(shape, dtype, category, std::move(tracker), device, /*pinned=*/false,
                  /*zeroed=*/true);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill_(value);
  return t;
}

Tensor Tensor::randn(const Shape& shape, Rng& rng, float stddev, DType dtype) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (auto& x : v) x = rng.normal() * stddev;
  Tensor t = empty(shape, dtype, Device::cpu());
  convert_from_f32(v.data(), t.raw_data(), dtype, t.numel());
  return t.to_default_device();
}

Tensor Tensor::uniform(const Shape& shape, Rng& rng, float lo, float hi, DType dtype) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (auto& x : v) x = lo + (hi - lo) * rng.uniform();
  Tensor t = empty(shape, dtype, Device::cpu());
  convert_from_f32(v.data(), t.raw_data(), dtype, t.numel());
  return t.to_default_device();
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  BRAID_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "from_vector: ", values.size(),
              " values for shape ", shape.str());
  Tensor t = empty(shape, dtype_of<T>::value, Device::cpu());
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t.to_default_device();
}
template Tensor Tensor::from_vector(const std::vector<float>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<int32_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<int64_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<uint8_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<bf16>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<f16>&, const Shape&);

void* Tensor::raw_data() {
  check_host();
  return device_data();
}

const void* Tensor::raw_data() const {
  check_host();
  return device_data();
}

void* Tensor::device_data() {
  BRAID_CHECK(defined(), "access to an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * dtype_size(dtype_);
}

const void* Tensor::device_data() const {
  BRAID_CHECK(defined(), "access to an undefined tensor");
  return static_cast<const char*>(storage_->data()) + offset_ * dtype_size(dtype_);
}

void Tensor::check_host() const {
  BRAID_CHECK(defined(), "access to an undefined tensor");
  const Device d = storage_->device();
  if (!d.is_cpu() && HostKernelScope::active()) {  // Note [Simulated device]
    const DeviceBackend* b = device_backend(d.type);
    if (b && b->host_addressable()) return;
  }
  BRAID_CHECK(d.is_cpu(), "a tensor of shape ", shape_.str(), " on ", storage_->device().str(),
              " was read or written as host memory (copy it with Tensor::to(Device::cpu()))");
}

Tensor Tensor::to_default_device() const {
  const Device d = current_device();
  return d == device() ? *this : to(d);
}

void Tensor::check_dtype(DType want) const {
  BRAID_CHECK(dtype_ == want, "tensor of dtype ", dtype_name(dtype_), " accessed as ",
              dtype_name(want));
}

Tensor Tensor::view(const Shape& shape) const {
  BRAID_CHECK(shape.numel() == numel(), "cannot view a tensor of shape ", shape_.str(), " (",
              numel(), " elements) as ", shape.str());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::narrow(int64_t start, int64_t length) const {
  BRAID_CHECK(dim() >= 1, "narrow on a 0-d tensor");
  BRAID_CHECK(start >= 0 && length >= 0 && start + length <= shape_[0], "narrow rows [", start,
              ", ", start + length, ") out of range for shape ", shape_.str());
  int64_t row = shape_[0] == 0 ? 0 : numel() / shape_[0];
  Tensor t = *this;
  t.offset_ += start * row;
  t.shape_[0] = length;
  return t;
}

Tensor Tensor::flat_range(int64_t off, int64_t count) const {
  BRAID_CHECK(off >= 0 && count >= 0 && off + count <= numel(), "flat range [", off, ", ",
              off + count, ") out of range for a tensor of ", numel(), " elements");
  Tensor t = *this;
  t.offset_ += off;
  t.shape_ = Shape{count};
  return t;
}

Tensor Tensor::reinterpret(DType dtype) const {
  const auto es = static_cast<int64_t>(dtype_size(dtype_)),
             to = static_cast<int64_t>(dtype_size(dtype));
  BRAID_CHECK((offset_ * es) % to == 0 && (numel() * es) % to == 0, "cannot view ", numel(),
              " elements of ", dtype_name(dtype_), " at element ", offset_, " as ",
              dtype_name(dtype), ": not whole elements");
  Tensor t = *this;
  t.offset_ = offset_ * es / to;
  t.shape_ = Shape{numel() * es / to};
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::clone() const {
  return to(device());
}

Tensor Tensor::to(Device dev) const {
  Tensor t = empty(shape_, dtype_, storage_ ? storage_->category() : MemCategory::other,
                   MemoryScope::current_tracker(), dev);
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return clone();
  Tensor t = empty(shape_, dtype, storage_ ? storage_->category() : MemCategory::other,
                   MemoryScope::current_tracker(), device());
  t.copy_(*this);
  return t;
}

void convert_to_f32(const void* src, DType d, float* dst, int64_t n) {
  switch (d) {
    case DType::f32:
      if (n > 0) std::memcpy(dst, src, n * 4);
      return;
    case DType::bf16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_f32(s[i]);
      return;
    }
    case DType::f16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_bits_to_f32(s[i]);
      return;
    }
    case DType::i32: {
      auto* s = static_cast<const int32_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::i64: {
      auto* s = static_cast<const int64_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::u8: {
      auto* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
  }
}

void convert_from_f32(const float* src, void* dst, DType d, int64_t n) {
  switch (d) {
    case DType::f32:
      if (n > 0) std::memcpy(dst, src, n * 4);
      return;
    case DType::bf16: {
      auto* o = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16_bits(src[i]);
      return;
    }
    case DType::f16: {
      auto* o = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_f16_bits(src[i]);
      return;
    }
    case DType::i32: {
      auto* o = static_cast<int32_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<int32_t>(src[i]);
      return;
    }
    case DType::i64: {
      auto* o = static_cast<int64_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<int64_t>(src[i]);
      return;
    }
    case DType::u8: {
      auto* o = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<uint8_t>(src[i]);
      return;
    }
  }
}

void Tensor::copy_(const Tensor& src) {
  BRAID_CHECK(src.numel() == numel(), "copy_: source has ", src.numel(), " elements, destination ",
              numel());
  if (numel() == 0) return;
  if (!device().is_cpu() || !src.device().is_cpu()) {
    copy_across_devices(src);
    return;
  }
  if (src.dtype_ == dtype_) {
    std::memmove(raw_data(), src.raw_data(), nbytes());
    return;
  }
  if (src.dtype_ == DType::f32) {
    convert_from_f32(src.data<float>(), raw_data(), dtype_, numel());
  } else if (dtype_ == DType::f32) {
    convert_to_f32(src.raw_data(), src.dtype_, data<float>(), numel());
  } else {
    std::vector<float> tmp(static_cast<size_t>(numel()));
    convert_to_f32(src.raw_data(), src.dtype_, tmp.data(), numel());
    convert_from_f32(tmp.data(), raw_data(), dtype_, numel());
  }
}

// Same dtype: one backend copy. Same device, other dtype: the backend converts there. Otherwise
// through a host copy of the source in the destination's dtype.
void Tensor::copy_across_devices(const Tensor& src) {
  const Device dd = device(), sd = src.device();
  DeviceBackend& backend = require_device_backend(dd.is_cpu() ? sd : dd);
  if (src.dtype_ == dtype_) {
    backend.copy(device_data(), dd, src.device_data(), sd, nbytes());
  } else if (dd == sd) {
    backend.convert(device_data(), dtype_, src.device_data(), src.dtype_, numel(), dd);
  } else {
    Tensor host = src.device().is_cpu() ? src : src.to(Device::cpu());
    Tensor converted = empty(shape_, dtype_, MemCategory::other, nullptr, Device::cpu());
    converted.copy_(host);
    backend.copy(device_data(), dd, converted.raw_data(), Device::cpu(), nbytes());
  }
}

void Tensor::zero_() {
  if (!numel()) return;
  if (!device().is_cpu()) {
    require_device_backend(device()).zero(device_data(), nbytes(), device());
    return;
  }
  std::memset(raw_data(), 0, nbytes());
}

void Tensor::fill_(double value) {
  int64_t n = numel();
  if (n == 0) return;
  if (!device().is_cpu()) {
    Tensor host = empty(shape_, dtype_, MemCategory::other, nullptr, Device::cpu());
    host.fill_(value);
    copy_(host);
    return;
  }
  switch (dtype_) {
    case DType::f32: {
      float* p = data<float>();
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(value);
      return;
    }
    case DType::i32: {
      auto* p = data<int32_t>();
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(value);
      return;
    }
    case DType::i64: {
      auto* p = data<int64_t>();
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int64_t>(value);
      return;
    }
    default: {
      std::vector<float> tmp(static_cast<size_t>(n), static_cast<float>(value));
      convert_from_f32(tmp.data(), raw_data(), dtype_, n);
    }
  }
}

float Tensor::item() const {
  BRAID_CHECK(numel() == 1, "item() on a tensor of shape ", shape_.str());
  if (!device().is_cpu()) return to(Device::cpu()).item();
  float v;
  convert_to_f32(raw_data(), dtype_, &v, 1);
  return v;
}

std::vector<float> Tensor::to_f32_vector() const {
  if (!device().is_cpu()) return to(Device::cpu()).to_f32_vector();
  std::vector<float> v(static_cast<size_t>(numel()));
  if (!v.empty()) convert_to_f32(raw_data(), dtype_, v.data(), numel());
  return v;
}

}  // namespace braid
