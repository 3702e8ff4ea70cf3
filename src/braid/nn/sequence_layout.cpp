#include "braid/nn/sequence_layout.h"

#include "braid/core/device_backend.h"
#include "braid/core/error.h"

namespace braid::nn {

std::shared_ptr<const SequenceLayout> SequenceLayout::from_positions(const Tensor& positions) {
  BRAID_CHECK(
      positions.defined() && positions.dtype() == DType::i32 && positions.shape().dim() == 2,
      "sequence layout: positions must be [B, T] i32, got ",
      positions.defined() ? positions.shape().str() : std::string("none"));
  auto out = std::make_shared<SequenceLayout>();
  out->batch = positions.size(0);
  out->seq_len = positions.size(1);
  const Tensor flat = positions.view(Shape{positions.numel()});
  const int32_t* p = flat.data<int32_t>();
  for (int64_t b = 0; b < out->batch; ++b) {
    int64_t begin = 0;
    for (int64_t t = 0; t < out->seq_len; ++t) {
      const int32_t got = p[b * out->seq_len + t];
      BRAID_CHECK(t != 0 || got == 0, "sequence layout: row ", b, " begins at position ", got,
                  ", not 0");
      const int32_t want = t == 0 ? 0 : p[b * out->seq_len + t - 1] + 1;
      BRAID_CHECK(got == 0 || got == want, "sequence layout: row ", b, " position ", t, " is ", got,
                  ", expected 0 (an example begins) or ", want);
      if (got == 0 && t > 0) {
        out->segments.push_back({b, begin, t});
        begin = t;
      }
    }
    out->segments.push_back({b, begin, out->seq_len});
  }
  const Device here = current_device();
  out->positions = here.is_cpu() ? flat : flat.to(here);
  return out;
}

}  // namespace braid::nn
