#include "braid/checkpoint/file_table.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <sstream>

#include "braid/checkpoint/checkpoint_dir.h"
#include "braid/checkpoint/crc32c.h"
#include "braid/checkpoint/manifest_json.h"
#include "braid/core/error.h"

namespace braid::checkpoint {

using nlohmann::json;

namespace {

// "\nBRAIDTABLE <offset> <bytes> <crc32c>\n", fixed width (16, 16 and 8 hex digits).
constexpr const char* kFooterMagic = "\nBRAIDTABLE ";
constexpr size_t kFooterBytes = 12 + 16 + 1 + 16 + 1 + 8 + 1;

std::string footer(int64_t at, int64_t bytes, uint32_t crc) {
  char buf[kFooterBytes + 1];
  std::snprintf(buf, sizeof buf, "%s%016" PRIx64 " %016" PRIx64 " %08" PRIx32 "\n", kFooterMagic,
                static_cast<uint64_t>(at), static_cast<uint64_t>(bytes), crc);
  return std::string(buf, kFooterBytes);
}

// One piece as the errors name it:
// "param 'h.0.w' [768, 768] elements [0, 768) of replicate at byte 4096".
std::string describe(const TableEntry& e) {
  std::ostringstream os;
  os << e.kind << " '" << e.name << "' " << e.shape.str() << " elements [" << e.piece.offset << ", "
     << e.piece.offset + e.piece.numel << ") of " << e.piece.tp.str() << " at byte "
     << e.piece.byte_offset;
  return os.str();
}

}  // namespace

std::string encode_table(const FileTable& t) {
  const int64_t at = t.data_bytes;
  json pieces = json::array();
  for (const TableEntry& e : t.pieces) {
    json p = json::array({e.kind, e.name, std::string(dtype_name(e.dtype)), e.shape.vec(),
                          e.piece.offset, e.piece.numel, e.piece.byte_offset});
    if (e.piece.tp.is_split()) p.push_back(placement_to_json(e.piece.tp));
    pieces.push_back(p);
  }
  json j = {{"id", t.id},      {"rank", t.rank},           {"world_size", t.world_size},
            {"step", t.step},  {"optimizer", t.optimizer}, {"counters", t.counters},
            {"pieces", pieces}};
  if (t.block_bytes > 0) {
    j["block_bytes"] = t.block_bytes;
    j["blocks"] = blocks_to_hex(t.blocks);
  }
  const std::string text = j.dump();
  return text + footer(at, static_cast<int64_t>(text.size()), crc32c(0, text.data(), text.size()));
}

std::optional<FileTable> read_table(const FileSource& file, const std::string& where) {
  const int64_t size = file.size();
  if (size < kHeaderBytes + static_cast<int64_t>(kFooterBytes)) return std::nullopt;
  std::string foot(kFooterBytes, '\0');
  file.read(size - static_cast<int64_t>(kFooterBytes), foot.data(), foot.size());
  if (foot.rfind(kFooterMagic, 0) != 0) return std::nullopt;
  unsigned long long at = 0, bytes = 0;
  unsigned crc = 0;
  BRAID_CHECK(std::sscanf(foot.c_str() + 12, "%16llx %16llx %8x", &at, &bytes, &crc) == 3 &&
                  at >= static_cast<unsigned long long>(kHeaderBytes) &&
                  at + bytes + kFooterBytes == static_cast<unsigned long long>(size),
              where, ": its table footer is damaged (it does not frame the table in a ", size,
              "-byte file)");
  std::string text(static_cast<size_t>(bytes), '\0');
  file.read(static_cast<int64_t>(at), text.data(), text.size());
  const uint32_t actual = crc32c(0, text.data(), text.size());
  BRAID_CHECK(actual == crc, where, ": its table of contents has checksum ", format_crc32c(actual),
              ", its footer says ", format_crc32c(crc), " (the file is damaged)");
  try {
    const json j = json::parse(text);
    FileTable t;
    t.id = j.at("id").get<std::string>();
    t.rank = j.at("rank").get<int>();
    t.world_size = j.at("world_size").get<int>();
    t.step = j.at("step").get<int64_t>();
    t.optimizer = j.at("optimizer").get<std::string>();
    t.counters = j.at("counters").get<std::map<std::string, int64_t>>();
    t.data_bytes = static_cast<int64_t>(at);
    if (j.contains("blocks")) {
      t.block_bytes = j.at("block_bytes").get<int64_t>();
      t.blocks = blocks_from_hex(j.at("blocks").get<std::string>(), where + ": its table");
      BRAID_CHECK(t.block_bytes > 0 && static_cast<int64_t>(t.blocks.size()) ==
                                           (t.data_bytes + t.block_bytes - 1) / t.block_bytes,
                  where, ": its table has ", t.blocks.size(), " block checksums of ", t.block_bytes,
                  " bytes for the ", t.data_bytes, " bytes before it (the file is damaged)");
    }
    for (const json& p : j.at("pieces")) {
      TableEntry e;
      e.kind = p.at(0).get<std::string>();
      e.name = p.at(1).get<std::string>();
      e.dtype = stored_dtype(p.at(2).get<std::string>(), where + ": its table");
      e.shape = Shape(p.at(3).get<std::vector<int64_t>>());
      e.piece.offset = p.at(4).get<int64_t>();
      e.piece.numel = p.at(5).get<int64_t>();
      e.piece.byte_offset = p.at(6).get<int64_t>();
      if (p.size() > 7)
        e.piece.tp = placement_from_json(p.at(7), e.shape,
                                         where + ": its table's " + e.kind + " '" + e.name + "'");
      t.pieces.push_back(std::move(e));
    }
    return t;
  } catch (const json::exception& e) {
    BRAID_THROW(where, ": its table of contents is damaged (", e.what(), ")");
  }
}

void check_table(const FileTable& t, const Manifest& m, int file, const std::string& dir) {
  const FileEntry& f = m.files[static_cast<size_t>(file)];
  const std::string where = "checkpoint " + dir + ": " + f.name;
  const std::string says = std::string(", ") + kManifestName + " says ";
  const std::string edited = std::string(" (") + kManifestName + " was edited)";
  BRAID_CHECK(t.id == m.id, where, " is of checkpoint ", t.id, " (step ", t.step, ")", says,
              "checkpoint ", m.id, " (files or manifest from another save)");
  BRAID_CHECK(t.step == m.step, where, " was saved at step ", t.step, says, "step ", m.step,
              edited);
  BRAID_CHECK(t.rank == f.rank && t.world_size == m.world_size, where, " holds rank ", t.rank,
              " of ", t.world_size, says, "rank ", f.rank, " of ", m.world_size, edited);
  BRAID_CHECK(t.optimizer == m.optimizer, where, " holds ", t.optimizer, " state", says,
              m.optimizer, edited);
  for (const auto& [key, value] : m.counters) {
    auto it = t.counters.find(key);
    BRAID_CHECK(it != t.counters.end() && it->second == value, where, " saved training state '",
                key, "' = ", it == t.counters.end() ? "(none)" : std::to_string(it->second), says,
                value, edited);
  }
  BRAID_CHECK(t.counters.size() == m.counters.size(), where, " saved ", t.counters.size(),
              " training state values", says, m.counters.size(), edited);
  // The manifest's pieces in this file against the table's, both in file order.
  std::vector<TableEntry> listed;
  for (const TensorEntry& e : m.tensors)
    for (const PieceEntry& p : e.pieces)
      if (p.file == file) listed.push_back({e.kind, e.name, e.dtype, e.shape, p});
  auto by_byte = [](const TableEntry& a, const TableEntry& b) {
    return a.piece.byte_offset < b.piece.byte_offset;
  };
  std::vector<TableEntry> held = t.pieces;
  std::sort(listed.begin(), listed.end(), by_byte);
  std::sort(held.begin(), held.end(), by_byte);
  for (size_t i = 0; i < std::min(listed.size(), held.size()); ++i) {
    const TableEntry &a = listed[i], &b = held[i];
    const bool same = a.kind == b.kind && a.name == b.name && a.dtype == b.dtype &&
                      a.shape == b.shape && a.piece.offset == b.piece.offset &&
                      a.piece.numel == b.piece.numel &&
                      a.piece.byte_offset == b.piece.byte_offset && a.piece.tp.same_cut(b.piece.tp);
    BRAID_CHECK(same, "checkpoint ", dir, ": ", kManifestName, " says ", f.name, " holds ",
                describe(a), "; the file's own table says ", describe(b), edited);
  }
  BRAID_CHECK(listed.size() == held.size(), "checkpoint ", dir, ": ", kManifestName, " lists ",
              listed.size(), " pieces in ", f.name, ", the file's own table ", held.size(), edited);
  if (m.version < 4) return;  // no block checksums in the manifest (Note [Verified reads])
  BRAID_CHECK(t.block_bytes == m.block_bytes && t.blocks.size() == f.blocks.size(), where,
              "'s own table has ", t.blocks.size(), " block checksums of ", t.block_bytes, " bytes",
              says, f.blocks.size(), " of ", m.block_bytes, edited);
  for (size_t b = 0; b < t.blocks.size(); ++b)
    BRAID_CHECK(t.blocks[b] == f.blocks[b], where, "'s own table says block ", b, " has checksum ",
                format_crc32c(t.blocks[b]), says, format_crc32c(f.blocks[b]), edited);
}

}  // namespace braid::checkpoint
