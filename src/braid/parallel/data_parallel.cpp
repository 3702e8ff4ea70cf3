#include "braid/parallel/data_parallel.h"

namespace braid::parallel {

void DataParallel::sum_gradient(const std::string& name, comm::ProcessGroup& group) {
  for (optim::ParamSlice& s : optimizer_slices())
    if (s.name() == name && s.grad.defined() && s.grad.numel() > 0)
      group.all_reduce(s.grad)->wait();
}

std::vector<int> all_units(const nn::ParamLayout& layout) {
  std::vector<int> units(layout.units().size());
  for (size_t u = 0; u < units.size(); ++u) units[u] = static_cast<int>(u);
  return units;
}

}  // namespace braid::parallel
