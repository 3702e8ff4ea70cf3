#include "braid/train/checkpoint_tools.h"

#include <cstdio>
#include <map>
#include <sstream>

#include "braid/checkpoint/checkpoint_dir.h"
#include "braid/checkpoint/checkpoint_reader.h"
#include "braid/checkpoint/crc32c.h"
#include "braid/checkpoint/hf_model_io.h"
#include "braid/config/config.h"
#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"
#include "braid/train/trainer.h"

namespace braid::train {

namespace fs = std::filesystem;

fs::path resolve_checkpoint(const fs::path& path) {
  if (fs::exists(path / checkpoint::kManifestName)) return path;
  BRAID_CHECK(fs::is_directory(path), path.string(), " is not a directory");
  const auto found = checkpoint::checkpoints_newest_first(path);
  BRAID_CHECK(!found.empty(), path.string(), " is neither a checkpoint (no ",
              checkpoint::kManifestName, ") nor a directory of checkpoints");
  return found.front();
}

std::string inspect_checkpoint(const fs::path& path) {
  const checkpoint::CheckpointReader reader(resolve_checkpoint(path));
  const checkpoint::Manifest& m = reader.manifest();
  std::ostringstream out;
  out << "checkpoint " << reader.dir().string() << "\n"
      << "  id " << m.id << ", step " << m.step << ", " << format_bytes(m.total_bytes()) << "\n"
      << "  layout: " << m.layout << " on " << m.world_size << " rank(s)\n"
      << "  optimizer: " << m.optimizer << "\n  state:";
  for (const auto& [k, v] : m.counters) out << " " << k << "=" << v;
  out << "\n  files:\n";
  for (const auto& f : m.files) {
    out << "    " << f.name << "  rank " << f.rank << "  " << format_bytes(f.bytes) << "  ";
    if (m.version >= 4)
      out << f.blocks.size() << " block CRC-32Cs of " << format_bytes(m.block_bytes) << "\n";
    else
      out << checkpoint::format_crc32c(f.crc32c) << "\n";
  }
  std::map<std::string, std::pair<int64_t, int64_t>> kinds;  // tensors, elements
  for (const auto& t : m.tensors) {
    kinds[t.kind].first += 1;
    kinds[t.kind].second += t.shape.numel();
  }
  out << "  tensors:";
  for (const auto& [k, v] : kinds)
    out << " " << k << " " << v.first << " (" << v.second << " elements)";
  out << "\n";
  for (const auto& t : m.tensors) {
    if (t.kind != "param") continue;
    out << "    " << t.name << " " << t.shape.str() << " in " << t.pieces.size() << " piece(s)\n";
  }
  return out.str();
}

std::string verify_checkpoint(const fs::path& path) {
  const checkpoint::CheckpointReader reader(resolve_checkpoint(path));
  reader.verify(nullptr);
  const checkpoint::Manifest& m = reader.manifest();
  return "ok: " + reader.dir().string() + ": " + std::to_string(m.files.size()) + " file(s), " +
         format_bytes(m.total_bytes()) + ", every size, header and CRC-32C matches the manifest";
}

std::string export_checkpoint(const fs::path& path, const fs::path& out) {
  const checkpoint::CheckpointReader reader(resolve_checkpoint(path));
  const std::string where = (reader.dir() / checkpoint::kManifestName).string();
  // The model as trained, carried by the manifest; older checkpoints name its config instead,
  // which is read again (and must still be there).
  const std::string& saved = reader.manifest().model_config;
  const nn::ModelConfig mc =
      saved.empty() ? model_config_from(config::parse_config(reader.manifest().config, where))
                    : nn::ModelConfig::from_hf_json(saved, where + " (model_config)");
  nn::TransformerOptions declared;
  declared.materialize = false;
  const nn::Transformer model(mc, declared);
  const nn::ParamLayout& layout = model.layout();
  auto units = [&](const std::function<void(int, const Tensor&)>& visit) {
    for (size_t u = 0; u < layout.units().size(); ++u) {
      Tensor unit = Tensor::zeros(Shape{layout.units()[u].padded});
      reader.read_unit(layout, static_cast<int>(u), unit);
      visit(static_cast<int>(u), unit);
    }
  };
  checkpoint::export_hf(model, out, units, /*write=*/true);
  return "exported step " + std::to_string(reader.manifest().step) + " of " +
         reader.dir().string() + " to " + out.string() + " (model.safetensors + config.json)";
}

}  // namespace braid::train
