// The manifest of a training checkpoint (docs/design.md "Checkpoints"): which file holds which
// element range of which tensor, the layout that wrote it, the training state that is not a
// tensor, and the size and CRC-32C of every file. It is written last: a checkpoint directory
// without a manifest that parses and agrees with its files is never loaded.
//
// Note [Checkpoint layout]:
//
//   <checkpoint.dir>/
//     latest                  "step-00000200": the newest complete checkpoint
//     step-00000100/
//       manifest.json
//       rank-00000.bin        a 4096-byte header (magic, checkpoint id, rank, world size,
//       rank-00001.bin        step), the rank's pieces back to back (f32, little-endian), then
//                             its table of contents and footer (Note [File table])
//     .tmp-step-00000200/     a save in progress (never read; removed by the next save)
//
// A piece is the shard record of the optimizer slice that wrote it (Note [Placements],
// core/shard_record.h): its tp placement (which slice of the whole tensor: Shard(dim) or the
// whole) and elements [offset, offset + numel) of that slice in row-major order. Tensors are
// named by their parameter name and a kind: "param" (fp32 master weights) or an optimizer state
// ("exp_avg", "exp_avg_sq", "momentum_buffer"), with their whole shape. A range that several
// ranks hold (DDP's replicas) is written once; a copy that does not count (a replicated
// parameter past tp rank 0, a pipeline's tied-embedding replica) is not written. Version 1
// manifests (before placements) hold whole-tensor pieces only and are read as such. Version 3
// adds the manifest's own checksum and each rank file's table (Note [File table],
// file_table.h). Version 4 replaces each file's one CRC-32C by a CRC-32C per block of
// kBlockBytes of its header and pieces, in the manifest and in the file's table alike, so a load
// checks what it reads as it reads it (Note [Verified reads], verified_file.h).
//
// Note [Piece order]: a load reads the master weights while the strategy builds the model and
// the optimizer state after it (Note [Resume], train/trainer_checkpoint.cpp), so where the
// optimizer keeps its state in memory a rank file holds its pieces kind by kind, in the
// optimizer's slice order: every master, then every exp_avg, then every exp_avg_sq. Each part of
// the load then reads its part of the file front to back, as the kernel's read-ahead expects;
// with the pieces slice by slice (a master, then its states) the masters' reads skipped over
// the states and the states' came back for them (gpt2-small under zero3 on 2 ranks, 2026-11-28:
// load 0.87 s -> 0.67 s against a raw read of 0.50-0.55 s). Where the state store pages the
// state in from elsewhere (offload to files), a visit per kind would read it again each time, and
// the pieces stay slice by slice. A reader takes either: each piece's byte offset is in the table.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/core/shape.h"
#include "braid/core/shard_record.h"

namespace braid::checkpoint {

inline constexpr int kManifestVersion = 4;
inline constexpr int64_t kHeaderBytes = 4096;
// The bytes each block CRC-32C of a version 4 file covers (the last block: what is left).
inline constexpr int64_t kBlockBytes = int64_t{4} << 20;

struct FileEntry {
  std::string name;  // "rank-00001.bin"
  int rank = 0;
  int64_t bytes = 0;
  uint32_t crc32c = 0;           // of the whole file (before version 4)
  std::vector<uint32_t> blocks;  // version 4: of each block of its header and pieces
};

struct PieceEntry {
  int file = 0;             // index into Manifest::files
  int64_t offset = 0;       // first element, in the row-major order of the tp slice below
  int64_t numel = 0;        // elements
  int64_t byte_offset = 0;  // where they start in the file
  TpSlice tp;               // the tp placement: which slice of the whole tensor (or all of it)
};

struct TensorEntry {
  std::string kind;  // "param", or an optimizer state name
  std::string name;  // the parameter's name
  DType dtype = DType::f32;
  Shape shape;
  std::vector<PieceEntry> pieces;
};

struct Manifest {
  int version = kManifestVersion;  // as read and as written; 3 and later carry a checksum and
                                   // file tables, 4 and later block checksums
  int64_t block_bytes = 0;         // version 4: kBlockBytes as written
  std::string id;                  // 16 hex digits, unique per save; also in every file's header
  int64_t step = 0;
  std::string layout;  // the strategy that wrote it ("zero3 (FULL_SHARD) over dp=4 ...")
  int world_size = 1;
  int dp_size = 1;
  std::string optimizer;  // "adamw" | "sgd"
  // Training state that is not a tensor (optimizer step count, batches read, ...).
  std::map<std::string, int64_t> counters;
  std::string config;        // the run's config (YAML), for inspection
  std::string model_config;  // the model's config.json (HF) as trained; "" for other models
  std::vector<FileEntry> files;
  std::vector<TensorEntry> tensors;

  // The tensor of that kind and name, or null.
  const TensorEntry* find(const std::string& kind, const std::string& name) const;
  int64_t counter(const std::string& key) const;  // throws naming a missing key
  int64_t total_bytes() const;
};

// Block checksums as text: 8 hex digits each, back to back.
std::string blocks_to_hex(const std::vector<uint32_t>& blocks);
std::vector<uint32_t> blocks_from_hex(const std::string& hex, const std::string& where);

// As version m.version (file checksums before 4, block checksums from 4 on).
std::string to_json(const Manifest& m);
// `where` names the file in errors; any missing or ill-typed field is an error naming it.
Manifest manifest_from_json(const std::string& text, const std::string& where);

// The 4096-byte header of a rank file.
struct FileHeader {
  std::string id;
  int rank = 0;
  int world_size = 1;
  int64_t step = 0;
};
std::string encode_header(const FileHeader& h);  // exactly kHeaderBytes
// Throws naming `where` when the bytes are not a braid checkpoint header.
FileHeader decode_header(const std::string& bytes, const std::string& where);

}  // namespace braid::checkpoint
