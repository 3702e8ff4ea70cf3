// MemoryTracker: every allocation is charged to a category on its device, with current and
// peak bytes per category. An optional budget makes an allocation that would cross it throw
// OutOfMemory with the breakdown. One tracker per rank; no process-wide state.
//
// Which tracker and category an allocation is charged to comes from the allocating thread's
// MemoryScope (thread-local, so ranks-as-threads each see their own), or from explicit
// arguments to Tensor::empty.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace braid {

enum class MemCategory : uint8_t {
  parameters,
  gradients,
  optimizer_state,
  activations,
  communication,
  other,
};
constexpr int kNumMemCategories = 6;
const char* mem_category_name(MemCategory c);

class MemoryTracker {
 public:
  explicit MemoryTracker(std::string device_name = "cpu") : device_(std::move(device_name)) {}

  // Charges bytes; throws OutOfMemory (and charges nothing) if the budget would be crossed.
  void charge(MemCategory c, int64_t bytes);
  void release(MemCategory c, int64_t bytes);

  int64_t current(MemCategory c) const;
  int64_t peak(MemCategory c) const;
  int64_t total_current() const;
  int64_t total_peak() const;  // peak of the sum, not the sum of peaks
  void reset_peaks();

  void set_budget(int64_t bytes) { budget_.store(bytes); }  // 0 = unlimited
  int64_t budget() const { return budget_.load(); }

  // "parameters 1.2 MiB (peak 1.2 MiB), gradients ..." one line per category.
  std::string breakdown() const;

 private:
  std::string device_;
  mutable std::mutex mu_;
  std::array<int64_t, kNumMemCategories> current_{};
  std::array<int64_t, kNumMemCategories> peak_{};
  int64_t total_ = 0;
  int64_t total_peak_ = 0;
  std::atomic<int64_t> budget_{0};
};

std::string format_bytes(int64_t bytes);  // "12.0 MiB"

// Sets this thread's tracker and/or category for allocations until the scope ends.
class MemoryScope {
 public:
  explicit MemoryScope(std::shared_ptr<MemoryTracker> tracker);
  explicit MemoryScope(MemCategory category);
  MemoryScope(std::shared_ptr<MemoryTracker> tracker, MemCategory category);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

  static const std::shared_ptr<MemoryTracker>& current_tracker();  // may be null
  static MemCategory current_category();

 private:
  std::shared_ptr<MemoryTracker> prev_tracker_;
  MemCategory prev_category_;
};

}  // namespace braid
