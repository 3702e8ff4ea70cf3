#include "braid/core/fault_ahead.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace braid {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

FaultAhead::FaultAhead(std::vector<Tensor> tensors) {
  for (Tensor& t : tensors)
    if (t.defined() && t.device().is_cpu() && static_cast<int64_t>(t.nbytes()) >= kMinBytes)
      tensors_.push_back(std::move(t));
  if (!tensors_.empty()) thread_ = std::thread([this] { run(); });
}

FaultAhead::~FaultAhead() {
  stop_.store(true, std::memory_order_relaxed);
  wait();
}

void FaultAhead::wait() {
  if (thread_.joinable()) thread_.join();
}

void FaultAhead::run() {
  constexpr uintptr_t kStep = uintptr_t{2} << 20;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (const Tensor& t : tensors_) {
    // The whole pages inside the tensor: a page it shares with a neighbour is left to fault.
    const auto begin = reinterpret_cast<uintptr_t>(t.raw_data());
    uintptr_t at = (begin + page - 1) / page * page;
    const uintptr_t end = (begin + t.nbytes()) / page * page;
    while (at < end) {
      if (stop_.load(std::memory_order_relaxed)) return;
      const uintptr_t next = std::min(end, (at / kStep + 1) * kStep);
      if (::madvise(reinterpret_cast<void*>(at), next - at, MADV_POPULATE_WRITE) != 0) return;
      at = next;
    }
  }
}

}  // namespace braid
