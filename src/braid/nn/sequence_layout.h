// SequenceLayout: where the examples of packed rows begin (Note [Packed rows]).
//
// Note [Packed rows]: a row of instruction data may hold several examples one after the other
// (braid prepare-data --layout pack). Each must be computed as if it were alone: its positions
// restart at 0 (learned positions and RoPE angles), and its queries see only its own keys. The
// loader gives each row's positions (0 where an example begins); from them the layout holds the
// flat positions and the segments, and the Transformer set to it (set_sequence_layout) embeds
// with the positions, rotates with them, and runs attention segment by segment
// (autograd::attention with segments: the same kernels on views of each example's rows). So a
// packed batch's loss is the sum of its examples' losses run one by one, and their gradients.
// The layout is set for one micro-batch's forward and backward (a checkpointed block reruns its
// forward in backward and must see the same layout): around each micro-step, and in a pipeline
// around each of a stage's actions, whose schedule interleaves micro-batches. Context
// parallelism, which splits rows across ranks, refuses packed rows.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "braid/autograd/functions.h"
#include "braid/core/tensor.h"

namespace braid::nn {

struct SequenceLayout {
  int64_t batch = 0, seq_len = 0;
  Tensor positions;  // [B * T] i32 on the current device: each token's place in its example
  std::vector<autograd::Segment> segments;

  // From positions [B, T] i32 on the host (0 begins an example, else one more than the token
  // before), kept on the current device (DeviceScope) for the kernels that read them; an
  // inconsistent tensor throws naming the row and position.
  static std::shared_ptr<const SequenceLayout> from_positions(const Tensor& positions);
};

}  // namespace braid::nn
