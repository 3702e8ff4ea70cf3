// DeepSpeed's JSON config as braid reads it (`braid train x.yaml --deepspeed ds.json`, as HF
// Trainer's --deepspeed): it describes the distribution (batch sizes, precision, ZeRO stage and
// offload, optimizer, scheduler, clipping), not the model or data, so it applies on top of a
// braid TrainConfig. Explicit values replace the YAML's; "auto" keeps the YAML's (HF's
// integration fills "auto" from TrainingArguments; the YAML plays that part). DeepSpeed's batch
// arithmetic and its error cases hold. Unknown keys are errors with the closest known key; keys
// braid accepts but does not need are listed with why; keys for what braid does not do yet are
// "not supported yet" errors naming the key.
#pragma once

#include <string>
#include <vector>

#include "braid/config/config.h"

namespace braid::config {

// What one DeepSpeed key became: "training.micro_batch_size = 4", "auto: ...", "ignored: why";
// and, for --print-config's origins (provenance.h), which braid keys it set and how.
struct DialectEntry {
  // given: the file's value; defaulted: the key is absent and the tool's own default holds;
  // kept: "auto" keeps the value before it; derived: worked out from other values.
  enum class How { given, defaulted, kept, derived };
  std::string key;                // "zero_optimization.stage"
  std::string effect;             // "parallel.strategy = zero3"
  std::string source;             // the file that holds the key
  std::vector<std::string> sets;  // the braid keys named "key = value" in effect (or kept)
  How how = How::given;
  // The origin without the file: "optimizer.params.lr", "no optimizer.params.eps: DeepSpeed's
  // default", "train_batch_size \"auto\": the YAML's value", "derived: global_batch_size = ...".
  std::string origin;
};

// Applies the DeepSpeed config `json_text` (named `source` in errors) to cfg. dp_size: the
// data-parallel world size DeepSpeed's batch arithmetic uses (launched ranks / (tp x pp)).
std::vector<DialectEntry> apply_deepspeed_config(TrainConfig& cfg, const std::string& json_text,
                                                 const std::string& source, int64_t dp_size);
std::vector<DialectEntry> load_deepspeed_config(TrainConfig& cfg, const std::string& path,
                                                int64_t dp_size);
// "# from ds.json (DeepSpeed)\n#   key: effect\n..." for --print-config (source names the file
// and its dialect); entries from another file (an Accelerate config's deepspeed_config_file)
// under their own "# from FILE" line.
std::string describe_dialect(const std::string& source, const std::vector<DialectEntry>& entries);

}  // namespace braid::config
