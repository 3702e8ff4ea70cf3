// CheckpointReader: one training checkpoint directory, checked before anything is read from
// it, and read under any layout by element ranges (docs/design.md "Checkpoints"): a rank asks for
// the range its own shard record names and gets it from whichever files hold its pieces, and
// (version 4) every block it reads is checked as it is read (Note [Verified reads]).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "braid/checkpoint/file_io.h"
#include "braid/checkpoint/manifest.h"
#include "braid/checkpoint/verified_file.h"
#include "braid/comm/process_group.h"
#include "braid/core/tensor.h"
#include "braid/nn/param_layout.h"
#include "braid/optim/optimizer.h"

namespace braid::checkpoint {

// A bad block met while loading, on some rank (check_reads): every rank throws it.
class CorruptCheckpoint : public Error {
 public:
  explicit CorruptCheckpoint(const std::string& what) : Error(what) {}
};

class CheckpointReader {
 public:
  // Parses the manifest and checks every file's presence, size and header (its checkpoint id
  // and rank) against it; the first problem is an Error naming the file and what is wrong.
  explicit CheckpointReader(std::filesystem::path dir);

  // Reads every file whole and compares its CRC-32C (version 4: each block's) with the
  // manifest's.
  void verify_file(size_t file) const;
  // The same for every file, split among the group's ranks (null: this process reads all);
  // collective: a bad file fails every rank with the error.
  void verify(comm::ProcessGroup* group) const;
  // Whether reads check what they read (version 4): no verify() needed before loading.
  bool checks_while_reading() const { return !blocks_.empty(); }
  // From now on a bad block is remembered, and the reads go on (Note [Verified reads]).
  void defer_corruption() const;
  // Collective: after the reads of a load, throws CorruptCheckpoint on every rank when any rank
  // met a bad block since defer_corruption(), naming the first.
  void check_reads(comm::ProcessGroup* group) const;
  // Bytes this reader has read from the rank files so far (headers and tables included).
  int64_t bytes_read() const;

  const Manifest& manifest() const { return m_; }
  const std::filesystem::path& dir() const { return dir_; }

  // Elements [offset, offset + dst.numel()) of slice `cut` of a tensor whose whole shape is
  // `shape` into dst (f32, contiguous), whatever placements saved it (Note [Resharding reads]).
  // Errors name the tensor when it is missing, has another shape, or an element is in no piece.
  void read(const std::string& kind, const std::string& name, const Shape& shape,
            const TpSlice& cut, int64_t offset, Tensor dst) const;
  // Unit u's parameters (MaterializeOptions::fill): each parameter whole, at its unit offset.
  void read_unit(const nn::ParamLayout& layout, int u, Tensor& unit) const;
  // Elements [begin, end) of unit u of this rank's layout into `part` (end - begin elements;
  // MaterializeOptions::fill_range): the parts of its parameters there, each as this rank's tp
  // slice of it (Note [Placements]), and zero padding.
  void read_unit_range(const nn::ParamLayout& layout, int u, int64_t begin, int64_t end,
                       Tensor part) const;
  // The optimizer's state for its slices and its step count; its kind must match. Where the
  // ranks of `replicas` hold the same slices (DDP's replicated state, whose tensors must be the
  // optimizer's own buffers), each slice's state is read by the replica that owns it
  // (comm::owners_by_size: the one that wrote it, for a checkpoint of this layout) and sent to
  // the others (Note [Ranged loads]): collective over replicas. Null or one rank: read here.
  void read_optimizer(optim::Optimizer& optimizer, comm::ProcessGroup* replicas = nullptr) const;
  // The master parameters of the optimizer's slices (a prepared model loading a checkpoint:
  // the strategy then republishes them, as after an update).
  void read_parameters(optim::Optimizer& optimizer) const;

 private:
  void read_bytes(int file, int64_t offset, void* data, size_t n) const;

  std::filesystem::path dir_;
  Manifest m_;
  std::vector<std::unique_ptr<FileSource>> files_;     // before version 4
  std::vector<std::unique_ptr<VerifiedFile>> blocks_;  // version 4
};

}  // namespace braid::checkpoint
