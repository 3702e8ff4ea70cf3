#include "braid/checkpoint/checkpoint_reader.h"

#include <algorithm>

#include "braid/checkpoint/checkpoint_dir.h"
#include "braid/checkpoint/crc32c.h"
#include "braid/comm/collective_guard.h"
#include "braid/core/error.h"

namespace braid::checkpoint {

namespace fs = std::filesystem;

CheckpointReader::CheckpointReader(fs::path dir) : dir_(std::move(dir)) {
  const fs::path manifest = dir_ / kManifestName;
  BRAID_CHECK(fs::exists(manifest), "checkpoint ", dir_.string(), ": no ", kManifestName,
              " (not a checkpoint, or a save that did not finish)");
  m_ = manifest_from_json(read_small_file(manifest), manifest.string());
  for (const FileEntry& f : m_.files) {
    const fs::path path = dir_ / f.name;
    const std::string where = "checkpoint " + dir_.string() + ": " + f.name;
    BRAID_CHECK(fs::exists(path), where, " is missing");
    auto src = std::make_unique<FileSource>(path);
    BRAID_CHECK(src->size() >= kHeaderBytes, where, " is ", src->size(),
                " bytes, the manifest says ", f.bytes, " (truncated)");
    std::string header(static_cast<size_t>(kHeaderBytes), '\0');
    src->read(0, header.data(), header.size());
    const FileHeader h = decode_header(header, where);
    BRAID_CHECK(h.id == m_.id, where, " belongs to checkpoint ", h.id, " (step ", h.step,
                ") but the manifest is of checkpoint ", m_.id, " (step ", m_.step,
                "): files or manifest from another save");
    BRAID_CHECK(h.rank == f.rank, where, " holds rank ", h.rank,
                "'s shards, the manifest says rank ", f.rank, " (files swapped?)");
    BRAID_CHECK(src->size() == f.bytes, where, " is ", src->size(), " bytes, the manifest says ",
                f.bytes, src->size() < f.bytes ? " (truncated)" : " (appended to)");
    files_.push_back(std::move(src));
  }
}

void CheckpointReader::verify_file(size_t i) const {
  const FileEntry& f = m_.files.at(i);
  const uint32_t crc = files_.at(i)->crc32c();
  BRAID_CHECK(crc == f.crc32c, "checkpoint ", dir_.string(), ": ", f.name, " has checksum ",
              format_crc32c(crc), ", the manifest says ", format_crc32c(f.crc32c),
              " (the file is corrupt)");
}

void CheckpointReader::verify(comm::ProcessGroup* group) const {
  const size_t rank = group ? static_cast<size_t>(group->rank()) : 0;
  const size_t n = group ? static_cast<size_t>(group->size()) : 1;
  comm::all_ranks_or_throw(group, [&] {
    for (size_t i = rank; i < files_.size(); i += n) verify_file(i);
  });
}

void CheckpointReader::read(const std::string& kind, const std::string& name, const Shape& shape,
                            int64_t offset, Tensor dst) const {
  const TensorEntry* t = m_.find(kind, name);
  const std::string what = kind == "param" ? "parameter '" + name + "'"
                                           : "optimizer state " + kind + " of '" + name + "'";
  BRAID_CHECK(t, "checkpoint ", dir_.string(), " has no ", what,
              " (saved from another model or optimizer?)");
  BRAID_CHECK(t->shape == shape, "checkpoint ", dir_.string(), ": ", what, " has shape ",
              t->shape.str(), ", this model's is ", shape.str());
  BRAID_CHECK(dst.dtype() == DType::f32 && t->dtype == DType::f32, "checkpoint: ", what,
              " must be read as f32");
  const int64_t lo = offset, hi = offset + dst.numel();
  std::vector<std::pair<int64_t, int64_t>> covered;
  auto* out = static_cast<char*>(dst.raw_data());
  for (const PieceEntry& p : t->pieces) {
    const int64_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.numel);
    if (a >= b) continue;
    files_[static_cast<size_t>(p.file)]->read(p.byte_offset + (a - p.offset) * 4,
                                              out + (a - lo) * 4, static_cast<size_t>(b - a) * 4);
    covered.emplace_back(a, b);
  }
  std::sort(covered.begin(), covered.end());
  int64_t at = lo;
  for (auto [a, b] : covered) {
    if (a > at) break;
    at = std::max(at, b);
  }
  BRAID_CHECK(at >= hi, "checkpoint ", dir_.string(), ": elements [", at, ", ", hi, ") of ", what,
              " are in no file");
}

void CheckpointReader::read_unit(const nn::ParamLayout& layout, int u, Tensor& unit) const {
  for (int p : layout.units()[static_cast<size_t>(u)].params) {
    const nn::ParamInfo& info = layout.params()[static_cast<size_t>(p)];
    read("param", info.name, info.param->shape, 0, unit.flat_range(info.unit_offset, info.numel));
  }
}

void CheckpointReader::read_optimizer(optim::Optimizer& optimizer) const {
  BRAID_CHECK(m_.optimizer == optimizer.name(), "checkpoint ", dir_.string(), " holds ",
              m_.optimizer, " state, this run's optimizer is ", optimizer.name());
  const auto& states = optimizer.state_names();
  optimizer.visit_slices(
      [&](const optim::ParamSlice& s, optim::SliceSlot& slot) {
        for (size_t k = 0; k < states.size(); ++k)
          read(states[k], s.name(), s.shard.global_shape, s.shard.offset, slot.state[k]);
      },
      /*write=*/true);
  optimizer.set_step_count(m_.counter("optimizer_steps"));
}

void CheckpointReader::read_parameters(optim::Optimizer& optimizer) const {
  optimizer.visit_slices(
      [&](const optim::ParamSlice& s, optim::SliceSlot& slot) {
        read("param", s.name(), s.shard.global_shape, s.shard.offset, slot.param);
      },
      /*write=*/true);
}

}  // namespace braid::checkpoint
