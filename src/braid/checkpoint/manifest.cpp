#include "braid/checkpoint/manifest.h"

#include <cstdio>

#include "braid/checkpoint/crc32c.h"
#include "braid/checkpoint/manifest_json.h"
#include "braid/core/error.h"

namespace braid::checkpoint {

using nlohmann::json;

namespace {
constexpr const char* kFormat = "braid-checkpoint";
constexpr const char* kMagic = "BRAIDCKPT1\n";

uint32_t parse_crc(const std::string& s, const std::string& where) {
  BRAID_CHECK(s.rfind("crc32c:", 0) == 0 && s.size() == 15, where, ": checksum '", s,
              "' is not crc32c:<8 hex digits>");
  return static_cast<uint32_t>(std::stoul(s.substr(7), nullptr, 16));
}
// Its content's checksum: the CRC-32C of the compact JSON of everything but "checksum" (keys in
// order, so the same content has the same text whatever whitespace a file was given).
uint32_t content_crc(const json& j) {
  const std::string text = j.dump();
  return crc32c(0, text.data(), text.size());
}

}  // namespace

DType stored_dtype(const std::string& s, const std::string& where) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8})
    if (std::string(dtype_name(d)) == s) return d;
  BRAID_THROW(where, ": unknown dtype '", s, "'");
}

json placement_to_json(const TpSlice& s) {
  return {{"dim", s.dim},
          {"sections", s.sections},
          {"parts", s.parts},
          {"part", s.part},
          {"padded", s.padded}};
}

TpSlice placement_from_json(const json& tp, const Shape& shape, const std::string& what) {
  TpSlice s{.dim = tp.at("dim").get<int>(),
            .sections = tp.at("sections").get<int64_t>(),
            .parts = tp.at("parts").get<int>(),
            .part = tp.at("part").get<int>(),
            .padded = tp.at("padded").get<int64_t>()};
  const bool sane = s.dim >= 0 && s.dim < shape.dim() && s.sections >= 1 && s.parts >= 1 &&
                    s.part >= 0 && s.part < s.parts && s.padded >= 0 &&
                    (s.padded == 0 || s.padded >= shape[s.dim]) &&
                    (s.padded > 0 ? s.padded : shape[s.dim]) % (s.sections * s.parts) == 0;
  BRAID_CHECK(sane, what, " has placement ", s.str(), ", which does not cut its shape ",
              shape.str());
  return s;
}

const TensorEntry* Manifest::find(const std::string& kind, const std::string& name) const {
  for (const TensorEntry& t : tensors)
    if (t.kind == kind && t.name == name) return &t;
  return nullptr;
}

int64_t Manifest::counter(const std::string& key) const {
  auto it = counters.find(key);
  BRAID_CHECK(it != counters.end(), "checkpoint of step ", step, ": no '", key,
              "' in its training state");
  return it->second;
}

int64_t Manifest::total_bytes() const {
  int64_t b = 0;
  for (const FileEntry& f : files) b += f.bytes;
  return b;
}

std::string blocks_to_hex(const std::vector<uint32_t>& blocks) {
  std::string s;
  s.reserve(blocks.size() * 8);
  char buf[9];
  for (uint32_t b : blocks) {
    std::snprintf(buf, sizeof buf, "%08x", b);
    s += buf;
  }
  return s;
}

std::vector<uint32_t> blocks_from_hex(const std::string& hex, const std::string& where) {
  BRAID_CHECK(hex.size() % 8 == 0 && hex.find_first_not_of("0123456789abcdef") == std::string::npos,
              where, ": block checksums are not 8 hex digits each");
  std::vector<uint32_t> blocks(hex.size() / 8);
  for (size_t i = 0; i < blocks.size(); ++i)
    blocks[i] = static_cast<uint32_t>(std::stoul(hex.substr(i * 8, 8), nullptr, 16));
  return blocks;
}

std::string to_json(const Manifest& m) {
  json j;
  j["format"] = kFormat;
  j["version"] = m.version;
  if (m.version >= 4) j["block_bytes"] = m.block_bytes;
  j["id"] = m.id;
  j["step"] = m.step;
  j["layout"] = {{"strategy", m.layout}, {"world_size", m.world_size}, {"dp_size", m.dp_size}};
  j["optimizer"] = m.optimizer;
  j["counters"] = m.counters;
  j["config"] = m.config;
  if (!m.model_config.empty()) j["model_config"] = m.model_config;
  json files = json::array();
  for (const FileEntry& f : m.files) {
    json e = {{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}};
    if (m.version >= 4)
      e["blocks"] = blocks_to_hex(f.blocks);
    else
      e["checksum"] = format_crc32c(f.crc32c);
    files.push_back(e);
  }
  j["files"] = files;
  json tensors = json::array();
  for (const TensorEntry& t : m.tensors) {
    json pieces = json::array();
    for (const PieceEntry& p : t.pieces) {
      json piece = json::array({p.file, p.offset, p.numel, p.byte_offset});
      if (p.tp.is_split()) piece.push_back({{"tp", placement_to_json(p.tp)}});
      pieces.push_back(piece);
    }
    tensors.push_back({{"kind", t.kind},
                       {"name", t.name},
                       {"dtype", std::string(dtype_name(t.dtype))},
                       {"shape", t.shape.vec()},
                       {"pieces", pieces}});
  }
  j["tensors"] = tensors;
  j["checksum"] = format_crc32c(content_crc(j));
  return j.dump(1) + "\n";
}

