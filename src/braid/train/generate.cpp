#include "braid/train/generate.h"

#include <algorithm>
#include <cmath>

#include "braid/autograd/variable.h"
#include "braid/core/error.h"

namespace braid::train {

int32_t stop_token_of(const nn::ModelConfig& config, int32_t tokenizer_eot) {
  return config.eos_token_id >= 0 ? static_cast<int32_t>(config.eos_token_id) : tokenizer_eot;
}

std::vector<int32_t> sample(nn::Transformer& model, std::vector<int32_t> prompt,
                            const SampleOptions& options, Rng& rng) {
  auto logits = [&model](const Tensor& ids) { return model.last_logits(ids); };
  return sample(logits, model.config().max_seq_len, model.config().vocab_size, std::move(prompt),
                options, rng);
}

std::vector<int32_t> sample(const LastLogits& last_logits, int64_t window, int64_t V,
                            std::vector<int32_t> tokens, const SampleOptions& opt, Rng& rng) {
  autograd::NoGradGuard no_grad;
  if (tokens.empty()) tokens.push_back(0);
  std::vector<float> probs(static_cast<size_t>(V));
  std::vector<int32_t> order(static_cast<size_t>(V));
  for (int64_t n = 0; n < opt.max_new_tokens; ++n) {
    int64_t start = std::max<int64_t>(0, static_cast<int64_t>(tokens.size()) - window);
    int64_t T = static_cast<int64_t>(tokens.size()) - start;
    std::vector<int32_t> ctx(tokens.begin() + start, tokens.end());
    const Tensor logits = last_logits(Tensor::from_vector(ctx, Shape{1, T}));
    BRAID_CHECK(logits.numel() == V, "sample: the model gave ", logits.numel(),
                " logits, expected ", V);
    const float* l = logits.data<float>();
    int32_t next = 0;
    if (opt.temperature <= 0) {
      next = static_cast<int32_t>(std::max_element(l, l + V) - l);
    } else {
      for (int64_t i = 0; i < V; ++i) order[i] = static_cast<int32_t>(i);
      int64_t k = opt.top_k > 0 ? std::min(opt.top_k, V) : V;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return l[a] > l[b]; });
      double maxv = l[order[0]], total = 0;
      for (int64_t i = 0; i < k; ++i) {
        probs[i] = static_cast<float>(std::exp((l[order[i]] - maxv) / opt.temperature));
        total += probs[i];
      }
      double u = rng.uniform() * total, acc = 0;
      next = order[k - 1];
      for (int64_t i = 0; i < k; ++i) {
        acc += probs[i];
        if (u < acc) {
          next = order[i];
          break;
        }
      }
    }
    tokens.push_back(next);
    if (next == opt.stop_token) break;
  }
  return tokens;
}

}  // namespace braid::train
