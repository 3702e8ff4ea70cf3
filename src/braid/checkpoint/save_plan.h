// SavePlan: one checkpoint save in its three parts (Note [Atomic save]), so that the middle one,
// writing this rank's file, can run on another thread (checkpoint.async, async_saver.h):
//   1. the plan (collective): the checkpoint id, which rank writes which range, the temporary
//      directory;
//   2. this rank's file (local): a header, then the pieces this rank writes, either straight
//      from the optimizer into the file or from the optimizer into memory and later to the file,
//      then the file's table of what it holds (Note [File table], file_table.h);
//   3. the finish (collective): every rank's piece list and checksum gathered into the manifest,
//      which rank 0 writes before it renames the directory, moves `latest` and prunes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "braid/checkpoint/checkpoint_writer.h"
#include "braid/checkpoint/manifest.h"

namespace braid::checkpoint {

class SavePlan {
 public:
  // Part 1. Collective over group (null: one process); the optimizer must be between steps.
  SavePlan(comm::ProcessGroup* group, const optim::Optimizer& optimizer, SaveRequest request);

  // The bytes of this rank's header and pieces.
  int64_t file_bytes(optim::Optimizer& optimizer) const;
  // Part 2: this rank's header and pieces, front to back, into `out`; the pieces are recorded.
  void serialize(optim::Optimizer& optimizer, const std::function<void(const void*, size_t)>& out);
  // The block size of the file's checksums (0: none, a version 3 save).
  int64_t block_bytes() const { return req_.version >= 4 ? req_.block_bytes : 0; }
  // Part 2, after serialize: the rest of the file, its table of the pieces recorded and of the
  // checksums of the blocks written so far (FileSink::block_crcs).
  std::string table(const std::vector<uint32_t>& blocks) const;
  // Part 2, at the end: the file as written (size, CRC-32C, and the blocks'). Local.
  void file_written(int64_t bytes, uint32_t crc32c, std::vector<uint32_t> blocks);
  // Part 3. Collective; every rank must have called file_written.
  SaveResult finish(comm::ProcessGroup* group);
  // After a failed save (every rank's part of it stopped): rank 0 removes the temporary
  // directory, so a failed save leaves nothing on disk. Never throws.
  void abandon() const;

  const SaveRequest& request() const { return req_; }
  std::filesystem::path file_path() const;  // this rank's file in the temporary directory
  void stage(const char* s) const {
    if (req_.fault) req_.fault(s);
  }

 private:
  using Key = std::tuple<std::string, std::string, int64_t, int64_t>;  // name, tp, offset, numel
  bool writes(const optim::ParamSlice& s) const;

  SaveRequest req_;
  int rank_ = 0;
  int world_ = 1;
  std::string id_;
  std::string optimizer_name_;
  std::filesystem::path tmp_;
  std::map<Key, int> writer_;
  std::vector<std::tuple<std::string, std::string, Shape, PieceEntry>> pieces_;
  int64_t bytes_ = -1;
  uint32_t crc_ = 0;
  std::vector<uint32_t> blocks_;
};

}  // namespace braid::checkpoint
