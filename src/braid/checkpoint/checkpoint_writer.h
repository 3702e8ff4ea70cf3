// save_checkpoint: a training checkpoint of every rank's optimizer slices (master weights and
// optimizer state) and the training state that is not a tensor, written atomically
// (Note [Checkpoint layout], manifest.h; Note [Atomic save] in the .cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "braid/comm/process_group.h"
#include "braid/optim/optimizer.h"

namespace braid::checkpoint {

struct SaveRequest {
  std::filesystem::path root;  // checkpoint.dir
  int64_t step = 0;
  int64_t keep_last = 0;  // step directories kept (0: all)
  std::string layout;     // Strategy::describe()
  int dp_size = 1;
  std::map<std::string, int64_t> counters;  // training state that is not a tensor
  std::string config;                       // the run's config, for inspection
  // Tests: called before each stage of the save ("create", "write", "sync", "manifest",
  // "rename", "publish") on this rank; throwing from it fails the save there.
  std::function<void(const std::string& stage)> fault;
};

struct SaveResult {
  std::filesystem::path dir;  // the step directory
  int64_t bytes = 0;          // all ranks' files
  double seconds = 0;
};

// Collective over group (null: one process); the optimizer must be between steps. Any rank's
// failure fails the save on every rank with that rank's error; the previous checkpoint and
// `latest` are untouched until the new one is complete.
SaveResult save_checkpoint(comm::ProcessGroup* group, optim::Optimizer& optimizer,
                           const SaveRequest& request);

}  // namespace braid::checkpoint
