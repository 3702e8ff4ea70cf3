// Compute threads per rank: cores on this node divided by the ranks on this node, unless
// BRAID_NUM_THREADS (or OMP_NUM_THREADS) says otherwise.
#pragma once

namespace braid::launch {

int local_world_size();         // from OMPI_COMM_WORLD_LOCAL_SIZE / SLURM / BRAID_LOCAL_WORLD_SIZE
int threads_per_rank();         // >= 1
void apply_threads_per_rank();  // sets OpenMP's thread count for the calling thread

}  // namespace braid::launch
