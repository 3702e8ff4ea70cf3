#include "braid/kernels/op_profile.h"

#include <map>
#include <mutex>

namespace braid::kernels {

namespace op_profile_detail {

std::atomic<bool> g_op_profiling{false};
thread_local int t_op_depth = 0;

namespace {
std::mutex g_mu;
std::map<std::string, OpTotal>& totals() {
  static std::map<std::string, OpTotal> t;
  return t;
}
}  // namespace

void record_op(const char* op, double seconds) {
  std::lock_guard lock(g_mu);
  OpTotal& t = totals()[op];
  ++t.calls;
  t.seconds += seconds;
}

}  // namespace op_profile_detail

void set_op_profiling(bool on) {
  op_profile_detail::g_op_profiling.store(on, std::memory_order_relaxed);
}

std::vector<OpTotal> op_totals() {
  std::lock_guard lock(op_profile_detail::g_mu);
  std::vector<OpTotal> out;
  for (const auto& [name, t] : op_profile_detail::totals()) {
    out.push_back(t);
    out.back().op = name;
  }
  return out;
}

void reset_op_totals() {
  std::lock_guard lock(op_profile_detail::g_mu);
  op_profile_detail::totals().clear();
}

}  // namespace braid::kernels
