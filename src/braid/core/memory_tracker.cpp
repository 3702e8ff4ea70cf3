#include "braid/core/memory_tracker.h"

#include <cstdio>
#include <sstream>

#include "braid/core/error.h"

namespace braid {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::parameters:
      return "parameters";
    case MemCategory::gradients:
      return "gradients";
    case MemCategory::optimizer_state:
      return "optimizer state";
    case MemCategory::activations:
      return "activations";
    case MemCategory::communication:
      return "communication buffers";
    case MemCategory::other:
      return "other";
  }
  return "?";
}

std::string format_bytes(int64_t b) {
  char buf[64];
  double v = static_cast<double>(b);
  if (b >= (int64_t(1) << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", v / (1 << 30));
  } else if (b >= (1 << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", v / (1 << 20));
  } else if (b >= (1 << 10)) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", v / (1 << 10));
  } else {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  }
  return buf;
}

void MemoryTracker::charge(MemCategory c, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t budget = budget_.load();
  if (budget > 0 && total_ + bytes > budget) {
    std::ostringstream os;
    os << "out of memory on " << device_ << ": allocating " << format_bytes(bytes) << " of "
       << mem_category_name(c) << " would take " << format_bytes(total_ + bytes)
       << " past the budget of " << format_bytes(budget) << ". In use:";
    for (int i = 0; i < kNumMemCategories; ++i)
      os << " " << mem_category_name(static_cast<MemCategory>(i)) << " "
         << format_bytes(current_[i]) << (i + 1 < kNumMemCategories ? "," : ".");
    os << " What would help: shard more (a higher ZeRO stage, more ranks), activation "
          "checkpointing, or a smaller micro-batch.";
    throw OutOfMemory(os.str());
  }
  int i = static_cast<int>(c);
  current_[i] += bytes;
  if (current_[i] > peak_[i]) peak_[i] = current_[i];
  total_ += bytes;
  if (total_ > total_peak_) total_peak_ = total_;
}

void MemoryTracker::release(MemCategory c, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  current_[static_cast<int>(c)] -= bytes;
  total_ -= bytes;
}

int64_t MemoryTracker::current(MemCategory c) const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_[static_cast<int>(c)];
}
int64_t MemoryTracker::peak(MemCategory c) const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_[static_cast<int>(c)];
}
int64_t MemoryTracker::total_current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}
int64_t MemoryTracker::total_peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_peak_;
}
void MemoryTracker::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = current_;
  total_peak_ = total_;
}

std::string MemoryTracker::breakdown() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream os;
  for (int i = 0; i < kNumMemCategories; ++i)
    os << mem_category_name(static_cast<MemCategory>(i)) << " " << format_bytes(current_[i])
       << " (peak " << format_bytes(peak_[i]) << ")\n";
  os << "total " << format_bytes(total_) << " (peak " << format_bytes(total_peak_) << ")";
  return os.str();
}

namespace {
thread_local std::shared_ptr<MemoryTracker> t_tracker;
thread_local MemCategory t_category = MemCategory::other;
}  // namespace

MemoryScope::MemoryScope(std::shared_ptr<MemoryTracker> tracker)
    : prev_tracker_(t_tracker), prev_category_(t_category) {
  t_tracker = std::move(tracker);
}
MemoryScope::MemoryScope(MemCategory category)
    : prev_tracker_(t_tracker), prev_category_(t_category) {
  t_category = category;
}
MemoryScope::MemoryScope(std::shared_ptr<MemoryTracker> tracker, MemCategory category)
    : prev_tracker_(t_tracker), prev_category_(t_category) {
  t_tracker = std::move(tracker);
  t_category = category;
}
MemoryScope::~MemoryScope() {
  t_tracker = std::move(prev_tracker_);
  t_category = prev_category_;
}
const std::shared_ptr<MemoryTracker>& MemoryScope::current_tracker() {
  return t_tracker;
}
MemCategory MemoryScope::current_category() {
  return t_category;
}

}  // namespace braid
