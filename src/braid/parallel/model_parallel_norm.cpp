#include "braid/parallel/model_parallel_norm.h"

#include <algorithm>

namespace braid::parallel {

namespace {
void wait_timed(const std::shared_ptr<comm::Work>& w, double* waited) {
  const auto t0 = std::chrono::steady_clock::now();
  w->wait();
  if (waited)
    *waited +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

optim::NormReduction norm_reduction(comm::ProcessGroup* group, double* waited) {
  optim::NormReduction r;
  if (!group || group->size() <= 1) return r;
  r.max = [group, waited](float m) {
    DeviceScope host(Device::cpu());  // a host value, whatever the caller's default device
    Tensor t = Tensor::full(Shape{1}, m);
    wait_timed(group->all_reduce(t, comm::ReduceOp::max), waited);
    return t.data<float>()[0];
  };
  r.sum = [group, waited](__int128 s) {
    // Four 32-bit limbs in int64: the ranks' limbs add up without overflow or rounding.
    Tensor limbs = Tensor::empty(Shape{4}, DType::i64, MemCategory::communication,
                                 MemoryScope::current_tracker(), Device::cpu());
    auto* l = limbs.data<int64_t>();
    for (int k = 0; k < 4; ++k) l[k] = static_cast<int64_t>((s >> (32 * k)) & 0xffffffffu);
    wait_timed(group->all_reduce(limbs), waited);
    __int128 total = 0;
    for (int k = 0; k < 4; ++k) total += static_cast<__int128>(l[k]) << (32 * k);
    return total;
  };
  return r;
}

optim::NormReduction compose(optim::NormReduction first, optim::NormReduction then) {
  if (!first.max) return then;
  if (!then.max) return first;
  optim::NormReduction r;
  r.max = [first, then](float m) { return then.max(first.max(m)); };
  r.sum = [first, then](__int128 s) { return then.sum(first.sum(s)); };
  return r;
}

std::vector<Tensor> counted_pieces(const nn::ParamLayout& layout, int unit, int64_t begin,
                                   const Tensor& grads) {
  std::vector<Tensor> out;
  const int64_t end = begin + grads.numel();
  for (int i : layout.units().at(static_cast<size_t>(unit)).params) {
    const nn::ParamInfo& p = layout.params()[static_cast<size_t>(i)];
    if (!p.param->tp.counts_in_norm) continue;
    const int64_t lo = std::max(begin, p.unit_offset), hi = std::min(end, p.unit_offset + p.numel);
    if (lo < hi) out.push_back(grads.flat_range(lo - begin, hi - lo));
  }
  return out;
}

bool all_count(const nn::ParamLayout& layout) {
  for (const nn::ParamInfo& p : layout.params())
    if (!p.param->tp.counts_in_norm) return false;
  return true;
}

}  // namespace braid::parallel
