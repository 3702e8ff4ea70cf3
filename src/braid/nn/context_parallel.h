// Context parallelism, as the model sees it: the sequence of every micro-batch split over the cp
// ranks, each holding the activations of its share of the tokens, with attention the one place
// where tokens meet (ContextParallel::attention runs it across the ranks). nn/ declares it;
// parallel/context implements it over the cp group of a DeviceMesh (ring attention or DeepSpeed's
// Ulysses), so nn/ never depends on comm/.
//
// Note [Context-parallel layout]: the model is given whole micro-batches (ids and targets
// [B, T], the same on every cp rank) and keeps its own tokens, so every caller (the Trainer, a
// pipeline stage, a library user's own loop) feeds it as it would one process.
//   zigzag      (ring) T is cut into 2 cp chunks; rank r holds chunks r and 2 cp - 1 - r, in
//               that order: under a causal mask every rank then does the same work (an early
//               chunk has little to attend to, its partner late in the sequence much).
//   contiguous  (Ulysses) rank r holds tokens [r T / cp, (r + 1) T / cp): attention runs on
//               whole sequences of a head group, so there is nothing to balance.
// Positions (RoPE angles, GPT-2's position rows) are the tokens' places in the whole sequence.
// Per-token work (norms, MLP, LM head, loss) needs nothing else: each rank's loss is the sum over
// its tokens divided by the step's whole denominator, and the gradients of the cp ranks sum in
// the data-parallel reduction, which runs over dp x cp (the cp ranks hold the same parameters,
// as torchtitan shards them over dp_shard x cp).
// While suspended (Suspend), the model runs whole sequences on every rank (generation's
// forwards, whose single last position lives on one rank only).
#pragma once

#include <cstdint>
#include <string>

#include "braid/autograd/variable.h"
#include "braid/core/tensor.h"

namespace braid::nn {

using autograd::Variable;

enum class SequenceSplit { zigzag, contiguous };

// Throws naming the keys unless a sequence of length T splits over cp ranks this way: zigzag
// needs a multiple of 2 cp, contiguous of cp. The one check of the plan (at start) and of each
// forward.
void check_sequence_split(int64_t T, int cp, SequenceSplit split);

class ContextParallel {
 public:
  ContextParallel(int rank, int size, SequenceSplit split);
  virtual ~ContextParallel() = default;
  ContextParallel(const ContextParallel&) = delete;
  ContextParallel& operator=(const ContextParallel&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  SequenceSplit split() const { return split_; }
  virtual std::string describe() const = 0;  // "cp=2 (ring, zig-zag)"
  // Whether attention splits the heads over the cp ranks (Ulysses): they must divide by cp.
  virtual bool splits_heads() const = 0;

  // Causal self-attention over the whole sequence, from this rank's tokens: q[B, Tl, NH, HS],
  // k and v [B, Tl, NKV, HS] (Tl = T / cp, in the split's order) -> this rank's rows of the output
  // [B, Tl, NH, HS]. Every cp rank must call it in the same order (it communicates).
  virtual Variable attention(const Variable& q, const Variable& k, const Variable& v) = 0;

  // Whether forwards are split now (false inside a Suspend).
  bool active() const { return active_; }
  // Throws naming the keys unless a sequence of length T splits.
  void check_seq_len(int64_t T) const;
  // This rank's tokens of whole [B, T] i32 (ids, targets) -> [B, T / cp], on whole's device.
  Tensor take_tokens(const Tensor& whole) const;
  // The whole-sequence positions of this rank's Tl = T / cp tokens, i32 [Tl], on the default
  // device (DeviceScope).
  Tensor positions(int64_t local_len) const;

  // While alive, the model runs whole sequences (generation).
  class Suspend {
   public:
    explicit Suspend(ContextParallel* cp) : cp_(cp), was_(cp && cp->active_) {
      if (cp_) cp_->active_ = false;
    }
    ~Suspend() {
      if (cp_) cp_->active_ = was_;
    }
    Suspend(const Suspend&) = delete;
    Suspend& operator=(const Suspend&) = delete;

   private:
    ContextParallel* cp_;
    bool was_;
  };

 private:
  // The whole-sequence position of local token t of Tl.
  int64_t position(int64_t t, int64_t local_len) const;

  int rank_, size_;
  SequenceSplit split_;
  bool active_ = true;
};

}  // namespace braid::nn
