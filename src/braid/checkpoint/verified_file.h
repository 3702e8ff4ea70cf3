// VerifiedFile: reads a checkpoint rank file by byte ranges, checking every block it touches
// against the block's CRC-32C once (Note [Verified reads]).
//
// Note [Verified reads]: a version 4 rank file carries a CRC-32C for each block of kBlockBytes
// (4 MiB) of its header and pieces, in its own table and in the manifest (Note [File table]),
// computed by FileSink as it writes. A load reads only the ranges its rank holds, and a range is
// read with the blocks that cover it, whole: one preadv per run of blocks not yet checked, the
// wanted bytes straight into the destination and only the uncovered head and tail of the end
// blocks into a scratch buffer, then each block's CRC-32C taken over its parts. A block checked
// once is remembered: later ranges in it are read alone. Ranks read their files front to
// back (Note [Piece order], manifest.h), which the kernel's own read-ahead follows; asking for
// 64 MiB ahead besides (posix_fadvise WILLNEED, as this did until 2026-11-27) made loads 10-20%
// slower on the project's VM (a file read front to back with it: 1.04-1.44 GB/s, without:
// 1.16-2.61), and a thread reading the file ahead of the load, even all of it from the start,
// made them no faster (docs/benchmarks.md "Training checkpoints": the reads slow down beside the
// load's own work; tried again on 2026-11-28 with the pieces in order, a thread advising the
// whole file in 16 MiB steps: zero3 load 1.13 s against 0.76 s without). So
// every byte a rank loads is checked and read from disk once, and nothing is read for the checksum
// alone (before version 4 a load read every file whole for its CRC-32C first, then again to load).
// A bad block either throws at once, or (defer(), what a resume does) is remembered while the reads
// go on, so that every rank can learn of it at one collective after the load
// (CheckpointReader::check_reads) and fall back to the previous checkpoint together; what was
// loaded is then thrown away.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "braid/checkpoint/file_io.h"

namespace braid::checkpoint {

class VerifiedFile {
 public:
  // blocks: the CRC-32C of each block_bytes of bytes [0, data_bytes) of src; `where` names the
  // file in errors ("checkpoint <dir>: rank-00001.bin").
  VerifiedFile(std::unique_ptr<FileSource> src, int64_t block_bytes, std::vector<uint32_t> blocks,
               int64_t data_bytes, std::string where);

  // Bytes [offset, offset + n) into data; every block they touch is checked (once).
  void read(int64_t offset, void* data, size_t n);
  // Every block (braid checkpoint verify); a bad one throws, deferred or not.
  void verify_all();
  // A bad block from now on is remembered (first_error) instead of thrown.
  void defer() { deferred_ = true; }
  std::string first_error() const;

  const FileSource& source() const { return *src_; }

 private:
  // Blocks [k0, k1) are unchecked and bytes [a, b) of them are wanted at `to` (a, b inside).
  void read_unchecked(int64_t k0, int64_t k1, int64_t a, int64_t b, char* to);
  void bad_block(int64_t k, uint32_t crc);
  int64_t block_end(int64_t k) const;

  std::unique_ptr<FileSource> src_;
  int64_t block_bytes_;
  std::vector<uint32_t> blocks_;
  int64_t data_bytes_;
  std::string where_;
  bool deferred_ = false;
  mutable std::mutex mu_;
  std::vector<bool> checked_;
  std::vector<char> scratch_;  // the end blocks' bytes that were not wanted
  std::string error_;
};

}  // namespace braid::checkpoint
