// Sampling text from a model: temperature and top-k over the last position's logits,
// recomputing the (window of the) whole sequence per token. Small models only need this;
// a KV cache is future work.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "braid/core/rng.h"
#include "braid/nn/transformer.h"

namespace braid::train {

struct SampleOptions {
  int64_t max_new_tokens = 48;
  float temperature = 0.8f;  // 0 = greedy
  int64_t top_k = 40;        // 0 = the whole vocabulary
  int32_t stop_token = -1;   // stop after emitting it (stop_token_of)
};

// The token sampling stops at, as HF's generate: the model config's eos_token_id, or for a
// config without one the tokenizer's eos (GPT-2's <|endoftext|>; -1: never stop early).
int32_t stop_token_of(const nn::ModelConfig& config, int32_t tokenizer_eot);

// The logits [1, V] f32 of the last position of ids [1, T].
using LastLogits = std::function<Tensor(const Tensor& ids)>;

// window: the longest context the model takes (max_seq_len); vocab: V.
std::vector<int32_t> sample(const LastLogits& logits, int64_t window, int64_t vocab,
                            std::vector<int32_t> prompt, const SampleOptions& options, Rng& rng);
// A model held whole by this process.
std::vector<int32_t> sample(nn::Transformer& model, std::vector<int32_t> prompt,
                            const SampleOptions& options, Rng& rng);

}  // namespace braid::train
