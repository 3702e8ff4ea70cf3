// TpGroup: nn::TensorParallel over the tp group of a DeviceMesh, Megatron's mappings as
// autograd functions (Note [Tensor-parallel layout], nn/tensor_parallel.h):
//   enter  f  identity / all-reduce dx        (sequence parallel: all-gather rows / reduce-scatter)
//   exit   g  all-reduce / identity dx        (sequence parallel: reduce-scatter / all-gather)
//   sum_grad  identity / all-reduce dw over the ranks sharing the parameter
//   vocab-parallel cross-entropy: each rank's row max, sum of exponentials and target logit,
//   combined with two small all-reduces ([N] max, then [2N] sum); backward needs none (its dx
//   is summed by the enter() before it).
// Every collective runs on the tp group's own thread; the calling thread waits (the next op
// needs the result), and the time waited is counted in stats().
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "braid/comm/process_group.h"
#include "braid/nn/tensor_parallel.h"

namespace braid::parallel {

struct TpCommStats {
  int64_t collectives = 0;  // issued on the tp group by the model's forward and backward
  int64_t bytes = 0;        // what this rank sent for them (Note [Bus bytes], tp_group.cpp)
  double wait_ms = 0;       // time the compute thread waited for them
};

class TpGroup : public nn::TensorParallel {
 public:
  TpGroup(std::shared_ptr<comm::ProcessGroup> group, bool sequence_parallel);

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  bool sequence_parallel() const override { return sequence_parallel_; }
  std::string describe() const override;

  nn::Variable enter(const nn::Variable& x) override;
  nn::Variable exit(const nn::Variable& x) override;
  nn::Variable sum_grad(const nn::Variable& w, int replicas = 0) override;
  nn::Variable vocab_parallel_cross_entropy(const nn::Variable& x, const nn::Variable& w,
                                            const Tensor& targets, double denominator,
                                            int32_t ignore_index, int64_t v0,
                                            int64_t valid) override;
  Tensor vocab_parallel_logits(const Tensor& x, const Tensor& w, int64_t vocab) override;

  comm::ProcessGroup& group() { return *group_; }
  // The group of `replicas` consecutive ranks this rank belongs to (made on first use; a
  // collective over the tp group, so every rank asks in the same order).
  comm::ProcessGroup& replica_group(int replicas);

  // Runs a collective and waits, counting it.
  void run(const std::shared_ptr<comm::Work>& work, size_t bytes);
  TpCommStats stats() const;
  void reset_stats();

 private:
  std::shared_ptr<comm::ProcessGroup> group_;
  bool sequence_parallel_;
  std::map<int, std::shared_ptr<comm::ProcessGroup>> replica_groups_;
  mutable std::mutex mu_;  // stats: backward may run on another thread than forward
  TpCommStats stats_;
};

}  // namespace braid::parallel
