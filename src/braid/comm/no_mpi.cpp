// The MPI backend's stub for builds without MPI: a run is then one rank (world.cpp).
#include "braid/comm/mpi/raw_mpi.h"
#include "braid/comm/world.h"
#include "braid/core/error.h"

namespace braid::comm {

bool mpi_built() {
  return false;
}

std::shared_ptr<ProcessGroup> create_mpi_world(ProcessGroupOptions) {
  throw CommError("this braid was built without MPI (install libopenmpi-dev and rebuild)");
}

std::unique_ptr<RawMpi> RawMpi::create(ProcessGroup&) {
  return nullptr;
}

}  // namespace braid::comm
