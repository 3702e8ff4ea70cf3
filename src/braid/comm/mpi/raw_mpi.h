// RawMpi: the plain MPI calls that braid's collectives are measured against (benchmarks only).
// Blocking and unbounded, on a duplicate of the group's communicator. The header does not need
// MPI; create() returns null for non-MPI groups and in builds without MPI.
#pragma once

#include <memory>

#include "braid/comm/process_group.h"

namespace braid::comm {

class RawMpi {
 public:
  static std::unique_ptr<RawMpi> create(ProcessGroup& group);
  virtual ~RawMpi() = default;

  // Each throws CommError("raw MPI has no <dtype> sum") for types MPI cannot reduce.
  virtual void all_reduce(Tensor& t) = 0;                          // MPI_Allreduce, in place
  virtual void reduce_scatter(Tensor& out, const Tensor& in) = 0;  // MPI_Reduce_scatter_block
  virtual void all_gather(Tensor& out, const Tensor& in) = 0;      // MPI_Allgather
  virtual void broadcast(Tensor& t, int root) = 0;                 // MPI_Bcast
  virtual void all_to_all(Tensor& out, const Tensor& in) = 0;      // MPI_Alltoall
  virtual void barrier() = 0;                                      // MPI_Barrier
};

}  // namespace braid::comm
