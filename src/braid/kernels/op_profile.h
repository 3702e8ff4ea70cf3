// Per-op host time of the kernels (Note [Op profile]): `braid train --profile` turns it on for
// the steady steps and reads what each op took (train/step_profile.h).
//
// Note [Op profile]: every op of ops.h passes BRAID_DEVICE_DISPATCH (device.h), whose CPU path
// opens an OpScope. While profiling is on, the outermost scope on a thread times its op and adds
// the time and a call to the op's total (an op calling another op, as linear_forward calls
// matmul, counts once, as itself); totals are per process, over every thread (ranks as threads
// count together). Off, a scope is one relaxed load.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace braid::kernels {

namespace op_profile_detail {
extern std::atomic<bool> g_op_profiling;
void record_op(const char* op, double seconds);
extern thread_local int t_op_depth;
}  // namespace op_profile_detail

void set_op_profiling(bool on);
inline bool op_profiling() {
  return op_profile_detail::g_op_profiling.load(std::memory_order_relaxed);
}

struct OpTotal {
  std::string op;
  int64_t calls = 0;
  double seconds = 0;
};

// The totals since the last reset, by op name.
std::vector<OpTotal> op_totals();
void reset_op_totals();

class OpScope {
 public:
  explicit OpScope(const char* op) {
    if (!op_profiling()) return;
    if (op_profile_detail::t_op_depth++ == 0) {
      op_ = op;
      start_ = std::chrono::steady_clock::now();
    }
    counted_ = true;
  }
  ~OpScope() {
    if (!counted_) return;
    if (--op_profile_detail::t_op_depth == 0 && op_) {
      op_profile_detail::record_op(
          op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  const char* op_ = nullptr;
  bool counted_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace braid::kernels
