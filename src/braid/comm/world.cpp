#include "braid/comm/world.h"

#include <cstdlib>

#include "braid/comm/local/local_group.h"
#include "braid/core/error.h"

namespace braid::comm {

int launched_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"}) {
    if (const char* v = std::getenv(name); v && *v) return std::max(0, std::atoi(v));
  }
  if (std::getenv("SLURM_STEP_ID") && std::getenv("SLURM_NTASKS"))
    return std::max(0, std::atoi(std::getenv("SLURM_NTASKS")));
  return 0;
}

std::shared_ptr<ProcessGroup> init_world(ProcessGroupOptions options) {
  options = ProcessGroupOptions::from_env(std::move(options));
  const int n = launched_world_size();
  if (n >= 1 && mpi_built()) return create_mpi_world(std::move(options));
  if (n > 1)
    throw CommError(detail::concat("launched as ", n,
                                   " ranks, but this braid was built without MPI "
                                   "(install libopenmpi-dev and rebuild)"));
  return LocalGroup::create(1, std::move(options))[0];
}

}  // namespace braid::comm
