#include "braid/launch/threads.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace braid::launch {

namespace {
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  return std::max(0, std::atoi(v));
}
}  // namespace

int local_world_size() {
  for (const char* name : {"BRAID_LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                           "SLURM_NTASKS_PER_NODE", "MPI_LOCALNRANKS"}) {
    if (int n = env_int(name)) return n;
  }
  return 1;
}

int threads_per_rank() {
  if (int n = env_int("BRAID_NUM_THREADS")) return n;
  if (int n = env_int("OMP_NUM_THREADS")) return n;
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / local_world_size());
}

void apply_threads_per_rank() {
  omp_set_num_threads(threads_per_rank());
}

}  // namespace braid::launch
