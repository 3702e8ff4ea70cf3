// The peak of a rank's `communication` category: what its process groups hold for their whole
// life, plus the largest staging buffer in use at once.
// Note [Communication estimate]: every group a strategy creates (Note [Group memory],
// comm/process_group.h) charges each member a 1/size share of its shared-memory arena,
// ShmEngine::arena_bytes(size, slot) (+ 4 KiB of alignment in an MPI window). The groups, as
// strategy_factory.cpp, zero_groups.cpp, device_mesh.cpp and pipeline_strategy.cpp create them:
//   the world; with tp or pp the mesh's dp, pp and tp groups (size-1 ones included), and a
//   pipeline's mp (pp x tp) and embedding (first and last stage) groups; a sharded strategy
//   (ZeRO, fsdp but NO_SHARD) over its dp ranks its dp group, or with S < dp ranks per shard its
//   dp_replicate, dp_shard and dp groups, and stage 3 a gather group of its shard group.
// On top of them, the staging buffers, each freed before the next: the collective guard's
// messages (1 KiB per rank), the strategy's casts (Note [Buffer estimate], memory_estimate.cpp),
// the copy of a gradient all-reduced over the tp group (a x tokens x d_model), and a pipeline
// stage's buffered sends (ranks as threads). Not modelled: the point-to-point transport between
// nodes (its staging grows with the messages), sequence parallelism.
#pragma once

#include <cstdint>
#include <string>

namespace braid::parallel {

// How ranks talk: "local" (threads of one process, the tests' run_ranks) or "mpi" (processes
// on one node: an MPI-3 shared window per group).
struct CommBackend {
  std::string kind = "mpi";
  int64_t shm_slot_bytes = 256 << 10;  // ProcessGroupOptions::shm_slot_bytes
};

// The backends estimate-memory knows, for its errors.
const char* comm_backend_names();

// The groups a rank belongs to: of `world` ranks, dp data-parallel ones with S per shard group,
// tp and pp; `sharded` (ZeRO stage >= 1), `gather` (stage 3), `embedding` (a pipeline's first
// or last stage).
struct GroupShape {
  int world = 1, dp = 1, S = 1, tp = 1, pp = 1;
  bool sharded = false, gather = false, embedding = false;
};

// The groups' charges on that rank. Throws naming the backend when it is not one of
// comm_backend_names().
int64_t group_memory(const CommBackend& backend, const GroupShape& g);

}  // namespace braid::parallel
