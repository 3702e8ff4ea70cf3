#include "braid/comm/gather_strings.h"

#include <algorithm>
#include <cstring>

namespace braid::comm {

std::vector<std::string> all_gather_strings(ProcessGroup* group, const std::string& mine) {
  if (group == nullptr || group->size() == 1) return {mine};
  const int n = group->size();
  DeviceScope host(Device::cpu());  // host bytes, whatever the caller's default device
  Tensor lengths = Tensor::empty(Shape{n}, DType::i64, MemCategory::communication);
  Tensor my_length = Tensor::empty(Shape{1}, DType::i64, MemCategory::communication);
  my_length.data<int64_t>()[0] = static_cast<int64_t>(mine.size());
  group->all_gather(lengths, my_length)->wait();
  const int64_t* l = lengths.data<int64_t>();
  const int64_t slot = std::max<int64_t>(1, *std::max_element(l, l + n));
  Tensor padded = Tensor::zeros(Shape{slot}, DType::u8);
  std::memcpy(padded.raw_data(), mine.data(), mine.size());
  Tensor all = Tensor::empty(Shape{slot * n}, DType::u8, MemCategory::communication);
  group->all_gather(all, padded)->wait();
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r)
    out.emplace_back(static_cast<const char*>(all.raw_data()) + r * slot,
                     static_cast<size_t>(l[r]));
  return out;
}

}  // namespace braid::comm
