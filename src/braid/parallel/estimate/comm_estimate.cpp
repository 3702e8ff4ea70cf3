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
  // A split of n ranks (none when it is the world itself).
  auto group = [&](int n) -> int64_t { return n == g.world ? 0 : share(n); };
  // The mesh's dimensions (dp_replicate R, dp_shard Sd, pp, cp, tp), then its flattened groups,
  // each made when it spans two dimensions of more than one rank and is not one made already.
  const int R = g.dp / g.S, Sd = g.S / g.cp;
  auto spans = [](std::initializer_list<int> dims) {
    int n = 0;
    for (int d : dims) n += d > 1;
    return n;
  };
  int64_t bytes = share(g.world);
  for (int n : {R, Sd, g.pp, g.cp, g.tp})
    if (n > 1) bytes += group(n);
  if (spans({R, Sd, g.cp}) > 1) bytes += group(g.dp);               // dp
  if (R > 1 && spans({Sd, g.cp}) > 1) bytes += group(g.S);          // dp_shard_cp
  if (g.cp > 1 && spans({R, Sd}) > 1) bytes += group(g.dp / g.cp);  // batch
  if (g.pp > 1 && g.tp > 1) bytes += group(g.pp * g.tp);            // mp
  if (g.data_parallel && g.dp == 1) bytes += share(1);              // the dp group: this rank alone
  if (g.gather) bytes += share(g.S);
  if (g.pp > 1 && g.embedding) bytes += share(2);
  return bytes;
}

}  // namespace braid::parallel
