// The blocks of an Accelerate config read outside accelerate_config.cpp, by the reader it
// builds (Note [Accelerate's defaults] there says what an absent key means).
#pragma once

#include "braid/config/config.h"
#include "braid/config/dialect_reader.h"

namespace braid::config::dialect {

// fsdp_config (FSDP1 and FSDP2 keys) and parallelism_config (tensor, context and data-parallel
// sizes) into cfg.parallel; accelerate_parallel.cpp.
void read_accelerate_fsdp(DialectReader& r, TrainConfig& cfg);
void read_accelerate_parallelism(DialectReader& r, TrainConfig& cfg);

}  // namespace braid::config::dialect
