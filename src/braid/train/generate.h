// Sampling text from a model: temperature and top-k over the last position's logits,
// recomputing the (window of the) whole sequence per token. Small models only need this;
// a KV cache is future work.
#pragma once

#include <cstdint>
#include <vector>

#include "braid/core/rng.h"
#include "braid/nn/transformer.h"

namespace braid::train {

struct SampleOptions {
  int64_t max_new_tokens = 48;
  float temperature = 0.8f;  // 0 = greedy
  int64_t top_k = 40;        // 0 = the whole vocabulary
  int32_t stop_token = -1;   // stop after emitting it (e.g. <|endoftext|>)
};

std::vector<int32_t> sample(nn::Transformer& model, std::vector<int32_t> prompt,
                            const SampleOptions& options, Rng& rng);

}  // namespace braid::train
