// Every rank of a job must train the same config: a rank started with another file or other
// --set values would otherwise join the same collectives with other hyperparameters and
// compute a silently wrong result (or a different model, and hang).
#pragma once

#include "braid/comm/process_group.h"
#include "braid/config/config.h"

namespace braid::config {

// Compares every config field across the ranks of `world` (one all_gather of per-field hashes)
// and throws on every rank when any rank differs from rank 0, naming the fields, the ranks and
// this rank's values. Paths (data, tokenizer, model files, output dir) may differ between
// nodes and are not compared.
void check_config_agrees(const TrainConfig& cfg, comm::ProcessGroup& world);

}  // namespace braid::config
