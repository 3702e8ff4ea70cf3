// Tensor parallelism (Megatron-LM's), as the model sees it: which slice of each parameter this
// rank holds (TpSlice) and the communication a tensor-parallel layer runs, each with its
// backward (TensorParallel). nn/ declares them; parallel/tensor implements TensorParallel over
// the tp group of a DeviceMesh, so nn/ never depends on comm/.
//
// Note [Tensor-parallel layout]: a block splits its MLP and attention over the tp ranks.
//   attention  q/k/v (GPT-2's fused c_attn per head, so each rank's q, k and v stay together)
//              column-parallel: rank r holds heads [r*NH/tp, (r+1)*NH/tp) and the kv heads they
//              read (split when tp divides NKV, else each kv head replicated on tp/NKV ranks);
//              the output projection is row-parallel (its input columns are those heads).
//   MLP        c_fc / gate_proj, up_proj column-parallel, c_proj / down_proj row-parallel.
//   embedding  vocab-parallel: rank r holds rows [r*Vp/tp, (r+1)*Vp/tp) of the token table
//              (Vp: the vocabulary padded up to a multiple of tp; padding rows stay zero and are
//              outside every softmax, so the math is the unpadded model's), and the LM head,
//              tied or not, the same rows: the logits are never gathered (vocab-parallel
//              cross-entropy).
//   the rest   (norms, position table, row-parallel biases) replicated on every tp rank.
// Each column-parallel input passes enter() (f: identity forward, all-reduce of the gradient
// backward) and each row-parallel output exit() (g: all-reduce forward, identity backward),
// once per sublayer: two all-reduces forward and two backward per block. With sequence
// parallelism the residual stream between sublayers is split by rows (token t of the flattened
// [B*T] on rank t / (B*T/tp)); enter() all-gathers the rows and exit() reduce-scatters them
// (Megatron's g and g-bar), the same bytes as the all-reduces, and norms run on 1/tp of the
// tokens: their parameters' gradients are then partial and summed over tp (sum_grad).
#pragma once

#include <cstdint>
#include <string>

#include "braid/autograd/variable.h"
#include "braid/core/shard_record.h"
#include "braid/core/tensor.h"

namespace braid::nn {

using autograd::Variable;

// Which part of the full parameter a rank holds: TpSlice (core/shard_record.h, the tp placement
// of Note [Placements]). Along `dim` the full parameter (padded to `padded` elements) is
// `sections` equal sections (GPT-2's fused q, k, v: 3), each split into `parts` equal parts; the
// rank holds part `part` of every section, in section order. Indices at or past the parameter's
// real size along dim are padding (the vocabulary's): zero, never initialised or exported.
// parts == 1: the whole parameter (replicated).

// Tensor-parallel communication with autograd (Megatron's mappings). Every rank of the tp group
// must call the same functions in the same order (they are collectives).
class TensorParallel {
 public:
  virtual ~TensorParallel() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual bool sequence_parallel() const = 0;
  virtual std::string describe() const = 0;  // "tp=2, sequence parallel"

  // The current forward's sequence length (Transformer sets it; under sequence parallelism a
  // sublayer sees its tokens as [B*T/tp, C] rows and needs T to make the batch whole again).
  void set_seq_len(int64_t t) { seq_len_ = t; }
  int64_t seq_len() const { return seq_len_; }

  // Entering a column-parallel region: identity forward, gradient all-reduced backward; under
  // sequence parallelism rows [n, C] are all-gathered to [tp*n, C] (backward reduce-scatter).
  virtual Variable enter(const Variable& x) = 0;
  // Leaving a row-parallel region: partial sums all-reduced forward, identity backward; under
  // sequence parallelism [N, C] is reduce-scattered to this rank's rows [N/tp, C] (backward
  // all-gather).
  virtual Variable exit(const Variable& x) = 0;
  // Identity forward; backward sums the gradient over `replicas` consecutive tp ranks (0: all
  // of them): a parameter whose ranks each see only part of its uses (a norm under sequence
  // parallelism, a kv head shared by several ranks).
  virtual Variable sum_grad(const Variable& w, int replicas = 0) = 0;

  // Vocab-parallel LM head + cross-entropy: x[N, C] whole (replicated), w this rank's vocabulary
  // rows [Vl, C] starting at global row v0, of which `valid` are real; targets[N] global ids.
  // Summed loss / denominator (0: the number of counted targets), the same scalar on every rank.
  virtual Variable vocab_parallel_cross_entropy(const Variable& x, const Variable& w,
                                                const Tensor& targets, double denominator,
                                                int32_t ignore_index, int64_t v0,
                                                int64_t valid) = 0;
  // logits[N, V] f32 of the full vocabulary from every rank's slice (no recording).
  virtual Tensor vocab_parallel_logits(const Tensor& x, const Tensor& w, int64_t vocab) = 0;

 private:
  int64_t seq_len_ = 0;
};

// The rows of a vocabulary of `vocab` entries split over tp ranks: padded to a multiple of tp.
int64_t padded_vocab(int64_t vocab, int tp);

// Copies this rank's slice of `full` (the parameter's full shape, f32) into `local` (its local
// shape), padding zero. And back: writes `local` into its place in `full` (padding dropped).
void take_slice(const Tensor& full, Tensor& local, const TpSlice& slice);
void place_slice(const Tensor& local, Tensor& full, const TpSlice& slice);

}  // namespace braid::nn
