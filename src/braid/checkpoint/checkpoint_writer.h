// Writing training checkpoints: every rank's optimizer slices (master weights and optimizer
// state) and the training state that is not a tensor, atomically (Note [Checkpoint layout],
// manifest.h; Note [Atomic save], save_plan.h), either at once (save_checkpoint) or with the
// write in the background while training goes on (AsyncSaver, Note [Async save]).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "braid/checkpoint/manifest.h"
#include "braid/comm/process_group.h"
#include "braid/core/tensor.h"
#include "braid/optim/optimizer.h"

namespace braid::checkpoint {

struct SaveRequest {
  std::filesystem::path root;  // checkpoint.dir
  int64_t step = 0;
  int64_t keep_last = 0;  // step directories kept (0: all)
  std::string layout;     // parallel::Parallelism::describe()
  int dp_size = 1;
  std::map<std::string, int64_t> counters;  // training state that is not a tensor
  std::string config;                       // the run's config, for inspection
  std::string model_config;                 // a Transformer's config.json (export reads it)
  // Tests: the manifest version to write, 3 (a file checksum, no block checksums: a checkpoint
  // as braid wrote them before version 4) or 4, and its block size.
  int version = kManifestVersion;
  int64_t block_bytes = kBlockBytes;  // version 4: a multiple of 4096
  // Tests: called before each stage of the save ("create", "write", "sync", "manifest",
  // "rename", "publish") on this rank (for an async save "write" and "sync" on its writer
  // thread); throwing from it fails the save there.
  std::function<void(const std::string& stage)> fault;
};

struct SaveResult {
  std::filesystem::path dir;  // the step directory
  int64_t step = 0;
  int64_t bytes = 0;           // all ranks' files
  double seconds = 0;          // from the start of the save to `latest` naming it
  double blocked_seconds = 0;  // of those, the time training waited (all of it when not async)
};

// Collective over group (null: one process); the optimizer must be between steps. Any rank's
// failure fails the save on every rank with that rank's error; the previous checkpoint and
// `latest` are untouched until the new one is complete.
SaveResult save_checkpoint(comm::ProcessGroup* group, optim::Optimizer& optimizer,
                           const SaveRequest& request);

class SavePlan;

// Note [Async save]: start() plans the save with the other ranks and copies this rank's file
// into memory (a buffer kept from save to save, charged to the memory tracker as checkpoint
// memory), then a thread writes it with O_DIRECT (Note [Direct write], file_io.cpp) and fsyncs it
// while training goes on. poll() at each step
// boundary asks every rank whether its write is done (one small all-gather, only while a save is
// pending); once all are, it finishes the save (the manifest, the rename, `latest`) like
// save_checkpoint. A failed write fails every rank at that poll with the failing rank's error.
// A job that dies before the finish leaves only the temporary directory, so `latest` still names
// a whole checkpoint. The values saved are those of the step start() was called after.
class AsyncSaver {
 public:
  AsyncSaver();
  ~AsyncSaver();  // waits for a write under way; that save is left unfinished
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // Collective. A save still pending is waited for and finished first (and returned).
  std::optional<SaveResult> start(comm::ProcessGroup* group, optim::Optimizer& optimizer,
                                  const SaveRequest& request);
  // Collective; every rank has the same pending() since start and finish are collective.
  // Finishes the pending save when every rank's write is done, or after waiting for it (wait).
  std::optional<SaveResult> poll(comm::ProcessGroup* group, bool wait);
  bool pending() const { return plan_ != nullptr; }

 private:
  void join();

  std::unique_ptr<SavePlan> plan_;
  Tensor buffer_;  // this rank's file, as it will be written (f32 elements, rounded up)
  std::thread writer_;
  std::atomic<int> state_{0};  // kWriting, kWritten, kFailed
  std::string error_;          // set before state_ becomes kFailed
  std::chrono::steady_clock::time_point started_;
  double blocked_seconds_ = 0;
};

}  // namespace braid::checkpoint
