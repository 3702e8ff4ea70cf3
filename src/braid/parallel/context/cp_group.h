// CpGroup: nn::ContextParallel over the cp group of a DeviceMesh (Note [Context-parallel
// layout], nn/context_parallel.h), in one of two modes:
//   ring     (Megatron-LM / torchtitan context parallelism) each rank keeps its queries; the
//            key/value blocks of the other ranks pass round the ring while attention computes
//            on the block at hand, the partial results merged by their log-sum-exp (Note [Ring
//            attention], ring_attention.cpp). Zig-zag split; any head count.
//   ulysses  (DeepSpeed-Ulysses) an all-to-all swaps the sequence split for a head split, each
//            rank attends whole sequences of NH / cp heads, and a second all-to-all swaps back
//            (ulysses.cpp). Contiguous split; query and key/value heads must divide by cp.
// The time the compute thread waits for cp traffic and the bytes it sends are counted.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "braid/comm/process_group.h"
#include "braid/nn/context_parallel.h"

namespace braid::parallel {

enum class CpMode { ring, ulysses };
CpMode cp_mode_from_name(const std::string& name);  // throws naming the key
std::string cp_mode_name(CpMode mode);
// How a mode splits each sequence: ring zig-zag, ulysses contiguous.
nn::SequenceSplit sequence_split(CpMode mode);

struct CpCommStats {
  int64_t bytes = 0;   // what this rank sent for the model's forward and backward
  double wait_ms = 0;  // time the compute thread waited for it (exposed communication)
};

class CpGroup : public nn::ContextParallel {
 public:
  CpGroup(std::shared_ptr<comm::ProcessGroup> group, CpMode mode);

  std::string describe() const override;
  bool splits_heads() const override { return mode_ == CpMode::ulysses; }
  nn::Variable attention(const nn::Variable& q, const nn::Variable& k,
                         const nn::Variable& v) override;

  CpMode mode() const { return mode_; }
  comm::ProcessGroup& group() { return *group_; }
  // Waits for work (an operation sending `bytes` from this rank), counting both.
  void wait(const std::shared_ptr<comm::Work>& work, size_t bytes);
  CpCommStats stats() const;
  void reset_stats();

 private:
  std::shared_ptr<comm::ProcessGroup> group_;
  CpMode mode_;
  mutable std::mutex mu_;  // stats: backward may run on another thread than forward
  CpCommStats stats_;
};

// The attention of each mode (cp_group.attention dispatches): q[B, Tl, NH, HS], k and v
// [B, Tl, NKV, HS], this rank's tokens in the mode's split -> [B, Tl, NH, HS].
nn::Variable ring_attention(CpGroup& cp, const nn::Variable& q, const nn::Variable& k,
                            const nn::Variable& v);
nn::Variable ulysses_attention(CpGroup& cp, const nn::Variable& q, const nn::Variable& k,
                               const nn::Variable& v);

}  // namespace braid::parallel
