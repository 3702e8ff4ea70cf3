#include "braid/parallel/estimate/comm_estimate.h"

#include "braid/comm/shm/shm_engine.h"
#include "braid/core/error.h"

namespace braid::parallel {

const char* comm_backend_names() {
  return "local, mpi";
}

int64_t group_memory(const CommBackend& backend, const GroupShape& g) {
  BRAID_CHECK(backend.kind == "local" || backend.kind == "mpi", "estimate-memory: backend '",
              backend.kind, "' is not modelled (", comm_backend_names(), ")");
  BRAID_CHECK(backend.shm_slot_bytes >= 1, "estimate-memory: shm slot bytes must be >= 1, got ",
              backend.shm_slot_bytes);
  // Rank 0's share: the remainder of an uneven split goes to the low ranks (local_hub.cpp,
  // mpi_group.cpp).
  auto share = [&](int size) {
    const int64_t window = static_cast<int64_t>(comm::ShmEngine::arena_bytes(
                               size, static_cast<size_t>(backend.shm_slot_bytes))) +
                           (backend.kind == "mpi" ? 4096 : 0);
    return window / size + (window % size ? 1 : 0);
  };
  int64_t bytes = share(g.world);
  if (g.tp > 1 || g.pp > 1) bytes += share(g.dp) + share(g.pp) + share(g.tp);
  if (g.pp > 1) bytes += share(g.pp * g.tp) + (g.embedding ? share(2) : 0);  // mp, embedding
  if (g.sharded) {
    bytes += share(g.dp);
    if (g.S < g.dp) bytes += share(g.dp / g.S) + share(g.S);
    if (g.gather) bytes += share(g.S);
  }
  return bytes;
}

}  // namespace braid::parallel
