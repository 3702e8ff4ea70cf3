#include "braid/comm/collective_guard.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

#include "braid/core/error.h"

namespace braid::comm {

namespace {
constexpr int64_t kMessageBytes = 1024;  // per rank; longer messages are cut
}  // namespace

void all_ranks_or_throw(ProcessGroup* group, const std::function<void()>& fn) {
  if (group == nullptr || group->size() == 1) {
    fn();
    return;
  }
  std::exception_ptr error;
  std::string message;
  try {
    fn();
  } catch (const std::exception& e) {
    error = std::current_exception();
    message = e.what();
  } catch (...) {
    error = std::current_exception();
    message = "unknown error";
  }
  // Each rank's message (empty: it succeeded), gathered in rank order.
  const int n = group->size();
  DeviceScope host(Device::cpu());  // host bytes, whatever the caller's default device
  Tensor mine = Tensor::zeros(Shape{kMessageBytes}, DType::u8);
  Tensor all = Tensor::empty(Shape{kMessageBytes * n}, DType::u8, MemCategory::communication);
  if (error) {
    if (message.empty()) message = "error without a message";
    std::memcpy(mine.raw_data(), message.data(),
                std::min<size_t>(message.size(), kMessageBytes - 1));
  }
  group->all_gather(all, mine)->wait();
  std::string failed, first;
  for (int r = 0; r < n; ++r) {
    const char* text = static_cast<const char*>(all.raw_data()) + r * kMessageBytes;
    if (text[0] == '\0') continue;
    failed += (failed.empty() ? "" : ", ") + std::to_string(r);
    if (first.empty()) first = "rank " + std::to_string(r) + ": " + std::string(text);
  }
  if (error) std::rethrow_exception(error);
  if (!failed.empty())
    BRAID_THROW("rank(s) ", failed, " of group '", group->name(), "' failed: ", first);
}

}  // namespace braid::comm
