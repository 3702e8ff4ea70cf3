// Provenance: where each value of a resolved TrainConfig came from, for `--print-config`, which
// prints it after the value as a YAML comment (so the output still reads back as the same config):
//   lr: 0.002             # configs/demo.yaml:18
//   eps: 1e-08            # ds.json: no optimizer.params.eps: DeepSpeed's default
//   beta2: 0.99           # ds.json: optimizer.params.betas "auto": the YAML's value (x.yaml:20)
//   global_batch_size: 16 # derived: global_batch_size = micro 4 x accumulation 2 x dp 2 (ds.json)
//   max_steps: 10         # --set
// Each source records what it set, in the order the config is built (the braid YAML, then a
// DeepSpeed or Accelerate file, then --set), so the last one to set a key names it; a key nothing
// set is "braid default".
#pragma once

#include <map>
#include <string>
#include <vector>

#include "braid/config/deepspeed_config.h"

namespace braid::config {

class Provenance {
 public:
  // key: "section.key"; origin: one line ("configs/demo.yaml:18", "--set").
  void set(const std::string& key, const std::string& origin);
  // Its origin, or "braid default" when nothing set it.
  std::string of(const std::string& key) const;
  // What a dialect file's keys set (DialectEntry::sets), in the order they were applied. An
  // "auto" keeps what was there: it names the YAML's origin, or leaves the origin alone when an
  // earlier key of the same file set the value.
  void add(const std::vector<DialectEntry>& entries);

 private:
  std::map<std::string, std::string> origins_;
};

}  // namespace braid::config
