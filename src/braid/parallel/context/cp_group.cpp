#include "braid/parallel/context/cp_group.h"

#include <chrono>

#include "braid/core/error.h"

namespace braid::parallel {

CpMode cp_mode_from_name(const std::string& name) {
  if (name == "ring") return CpMode::ring;
  if (name == "ulysses") return CpMode::ulysses;
  BRAID_THROW("config key 'parallel.context_parallel_mode' is '", name,
              "', expected one of: ring, ulysses");
}

std::string cp_mode_name(CpMode mode) {
  return mode == CpMode::ring ? "ring" : "ulysses";
}

nn::SequenceSplit sequence_split(CpMode mode) {
  return mode == CpMode::ring ? nn::SequenceSplit::zigzag : nn::SequenceSplit::contiguous;
}

CpGroup::CpGroup(std::shared_ptr<comm::ProcessGroup> group, CpMode mode)
    : nn::ContextParallel(group->rank(), group->size(), sequence_split(mode)),
      group_(std::move(group)),
      mode_(mode) {}

std::string CpGroup::describe() const {
  return "cp=" + std::to_string(size()) +
         (mode_ == CpMode::ring ? " (ring attention, zig-zag)" : " (ulysses)");
}

nn::Variable CpGroup::attention(const nn::Variable& q, const nn::Variable& k,
                                const nn::Variable& v) {
  return mode_ == CpMode::ring ? ring_attention(*this, q, k, v) : ulysses_attention(*this, q, k, v);
}

void CpGroup::wait(const std::shared_ptr<comm::Work>& work, size_t bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  work->wait();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard lock(mu_);
  stats_.bytes += static_cast<int64_t>(bytes);
  stats_.wait_ms += ms;
}

CpCommStats CpGroup::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void CpGroup::reset_stats() {
  std::lock_guard lock(mu_);
  stats_ = {};
}

}  // namespace braid::parallel