Manifest manifest_from_json(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    BRAID_THROW(where, ": not valid JSON (", e.what(), ")");
  }
  try {
    BRAID_CHECK(j.value("format", "") == kFormat, where, ": not a braid checkpoint manifest");
    const int version = j.at("version").get<int>();
    BRAID_CHECK(version >= 1 && version <= kManifestVersion, where, ": manifest version ", version,
                ", this braid reads versions 1 to ", kManifestVersion);
    Manifest m;
    m.version = version;
    if (version >= 3) {
      const uint32_t said = parse_crc(j.at("checksum").get<std::string>(), where);
      j.erase("checksum");
      const uint32_t crc = content_crc(j);
      BRAID_CHECK(crc == said, where, ": its checksum says ", format_crc32c(said),
                  ", its content's is ", format_crc32c(crc),
                  " (the manifest was edited or damaged)");
    }
    m.id = j.at("id").get<std::string>();
    m.step = j.at("step").get<int64_t>();
    m.layout = j.at("layout").at("strategy").get<std::string>();
    m.world_size = j.at("layout").at("world_size").get<int>();
    m.dp_size = j.at("layout").at("dp_size").get<int>();
    m.optimizer = j.at("optimizer").get<std::string>();
    m.counters = j.at("counters").get<std::map<std::string, int64_t>>();
    m.config = j.at("config").get<std::string>();
    m.model_config = j.value("model_config", "");
    if (version >= 4) {
      m.block_bytes = j.at("block_bytes").get<int64_t>();
      BRAID_CHECK(m.block_bytes >= kHeaderBytes && m.block_bytes % kHeaderBytes == 0, where,
                  ": block_bytes ", m.block_bytes, " is not a whole number of 4096-byte pages");
    }
    for (const json& f : j.at("files")) {
      FileEntry e;
      e.name = f.at("name").get<std::string>();
      e.rank = f.at("rank").get<int>();
      e.bytes = f.at("bytes").get<int64_t>();
      if (version >= 4)
        e.blocks = blocks_from_hex(f.at("blocks").get<std::string>(), where + ": " + e.name);
      else
        e.crc32c = parse_crc(f.at("checksum").get<std::string>(), where);
      BRAID_CHECK(e.name.find('/') == std::string::npos && !e.name.empty() && e.name[0] != '.',
                  where, ": file name '", e.name, "' is not a plain name");
      m.files.push_back(e);
    }
    for (const json& t : j.at("tensors")) {
      TensorEntry e;
      e.kind = t.at("kind").get<std::string>();
      e.name = t.at("name").get<std::string>();
      e.dtype = stored_dtype(t.at("dtype").get<std::string>(), where);
      e.shape = Shape(t.at("shape").get<std::vector<int64_t>>());
      for (const json& p : t.at("pieces")) {
        PieceEntry pe{p.at(0).get<int>(),
                      p.at(1).get<int64_t>(),
                      p.at(2).get<int64_t>(),
                      p.at(3).get<int64_t>(),
                      {}};
        if (p.size() > 4)
          pe.tp = placement_from_json(p.at(4).at("tp"), e.shape,
                                      where + ": a piece of " + e.kind + " '" + e.name + "'");
        BRAID_CHECK(pe.file >= 0 && pe.file < static_cast<int>(m.files.size()) && pe.offset >= 0 &&
                        pe.numel > 0 &&
                        pe.offset + pe.numel <= pe.tp.local_shape(e.shape).numel() &&
                        pe.byte_offset >= kHeaderBytes,
                    where, ": a piece of ", e.kind, " '", e.name, "' is out of range");
        BRAID_CHECK(pe.byte_offset + pe.numel * static_cast<int64_t>(dtype_size(e.dtype)) <=
                        m.files[static_cast<size_t>(pe.file)].bytes,
                    where, ": a piece of ", e.kind, " '", e.name, "' lies past the end of ",
                    m.files[static_cast<size_t>(pe.file)].name);
        e.pieces.push_back(pe);
      }
      m.tensors.push_back(std::move(e));
    }
    return m;
  } catch (const json::exception& e) {
    BRAID_THROW(where, ": ", e.what());
  }
}

std::string encode_header(const FileHeader& h) {
  json j = {{"id", h.id}, {"rank", h.rank}, {"world_size", h.world_size}, {"step", h.step}};
  std::string s = kMagic + j.dump() + "\n";
  BRAID_CHECK(s.size() <= static_cast<size_t>(kHeaderBytes), "checkpoint header too long");
  s.resize(static_cast<size_t>(kHeaderBytes), '\0');
  return s;
}

FileHeader decode_header(const std::string& bytes, const std::string& where) {
  const std::string magic = kMagic;
  BRAID_CHECK(bytes.size() == static_cast<size_t>(kHeaderBytes) && bytes.rfind(magic, 0) == 0,
              where, ": not a braid checkpoint file (bad header)");
  const size_t end = bytes.find('\n', magic.size());
  BRAID_CHECK(end != std::string::npos, where, ": damaged header");
  try {
    json j = json::parse(bytes.substr(magic.size(), end - magic.size()));
    return {j.at("id").get<std::string>(), j.at("rank").get<int>(), j.at("world_size").get<int>(),
            j.at("step").get<int64_t>()};
  } catch (const json::exception&) {
    BRAID_THROW(where, ": damaged header");
  }
}

}  // namespace braid::checkpoint
