// MemoryTracker: every allocation is charged to a category on its device, with current and
// peak bytes per category. An optional budget makes an allocation that would cross it throw
// OutOfMemory with the breakdown. One tracker per rank; no process-wide state.
//
// Which tracker and category an allocation is charged to comes from the allocating thread's
// MemoryScope (thread-local, so ranks-as-threads each see their own), or from explicit
// arguments to Tensor::empty. Memory that is not a Tensor (kernel scratch, a process group's
// staging and shared windows) is charged through a MemoryCharge held beside it.
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
  scratch,  // kernel scratch: per-rank work buffers the CPU kernels keep between calls
  communication,
  checkpoint,  // an async checkpoint's in-memory copy (checkpoint.async)
  other,
};
constexpr int kNumMemCategories = 8;
const char* mem_category_name(MemCategory c);

class MemoryTracker {
 public:
  explicit MemoryTracker(std::string device_name = "cpu") : device_(std::move(device_name)) {}

  // Charges bytes; throws OutOfMemory (and charges nothing) if the budget would be crossed.
  void charge(MemCategory c, int64_t bytes);
  void release(MemCategory c, int64_t bytes);

  const std::string& device() const { return device_; }
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
  std::string out_of_memory_message(MemCategory c, int64_t bytes, int64_t budget) const;

  std::string device_;
  mutable std::mutex mu_;
  std::array<int64_t, kNumMemCategories> current_{};
  std::array<int64_t, kNumMemCategories> peak_{};
  int64_t total_ = 0;
  int64_t total_peak_ = 0;
  std::atomic<int64_t> budget_{0};
};

std::string format_bytes(int64_t bytes);  // "12.0 MiB"

// "4GiB", "512 MiB", "64KiB", "1.5GiB" (powers of 1024), "4GB", "10 kB" (powers of 1000),
// "1e9", "123", "123B" (bytes); units are case-insensitive and may follow spaces. Fractions
// round to the nearest byte. Anything else (empty, negative, an unknown unit, more than
// INT64_MAX bytes) throws braid::Error naming the text and the accepted forms.
int64_t parse_bytes(const std::string& text);

// MemAvailable of /proc/meminfo in bytes: what the kernel thinks can be allocated without
// swapping. 0 when unknown (no procfs, no such line).
int64_t available_memory_bytes();

// Bytes held by something other than a Tensor, charged to `tracker` (category fixed at
// construction) for as long as this object lives. With no tracker the bytes are remembered
// but charged nowhere, so retarget() to a tracker later charges all of them. Not
// thread-safe: the owner synchronises (the tracker itself is).
class MemoryCharge {
 public:
  explicit MemoryCharge(MemCategory category = MemCategory::other,
                        std::shared_ptr<MemoryTracker> tracker = nullptr)
      : tracker_(std::move(tracker)), category_(category) {}
  ~MemoryCharge();
  MemoryCharge(MemoryCharge&& other) noexcept;
  MemoryCharge& operator=(MemoryCharge&& other) noexcept;
  MemoryCharge(const MemoryCharge&) = delete;
  MemoryCharge& operator=(const MemoryCharge&) = delete;

  // Sets the bytes held: growth is charged first (OutOfMemory leaves everything unchanged),
  // shrinkage released.
  void resize(int64_t bytes);
  void add(int64_t delta) { resize(bytes_ + delta); }
  // Moves the bytes held to `tracker` (may be null): charged there first, so an OutOfMemory
  // leaves them where they were.
  void retarget(std::shared_ptr<MemoryTracker> tracker);

  int64_t bytes() const { return bytes_; }
  MemCategory category() const { return category_; }
  const std::shared_ptr<MemoryTracker>& tracker() const { return tracker_; }

 private:
  std::shared_ptr<MemoryTracker> tracker_;
  MemCategory category_;
  int64_t bytes_ = 0;
};

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
