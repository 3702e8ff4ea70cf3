// HF Accelerate's YAML config (what `accelerate config` writes) as braid reads it:
// `braid train x.yaml --accelerate-config acc.yaml`, or `braid launch --config_file acc.yaml --
// braid train x.yaml`, which takes the processes from it and hands the file to every rank. Like
// a DeepSpeed config it describes the distribution: distributed_type (NO, MULTI_CPU, MULTI_GPU,
// FSDP with its fsdp_config, DEEPSPEED with its deepspeed_config or deepspeed_config_file),
// mixed_precision, gradient accumulation; the launch keys (num_processes, machines, ranks,
// addresses) are for the launcher. Unknown keys are errors with the closest known key; keys braid
// accepts but does not need are listed with why; what braid does not do yet is "not supported
// yet" naming the key.
#pragma once

#include <string>
#include <vector>

#include "braid/config/config.h"
#include "braid/config/deepspeed_config.h"

namespace braid::config {

// The environment variable through which `braid launch --config_file` hands the file to ranks.
inline constexpr const char* kAccelerateConfigEnv = "BRAID_ACCELERATE_CONFIG";

std::vector<DialectEntry> apply_accelerate_config(TrainConfig& cfg, const std::string& yaml_text,
                                                  const std::string& source, int64_t dp_size);
std::vector<DialectEntry> load_accelerate_config(TrainConfig& cfg, const std::string& path,
                                                 int64_t dp_size);

// What `braid launch --config_file` takes from the file.
struct AccelerateLaunch {
  int num_processes = 0;  // 0: not given
  int num_machines = 1;
};
AccelerateLaunch accelerate_launch_settings(const std::string& path);

}  // namespace braid::config
