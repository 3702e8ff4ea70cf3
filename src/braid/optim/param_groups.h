// Splitting named parameters into weight-decay and no-decay groups.
//
// Note [No-decay rule]: as nanoGPT (decay only tensors of rank >= 2) combined with the
// HuggingFace Trainer (no decay for names containing "bias" or a norm's weight): biases,
// LayerNorm/RMSNorm weights and every 1-D parameter get weight_decay 0; matrices (linear
// weights, embeddings) get the configured decay. The rank is that of the full parameter
// (ParamSlice::shard.global_shape), so a flat ZeRO shard is classified like its parameter.
#pragma once

#include <string>
#include <vector>

#include "braid/optim/optimizer.h"

namespace braid::optim {

struct DecaySplitOptions {
  float weight_decay = 0.1f;
  bool no_decay_below_rank_2 = true;
  // A parameter whose name contains any of these gets no decay.
  std::vector<std::string> no_decay_name_parts = {"bias", "norm", "ln_", "ln.", "layernorm"};
  // Names containing any of these always get decay (overrides both rules above).
  std::vector<std::string> force_decay_name_parts = {};
};

bool is_no_decay(const ParamSlice& p, const DecaySplitOptions& options = {});

// Returns {decay group (weight_decay = options.weight_decay), no-decay group (0)}, each in the
// input order. Both groups are always present (possibly empty) so state layouts are stable.
std::vector<ParamGroup> split_decay_groups(const std::vector<ParamSlice>& params,
                                           const DecaySplitOptions& options = {});

}  // namespace braid::optim
