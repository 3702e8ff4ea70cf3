#include "braid/train/generate.h"

#include <algorithm>
#include <cmath>

#include "braid/autograd/variable.h"
#include "braid/kernels/ops.h"

namespace braid::train {

std::vector<int32_t> sample(nn::Transformer& model, std::vector<int32_t> tokens,
                            const SampleOptions& opt, Rng& rng) {
  autograd::NoGradGuard no_grad;
  const int64_t window = model.config().max_seq_len;
  const int64_t V = model.config().vocab_size;
  if (tokens.empty()) tokens.push_back(0);
  std::vector<float> probs(static_cast<size_t>(V));
  std::vector<int32_t> order(static_cast<size_t>(V));
  for (int64_t n = 0; n < opt.max_new_tokens; ++n) {
    int64_t start = std::max<int64_t>(0, static_cast<int64_t>(tokens.size()) - window);
    int64_t T = static_cast<int64_t>(tokens.size()) - start;
    std::vector<int32_t> ctx(tokens.begin() + start, tokens.end());
    Tensor ids = Tensor::from_vector(ctx, Shape{1, T});
    autograd::Variable h = model.hidden(ids);  // [1,T,C]
    Tensor last = h.value().view(Shape{T, h.value().size(-1)}).narrow(T - 1, 1);
    Tensor logits = Tensor::empty(Shape{1, V}, DType::f32, MemCategory::activations);
    kernels::lm_head_logits(logits, last, model.head_weight().value());
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
