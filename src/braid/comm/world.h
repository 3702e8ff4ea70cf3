// The group a process starts from, chosen by how it was launched.
//
//   auto world = braid::comm::init_world();   // under `braid launch` / mpirun / srun: MPI
//   world->rank(), world->size();              // otherwise: a size-1 group
//
// Options come from `options` with BRAID_COMM_TIMEOUT / BRAID_COMM_DEBUG applied on top.
#pragma once

#include <memory>

#include "braid/comm/process_group.h"

namespace braid::comm {

std::shared_ptr<ProcessGroup> init_world(ProcessGroupOptions options = {});

// Ranks the launcher says this job has (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE, SLURM_NTASKS
// under srun); 0 when not launched as a job.
int launched_world_size();

// The MPI backend (mpi/mpi_world.cpp), or its stub (no_mpi.cpp) in builds without MPI.
bool mpi_built();
std::shared_ptr<ProcessGroup> create_mpi_world(ProcessGroupOptions options);

}  // namespace braid::comm
