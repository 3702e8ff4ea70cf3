#include "braid/nn/context_parallel.h"

#include <cstring>

#include "braid/core/device_backend.h"
#include "braid/core/error.h"

namespace braid::nn {

ContextParallel::ContextParallel(int rank, int size, SequenceSplit split)
    : rank_(rank), size_(size), split_(split) {
  BRAID_CHECK(size >= 1 && rank >= 0 && rank < size, "ContextParallel: rank ", rank, " of ", size);
}

void check_sequence_split(int64_t T, int cp, SequenceSplit split) {
  const int64_t g = split == SequenceSplit::zigzag ? 2 * cp : cp;
  BRAID_CHECK(T % g == 0, "data.seq_len ", T,
              " does not split over parallel.context_parallel_size ", cp,
              split == SequenceSplit::zigzag
                  ? " with parallel.context_parallel_mode ring: its zig-zag split needs a "
                    "multiple of 2 x context_parallel_size = " +
                        std::to_string(g)
                  : std::string(" (parallel.context_parallel_mode ulysses): it must divide by it"));
}

void ContextParallel::check_seq_len(int64_t T) const {
  check_sequence_split(T, size_, split_);
}

int64_t ContextParallel::position(int64_t t, int64_t local_len) const {
  if (split_ == SequenceSplit::contiguous) return rank_ * local_len + t;
  const int64_t c = local_len / 2;  // chunk length
  const int64_t chunk = t < c ? rank_ : 2 * size_ - 1 - rank_;
  return chunk * c + t % c;
}

// Token ids and positions are split on the host (a few bytes a token) and go where the ids
// came from, or where the model runs (Note [Training device]).
Tensor ContextParallel::take_tokens(const Tensor& whole) const {
  BRAID_CHECK(whole.dtype() == DType::i32 && whole.dim() == 2,
              "ContextParallel: tokens must be i32 [B, T], got ", whole.shape().str());
  const int64_t B = whole.size(0), T = whole.size(1);
  check_seq_len(T);
  const int64_t Tl = T / size_;
  const Tensor host = whole.device().is_cpu() ? whole : whole.to(Device::cpu());
  Tensor out = Tensor::empty(Shape{B, Tl}, DType::i32, MemCategory::activations,
                             MemoryScope::current_tracker(), Device::cpu());
  const int32_t* src = host.data<int32_t>();
  int32_t* dst = out.data<int32_t>();
  // Runs of consecutive positions: one (contiguous) or two chunks (zigzag) per row.
  const int64_t run = split_ == SequenceSplit::zigzag ? Tl / 2 : Tl;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tl; t += run)
      std::memcpy(dst + b * Tl + t, src + b * T + position(t, Tl),
                  static_cast<size_t>(run) * sizeof(int32_t));
  return whole.device().is_cpu() ? out : out.to(whole.device());
}

Tensor ContextParallel::positions(int64_t local_len) const {
  Tensor out = Tensor::empty(Shape{local_len}, DType::i32, MemCategory::activations,
                             MemoryScope::current_tracker(), Device::cpu());
  int32_t* p = out.data<int32_t>();
  for (int64_t t = 0; t < local_len; ++t) p[t] = static_cast<int32_t>(position(t, local_len));
  return current_device().is_cpu() ? out : out.to(current_device());
}

}  // namespace braid::nn
