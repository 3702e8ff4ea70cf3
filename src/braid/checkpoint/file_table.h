// A rank file's own table of contents (Note [File table]): what the file holds, written at its
// end with its own checksum, and checked against the manifest when a checkpoint is opened.
//
// Note [File table]: the manifest says which file holds which element range of which tensor,
// and the files' CRC-32Cs; a rank file says the same of itself. After its pieces, each rank
// file ends with a table (JSON: checkpoint id, rank, world size, step, optimizer, training
// counters, and every piece: kind, tensor name, dtype, whole shape, tp placement, elements,
// byte offset; from version 4 the block size and the CRC-32C of each block of the bytes before
// the table), then a fixed footer naming the table's offset, size and CRC-32C. The manifest
// carries a CRC-32C of its own content (version 3) and the same block checksums (version 4).
// Opening a checkpoint checks the manifest's checksum, then each file's size, header, table
// checksum, and that the table says exactly what the manifest says of that file, block
// checksums included (so an edited one is named at open, before anything is loaded). So no single
// edited or damaged file (manifest, rank file or `latest`) changes what is loaded: it is refused
// naming the file and the fact. Files written before version 3 have no table and are read as
// before.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "braid/checkpoint/file_io.h"
#include "braid/checkpoint/manifest.h"

namespace braid::checkpoint {

struct TableEntry {
  std::string kind;
  std::string name;
  DType dtype = DType::f32;
  Shape shape;       // the whole tensor's
  PieceEntry piece;  // its `file` is unused
};

struct FileTable {
  std::string id;
  int rank = 0;
  int world_size = 1;
  int64_t step = 0;
  std::string optimizer;
  std::map<std::string, int64_t> counters;
  std::vector<TableEntry> pieces;
  int64_t block_bytes = 0;       // version 4; 0: no block checksums
  std::vector<uint32_t> blocks;  // of bytes [0, data_bytes), block_bytes each
  int64_t data_bytes = 0;        // where the table starts (as read: from the footer)
};

// The table and its footer, appended to a rank file after its pieces at byte t.data_bytes.
std::string encode_table(const FileTable& t);

// The table at the end of `file`, checked against its own checksum; nullopt when the file ends
// without one (written before version 3). `where` names the file in errors.
std::optional<FileTable> read_table(const FileSource& file, const std::string& where);

// Throws naming the checkpoint `dir`, the file and the first thing the table of manifest file
// `file` and the manifest disagree on: checkpoint id, step, rank, optimizer, a counter, a piece.
void check_table(const FileTable& t, const Manifest& m, int file, const std::string& dir);

}  // namespace braid::checkpoint
