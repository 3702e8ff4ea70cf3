#include "braid/checkpoint/checkpoint_reader.h"

#include <algorithm>
#include <cstring>

#include "braid/checkpoint/checkpoint_dir.h"
#include "braid/checkpoint/crc32c.h"
#include "braid/checkpoint/file_table.h"
#include "braid/comm/chunking.h"
#include "braid/comm/collective_guard.h"
#include "braid/comm/read_and_share.h"
#include "braid/core/error.h"
#include "braid/core/fault_ahead.h"

namespace braid::checkpoint {

namespace fs = std::filesystem;

CheckpointReader::CheckpointReader(fs::path dir) : dir_(std::move(dir)) {
  const fs::path manifest = dir_ / kManifestName;
  BRAID_CHECK(fs::exists(manifest), "checkpoint ", dir_.string(), ": no ", kManifestName,
              " (not a checkpoint, or a save that did not finish)");
  m_ = manifest_from_json(read_small_file(manifest), manifest.string());
  const int64_t named = step_of(dir_.filename().string());
  BRAID_CHECK(named < 0 || named == m_.step, "checkpoint ", dir_.string(), ": ", kManifestName,
              " says step ", m_.step, " but the directory is ", dir_.filename().string(),
              " (the manifest was edited or moved)");
  for (size_t i = 0; i < m_.files.size(); ++i) {
    const FileEntry& f = m_.files[i];
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
    BRAID_CHECK(h.step == m_.step, where, " was saved at step ", h.step,
                ", the manifest says step ", m_.step, " (the manifest was edited)");
    BRAID_CHECK(src->size() == f.bytes, where, " is ", src->size(), " bytes, the manifest says ",
                f.bytes, src->size() < f.bytes ? " (truncated" : " (appended to",
                ", or the manifest edited)");
    // Note [File table]: what the file says it holds must be what the manifest says it holds.
    const std::optional<FileTable> table = read_table(*src, where);
    BRAID_CHECK(table || m_.version < 3, where, " has no table of contents, which a version ",
                m_.version, " manifest promises (the file is damaged or from an older save)");
    if (table) check_table(*table, m_, static_cast<int>(i), dir_.string());
    if (m_.version >= 4)
      blocks_.push_back(std::make_unique<VerifiedFile>(std::move(src), m_.block_bytes, f.blocks,
                                                       table->data_bytes, where));
    else
      files_.push_back(std::move(src));
  }
}

void CheckpointReader::read_bytes(int file, int64_t offset, void* data, size_t n) const {
  if (blocks_.empty())
    files_[static_cast<size_t>(file)]->read(offset, data, n);
  else
    blocks_[static_cast<size_t>(file)]->read(offset, data, n);
}

void CheckpointReader::defer_corruption() const {
  for (const auto& f : blocks_) f->defer();
}

void CheckpointReader::check_reads(comm::ProcessGroup* group) const {
  std::string error;
  for (const auto& f : blocks_)
    if (error.empty()) error = f->first_error();
  try {
    comm::all_ranks_or_throw(group, [&] {
      if (!error.empty()) throw Error(error);
    });
  } catch (const CommError&) {
    throw;
  } catch (const Error& e) {
    throw CorruptCheckpoint(e.what());
  }
}

int64_t CheckpointReader::bytes_read() const {
  int64_t n = 0;
  for (const auto& f : files_) n += f->bytes_read();
  for (const auto& f : blocks_) n += f->source().bytes_read();
  return n;
}

void CheckpointReader::verify_file(size_t i) const {
  if (!blocks_.empty()) {
    blocks_.at(i)->verify_all();
    return;
  }
  const FileEntry& f = m_.files.at(i);
  const uint32_t crc = files_.at(i)->crc32c();
  BRAID_CHECK(crc == f.crc32c, "checkpoint ", dir_.string(), ": ", f.name, " has checksum ",
              format_crc32c(crc), ", the manifest says ", format_crc32c(f.crc32c),
              " (the file is corrupt, or the manifest was edited)");
}

void CheckpointReader::verify(comm::ProcessGroup* group) const {
  const size_t rank = group ? static_cast<size_t>(group->rank()) : 0;
  const size_t n = group ? static_cast<size_t>(group->size()) : 1;
  comm::all_ranks_or_throw(group, [&] {
    for (size_t i = rank; i < m_.files.size(); i += n) verify_file(i);
  });
}

// Note [Resharding reads]: a rank asks for the elements its own placements name — elements
// [offset, offset + n) of its tp slice `cut` of the whole tensor — whatever placements wrote
// them. Both sides are walked as runs of whole-tensor elements (for_each_run, Note
// [Placements]); each wanted run is filled from the pieces' runs that overlap it, one file read
// per overlap, and padding (the vocabulary's) is zero. The same cut on both sides is one run per
// piece, as plain flat ranges were.
void CheckpointReader::read(const std::string& kind, const std::string& name, const Shape& shape,
                            const TpSlice& cut, int64_t offset, Tensor dst) const {
  // Read on the host, then copied over (Note [Checkpoints from a device] in save_plan.cpp).
  if (!dst.device().is_cpu()) {
    Tensor host = Tensor::empty(dst.shape(), dst.dtype(), MemCategory::checkpoint,
                                MemoryScope::current_tracker(), Device::cpu());
    read(kind, name, shape, cut, offset, host);
    dst.copy_(host);
    return;
  }
  const TensorEntry* t = m_.find(kind, name);
  const std::string what = kind == "param" ? "parameter '" + name + "'"
                                           : "optimizer state " + kind + " of '" + name + "'";
  BRAID_CHECK(t, "checkpoint ", dir_.string(), " has no ", what,
              " (saved from another model or optimizer?)");
  BRAID_CHECK(t->shape == shape, "checkpoint ", dir_.string(), ": ", what, " has shape ",
              t->shape.str(), ", this model's is ", shape.str());
  BRAID_CHECK(dst.dtype() == DType::f32 && t->dtype == DType::f32, "checkpoint: ", what,
              " must be read as f32");
  struct Run {
    int64_t whole, n;  // whole-tensor elements [whole, whole + n)
    const PieceEntry* piece;
    int64_t local;  // where they are in the piece's slice
  };
  std::vector<Run> have;
  for (const PieceEntry& p : t->pieces)
    for_each_run(shape, p.tp, p.offset, p.offset + p.numel, [&](int64_t l, int64_t w, int64_t n) {
      if (w >= 0) have.push_back({w, n, &p, l});
    });
  std::sort(have.begin(), have.end(), [](const Run& a, const Run& b) { return a.whole < b.whole; });
  auto* out = static_cast<char*>(dst.raw_data());
  int64_t missing_at = -1;
  for_each_run(shape, cut, offset, offset + dst.numel(), [&](int64_t l, int64_t w, int64_t n) {
    char* to = out + (l - offset) * 4;
    if (w < 0) {  // padding: zero, never saved
      std::memset(to, 0, static_cast<size_t>(n) * 4);
      return;
    }
    // The first run that may overlap [w, w + n), then every one that does, in order.
    auto it = std::upper_bound(have.begin(), have.end(), w,
                               [](int64_t x, const Run& r) { return x < r.whole; });
    if (it != have.begin()) --it;
    int64_t at = w;
    for (; it != have.end() && it->whole < w + n && at < w + n; ++it) {
      const int64_t a = std::max(at, it->whole), b = std::min(w + n, it->whole + it->n);
      if (a > at || b <= a) continue;  // a gap before it, or it ends before `at`
      const PieceEntry& p = *it->piece;
      const int64_t from = it->local + (a - it->whole) - p.offset;  // element within the piece
      read_bytes(p.file, p.byte_offset + from * 4, to + (a - w) * 4,
                 static_cast<size_t>(b - a) * 4);
      at = b;
    }
    if (at < w + n && missing_at < 0) missing_at = at;
  });
  BRAID_CHECK(missing_at < 0, "checkpoint ", dir_.string(), ": element ", missing_at, " of ", what,
              " ", shape.str(), " is in no file (wanted: ", cut.str(), ", elements [", offset, ", ",
              offset + dst.numel(), ") of it)");
}

void CheckpointReader::read_unit(const nn::ParamLayout& layout, int u, Tensor& unit) const {
  for (int p : layout.units()[static_cast<size_t>(u)].params) {
    const nn::ParamInfo& info = layout.params()[static_cast<size_t>(p)];
    read("param", info.name, info.param->full_shape, TpSlice{}, 0,
         unit.flat_range(info.unit_offset, info.numel));
  }
}

void CheckpointReader::read_unit_range(const nn::ParamLayout& layout, int u, int64_t begin,
                                       int64_t end, Tensor part) const {
  BRAID_CHECK(part.numel() == end - begin, "CheckpointReader::read_unit_range: elements [", begin,
              ", ", end, ") into a buffer of ", part.numel());
  layout.for_each_part(u, begin, end, [&](const nn::ParamInfo* p, int64_t a, int64_t b) {
    Tensor to = part.flat_range(a - begin, b - a);
    if (!p) {
      to.zero_();
      return;
    }
    const ShardRecord r = p->whole();
    read("param", p->name, r.global_shape, r.tp, a - p->unit_offset, to);
  });
}

void CheckpointReader::read_optimizer(optim::Optimizer& optimizer,
                                      comm::ProcessGroup* replicas) const {
  BRAID_CHECK(m_.optimizer == optimizer.name(), "checkpoint ", dir_.string(), " holds ",
              m_.optimizer, " state, this run's optimizer is ", optimizer.name());
  const auto& states = optimizer.state_names();
  const bool shared = replicas && replicas->size() > 1;
  // Note [Owners by size]: among replicas, the one that wrote a slice's state (for a checkpoint
  // of this layout) reads it, and sends it to the others.
  std::vector<int> owner;
  if (shared) {
    std::vector<std::string> names;
    std::vector<int64_t> sizes;
    optimizer.visit_slices(
        [&](const optim::ParamSlice& s, optim::SliceSlot&) {
          names.push_back(s.name());
          sizes.push_back(s.shard.numel);
        },
        /*write=*/false);
    owner = comm::owners_by_size(names, sizes, replicas->size());
  }
  auto read_one = [&](size_t k, const optim::ParamSlice& s, const optim::SliceSlot& slot) {
    read(states[k], s.name(), s.shard.global_shape, s.shard.tp, s.shard.offset, slot.state[k]);
  };
  // Note [Piece order] (manifest.h): state by state where the store keeps its slots in memory
  // (the order a save of such a store wrote them), else slice by slice inside the one visit.
  const bool by_state = optimizer.state_store().slots_stay_resident();
  BRAID_CHECK(!shared || by_state,
              "checkpoint: optimizer state shared by replicas must be kept "
              "in memory (its tensors are sent after the visit)");
  std::vector<std::pair<const optim::ParamSlice*, optim::SliceSlot>> held;  // by_state
  auto visit = [&] {
    optimizer.visit_slices(
        [&](const optim::ParamSlice& s, optim::SliceSlot& slot) {
          if (by_state)
            held.emplace_back(&s, slot);
          else
            for (size_t k = 0; k < states.size(); ++k) read_one(k, s, slot);
        },
        /*write=*/true);
  };
  // Note [Faulting in ahead] (core/fault_ahead.h): the held state, in the order it is filled.
  auto in_fill_order = [&] {
    std::vector<Tensor> filled;
    for (size_t k = 0; k < states.size(); ++k)
      for (const auto& [s, slot] : held) filled.push_back(slot.state[k]);
    return filled;
  };
  if (!shared) {
    visit();
    const FaultAhead ahead(in_fill_order());
    for (size_t k = 0; k < states.size(); ++k)
      for (const auto& [s, slot] : held) read_one(k, *s, slot);
  } else {
    // Each slice's state read by its owner and broadcast as soon as it is (Note [Shared as
    // read], comm/read_and_share.h).
    comm::all_ranks_or_throw(replicas, visit);
    const FaultAhead ahead(in_fill_order());
    comm::ReadAndShare load(replicas);
    for (size_t k = 0; k < states.size(); ++k)
      for (size_t i = 0; i < held.size(); ++i) {
        const auto& [s, slot] = held[i];
        const int o = owner.at(i);
        load.step(
            [&] {
              if (o == replicas->rank()) read_one(k, *s, slot);
            },
            [&](comm::ProcessGroup& g) { return g.broadcast(slot.state[k], o); });
      }
    load.finish();
  }
  optimizer.set_step_count(m_.counter("optimizer_steps"));
}

void CheckpointReader::read_parameters(optim::Optimizer& optimizer) const {
  optimizer.visit_slices(
      [&](const optim::ParamSlice& s, optim::SliceSlot& slot) {
        read("param", s.name(), s.shard.global_shape, s.shard.tp, s.shard.offset, slot.param);
      },
      /*write=*/true);
}

}  // namespace braid::checkpoint
