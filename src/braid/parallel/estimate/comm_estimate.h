// The peak of a rank's `communication` category: what its process groups hold for their whole
// life, plus the largest staging buffer in use at once.
// Note [Communication estimate]: every group a rank belongs to (Note [Group memory],
// comm/process_group.h) charges it a 1/size share of its shared-memory arena,
// ShmEngine::arena_bytes(size, slot) (+ 4 KiB of alignment in an MPI window). The groups, as the
// one mesh makes them (Note [Mesh groups], device_mesh.h; a group that is the world is the world,
// one equal to another is that one, a one-rank group is made only when asked for):
//   the world; each of dp_replicate, dp_shard, pp, cp and tp of more than one rank; dp
//   (dp_replicate x dp_shard x cp) when two of those have several ranks, dp_shard_cp when
//   dp_shard and cp both do and dp_replicate too (else it is dp or one of them), batch
//   (dp_replicate x dp_shard) when both do beside cp, mp (pp x tp) when both pp and tp do; the
//   dp group of a data-parallel runtime ("none" asks for none) even when it is this rank alone;
//   stage 3's gather twin of the shard group; a pipeline's embedding group (first and last
//   stage).
// On top of them, the staging buffers, each freed before the next: the collective guard's
// messages (1 KiB per rank), the strategy's casts (Note [Buffer estimate], memory_estimate.cpp),
// the copy of a gradient all-reduced over the tp group (a x tokens x d_model), a pipeline
// stage's buffered sends (ranks as threads) and context-parallel attention's buffers (Note
// [Context-parallel staging], memory_estimate.cpp); under sequence parallelism the all-gather of
// a reduce-scattered output's gradient (the same a x tokens x d_model) and a stage's sends of
// its rows. Not modelled: the point-to-point transport between nodes (its staging grows with
// the messages).
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

// The groups a rank belongs to: of `world` ranks, dp data-parallel ones with S per shard group
// (the cp ranks among both: dp = batch ranks x cp), tp and pp; `sharded` (ZeRO stage >= 1),
// `gather` (stage 3), `embedding` (a pipeline's first or last stage), `data_parallel` (a
// data-parallel runtime: every plan but "none").
struct GroupShape {
  int world = 1, dp = 1, S = 1, tp = 1, pp = 1;
  bool sharded = false, gather = false, embedding = false, data_parallel = true;
  int cp = 1;  // context-parallel ranks, among dp's and S's
};

// The groups' charges on that rank. Throws naming the backend when it is not one of
// comm_backend_names().
int64_t group_memory(const CommBackend& backend, const GroupShape& g);

}  // namespace braid::parallel
