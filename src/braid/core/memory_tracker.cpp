#include "braid/core/memory_tracker.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
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
    case MemCategory::scratch:
      return "kernel scratch";
    case MemCategory::communication:
      return "communication buffers";
    case MemCategory::checkpoint:
      return "checkpoint snapshot";
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

// One line: the device, the allocation, the budget, what is in use per category (and its
// peak), and what would help. Called with mu_ held.
std::string MemoryTracker::out_of_memory_message(MemCategory c, int64_t bytes,
                                                 int64_t budget) const {
  std::ostringstream os;
  os << "out of memory on " << device_ << ": allocating " << format_bytes(bytes) << " of "
     << mem_category_name(c) << " would take " << format_bytes(total_ + bytes)
     << " past the budget of " << format_bytes(budget) << ". In use " << format_bytes(total_)
     << " (peak " << format_bytes(total_peak_) << "):";
  for (int i = 0; i < kNumMemCategories; ++i)
    os << " " << mem_category_name(static_cast<MemCategory>(i)) << " " << format_bytes(current_[i])
       << " (peak " << format_bytes(peak_[i]) << ")" << (i + 1 < kNumMemCategories ? "," : ".");
  os << " What would help: shard more (a higher ZeRO stage, more ranks), activation "
        "checkpointing, a smaller micro-batch, ";
  // Activations grow with the sequence: splitting it divides them.
  if (c == MemCategory::activations)
    os << "splitting long sequences over ranks (parallel.context_parallel_size), ";
  os << "or a larger budget (memory.budget).";
  return os.str();
}

void MemoryTracker::charge(MemCategory c, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t budget = budget_.load();
  if (budget > 0 && total_ + bytes > budget)
    throw OutOfMemory(out_of_memory_message(c, bytes, budget));
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

// ---- parse_bytes, available_memory_bytes ----

namespace {

struct Unit {
  const char* name;  // lower case
  int64_t bytes;
};
constexpr Unit kUnits[] = {
    {"", 1},
    {"b", 1},
    {"kb", 1000},
    {"mb", 1000 * 1000},
    {"gb", 1000 * 1000 * 1000},
    {"tb", int64_t{1000} * 1000 * 1000 * 1000},
    {"kib", int64_t{1} << 10},
    {"mib", int64_t{1} << 20},
    {"gib", int64_t{1} << 30},
    {"tib", int64_t{1} << 40},
};

[[noreturn]] void bad_bytes(const std::string& text, const std::string& why) {
  throw Error(detail::concat(
      "memory size '", text, "': ", why,
      "; expected a non-negative number with an optional unit: B, KB, MB, GB, TB (powers of "
      "1000) or KiB, MiB, GiB, TiB (powers of 1024), any case, e.g. 4GiB, 1.5GiB, 512 MiB, 4GB, "
      "1e9, 123"));
}

}  // namespace

int64_t parse_bytes(const std::string& text) {
  auto is_space = [](char ch) { return std::isspace(static_cast<unsigned char>(ch)) != 0; };
  size_t b = 0, e = text.size();
  while (b < e && is_space(text[b])) ++b;
  while (e > b && is_space(text[e - 1])) --e;
  if (b == e) bad_bytes(text, "empty");
  if (text[b] == '-') bad_bytes(text, "negative");

  // The number: digits, an optional fraction, an optional exponent.
  auto is_digit = [](char ch) { return ch >= '0' && ch <= '9'; };
  size_t p = b;
  size_t int_digits = 0, frac_digits = 0;
  while (p < e && is_digit(text[p])) ++p, ++int_digits;
  bool integral = true;
  if (p < e && text[p] == '.') {
    integral = false;
    ++p;
    while (p < e && is_digit(text[p])) ++p, ++frac_digits;
  }
  if (int_digits + frac_digits == 0) bad_bytes(text, "no number");
  if (p < e && (text[p] == 'e' || text[p] == 'E')) {
    size_t q = p + 1;
    if (q < e && (text[q] == '+' || text[q] == '-')) ++q;
    if (q < e && is_digit(text[q])) {  // otherwise the 'e' starts a (bad) unit
      integral = false;
      p = q;
      while (p < e && is_digit(text[p])) ++p;
    }
  }
  const size_t number_end = p;
  while (p < e && is_space(text[p])) ++p;
  const size_t unit_begin = p;
  std::string unit;
  for (; p < e; ++p) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[p])));
  int64_t scale = 0;
  for (const Unit& u : kUnits)
    if (unit == u.name) scale = u.bytes;
  if (scale == 0) bad_bytes(text, "unknown unit '" + text.substr(unit_begin, e - unit_begin) + "'");

  const char* first = text.data() + b;
  const char* last = text.data() + number_end;
  if (integral) {
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(first, last, v);
    int64_t bytes = 0;
    if (ec != std::errc() || end != last || v > static_cast<uint64_t>(INT64_MAX) ||
        __builtin_mul_overflow(static_cast<int64_t>(v), scale, &bytes))
      bad_bytes(text, "more than 2^63-1 bytes");
    return bytes;
  }
  double v = 0;
  auto [end, ec] = std::from_chars(first, last, v);
  if (ec == std::errc::result_out_of_range) bad_bytes(text, "more than 2^63-1 bytes");
  if (ec != std::errc() || end != last) bad_bytes(text, "not a number");
  const double bytes = std::round(v * static_cast<double>(scale));
  // 2^63 is exactly representable; every double below it converts without overflow.
  if (!(bytes < 9223372036854775808.0)) bad_bytes(text, "more than 2^63-1 bytes");
  return static_cast<int64_t>(bytes);
}

int64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream is(line.substr(13));
    int64_t kib = 0;
    std::string unit;
    if (!(is >> kib) || kib < 0) return 0;
    is >> unit;
    return unit == "kB" || unit.empty() ? kib * 1024 : 0;
  }
  return 0;
}

// ---- MemoryCharge ----

MemoryCharge::~MemoryCharge() {
  if (tracker_ && bytes_) tracker_->release(category_, bytes_);
}

MemoryCharge::MemoryCharge(MemoryCharge&& other) noexcept
    : tracker_(std::move(other.tracker_)), category_(other.category_), bytes_(other.bytes_) {
  other.bytes_ = 0;
}

MemoryCharge& MemoryCharge::operator=(MemoryCharge&& other) noexcept {
  if (this != &other) {
    if (tracker_ && bytes_) tracker_->release(category_, bytes_);
    tracker_ = std::move(other.tracker_);
    category_ = other.category_;
    bytes_ = other.bytes_;
    other.bytes_ = 0;
  }
  return *this;
}

void MemoryCharge::resize(int64_t bytes) {
  BRAID_CHECK(bytes >= 0, "memory charge of ", bytes, " bytes of ", mem_category_name(category_));
  if (tracker_) {
    if (bytes > bytes_) tracker_->charge(category_, bytes - bytes_);
    if (bytes < bytes_) tracker_->release(category_, bytes_ - bytes);
  }
  bytes_ = bytes;
}

void MemoryCharge::retarget(std::shared_ptr<MemoryTracker> tracker) {
  if (tracker == tracker_) return;
  if (tracker && bytes_) tracker->charge(category_, bytes_);
  if (tracker_ && bytes_) tracker_->release(category_, bytes_);
  tracker_ = std::move(tracker);
}

// ---- MemoryScope ----

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
