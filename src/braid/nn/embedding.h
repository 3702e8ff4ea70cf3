// Embedding: a [num, dim] table looked up by i32 ids. Parameter "weight". The Transformer
// fuses GPT-2's token and position tables into one autograd::embedding call (positions
// argument below).
//
// Vocab-parallel (tensor parallelism, Note [Tensor-parallel layout] in tensor_parallel.h): the
// token table's rows are split over the tp ranks (the vocabulary padded to a multiple of tp);
// each rank looks up the ids it holds, zero for the others, and TensorParallel::exit sums the
// ranks (or, with sequence parallelism, reduce-scatters this rank's rows). Positions are added
// after the sum, from the replicated position table.
#pragma once

#include "braid/nn/module.h"

namespace braid::nn {

class Embedding : public Module {
 public:
  // vocab_parallel: split the rows over tp (else a table replicated on every tp rank).
  Embedding(int64_t num, int64_t dim, float init_std = 0.02f, TensorParallel* tp = nullptr,
            bool vocab_parallel = false);

  // ids[B,T] i32 -> [B,T,dim] = weight[ids] (+ positions.weight[where[t]] when given; where:
  // i32 [T], the tokens' places in the whole sequence under context parallelism, undefined for
  // 0..T-1). Runs the forward hooks of this module (and of `positions`). Vocab-parallel with
  // sequence parallelism: this rank's rows of the flattened [B*T, dim].
  Variable operator()(const Tensor& ids, Embedding* positions = nullptr,
                      const Tensor& where = Tensor());

  int64_t num() const { return num_; }  // the real number of rows (unpadded)
  int64_t dim() const { return dim_; }
  Variable& weight() { return weight_->var; }
  Parameter* weight_param() { return weight_; }
  // Vocab-parallel: this rank's first row and how many of its rows are real.
  int64_t row_start() const { return row_start_; }
  int64_t rows_valid() const { return rows_valid_; }
  TensorParallel* tensor_parallel() const { return tp_; }

 private:
  Variable add_positions(const Variable& x, const Tensor& ids, Embedding& positions,
                         const Tensor& where);

  int64_t num_, dim_;
  TensorParallel* tp_ = nullptr;  // set only when vocab-parallel
  int64_t row_start_ = 0, rows_valid_ = 0;
  Parameter* weight_;
};

}  // namespace braid::nn
