// The blocks of a DeepSpeed config read outside deepspeed_config.cpp, by the reader it builds.
#pragma once

#include "braid/config/config.h"
#include "braid/config/dialect_reader.h"

namespace braid::config::dialect {

// "optimizer" (type AdamW, Adam or SGD and its params) and "scheduler" (WarmupLR,
// WarmupDecayLR, WarmupCosineLR, as DeepSpeed's runtime/lr_schedules.py defines them), into
// cfg.optimizer and cfg.schedule; deepspeed_optimizer.cpp.
void read_deepspeed_optimizer(DialectReader& r, TrainConfig& cfg);
void read_deepspeed_scheduler(DialectReader& r, TrainConfig& cfg);

}  // namespace braid::config::dialect
