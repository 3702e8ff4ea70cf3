// The time side of a layout: one optimizer step's time on a machine (machine_profile.h), split
// into what it is spent on, from the model's shape and the layout alone (no run).
//
// Note [Step-time model]: per rank, for its pipeline stage (embedding on the first, final norm,
// LM head and loss on the last) and a micro-batch of b sequences of T tokens (n = b T):
//   GEMM       each product of a block (qkv, attention output, the MLP's; Megatron's column /
//              row split over tp), forward once, backward twice (input and weight gradients),
//              at the profile's rate for its shape and dtype; the LM head + loss runs one
//              product forward and three backward on a CPU, three in all on a device (Note [LM
//              head cost]) over V / tp columns, plus its softmax per logit
//   attention  per sequence and local head, a T^2 hs + c T hs, forward and backward
//   memory     norms, activation, RoPE, residual adds, embedding: elements x the profile's
//              time per element of the class (under sequence parallelism the norms' and adds'
//              n / tp rows)
//   recompute  activation checkpointing reruns the block's forward (full) or its attention
//              sublayer (selective) in backward
//   overhead   the profile's per-op dispatch cost x the ops a block runs, and the framework's
//              cost per element of the buffers it makes ("alloc", Note [Framework cost])
// A step runs m = accumulation micro-batches: m (f + b) without a pipeline; with one, the
// schedule's makespan over stages of unequal cost c_s = f_s + b_s,
//   m max c + (sum c - max c) / v        (v chunks per rank; 1F1B, GPipe: v = 1)
// which is (m + (p - 1) / v) c for equal stages (the textbook bubble); zb_h1 idles F + B - W
// per other stage where 1F1B idles F + B + W (W: the weight-gradient products, Note [ZB-H1
// bubble]); zb_v (Note [ZB-V]) idles the larger of half a forward of each stage before the last
// (its start) and, with few micro-batches, the chain of one micro-batch through the V
// (m (F + B) of the slowest stage + (p - 1/2) stages' F + B) past m max c; plus the
// activations' point-to-point sends (2 m per stage boundary, exposed). On a CPU node with more
// ranks than cores the schedule is simulated pass by pass, the cores shared among the ranks that
// work (Note [Oversubscribed bubble], stage_work.cpp), and the data-parallel collectives are
// exposed whole (Note [CPU network overlap], step_cost.cpp).
// Communication (t = the profile's fit for the op, group size and bytes; the data-parallel
// group of dp ranks, gradients f32):
//   ddp     all-reduce of the stage's gradients once a step, in buckets behind the last
//           micro-batch's backward: exposed = the last bucket + what does not fit behind it
//   zero1   reduce-scatter of the gradients once a step (exposed), all-gather of the updated
//           parameters (exposed)
//   zero2   reduce-scatter per unit behind each micro-batch's backward (as DDP's buckets),
//           all-gather of the updated parameters
//   zero3   per micro-batch, all-gather of each unit's parameters (compute dtype) for forward
//           and again for backward, reduce-scatter of its gradients, prefetched: exposed = the
//           first unit's gather + max(0, comm - compute)
//   tp      per block and micro-batch, two all-reduces of n d elements (compute dtype) in
//           forward and two in backward (sequence parallelism: reduce-scatter + all-gather
//           pairs of the same bytes), exposed; the vocab-parallel loss's three of n floats
//   pp      tied embeddings' all-reduce between the first and last stage once a step
// The optimizer: AdamW per element this rank steps (a 1 / dp share under ZeRO), the gradient
// norm and zeroing, casts of the master weights to the compute dtype.
// Groups inside a node use the profile's node fits; the data-parallel group spans nodes when
// hosts > 1 (tensor, pipeline and shard groups are placed inside a node when they fit).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/nn/model_config.h"
#include "braid/parallel/cost/layout.h"
#include "braid/parallel/cost/machine_profile.h"

namespace braid::parallel::cost {

struct CostInputs {
  nn::ModelConfig model;
  Layout layout;
  int world = 1;
  int hosts = 1;
  int64_t seq_len = 1024;
};

struct StepCost {
  // Seconds per step on the slowest rank, by what they are spent on: the blocks' products,
  // attention, memory-bound ops (norms, activations, RoPE, adds, embedding), the fused LM head
  // and loss, dispatch overhead, the optimizer, exposed communication, the pipeline's bubble
  // and offload I/O (components() lists them; step is their sum).
  double gemm = 0, attention = 0, memory = 0, loss = 0, overhead = 0;
  double optimizer = 0, comm_exposed = 0, bubble = 0, offload = 0;
  double step = 0;
  double recompute = 0;   // of gemm, attention and memory: what checkpointing reruns
  double comm_total = 0;  // every collective's time, hidden or not
  double tokens_per_s = 0;
  double mfu = 0;  // model FLOPs (6N + 12 L T C per token) / (step x world x peak)
  // One rank's peak, the MFU denominator: the profile's data-sheet peak, else its GEMM rate for
  // large products.
  double peak_gflops = 0;
  std::vector<std::pair<std::string, double>> components() const;  // name, seconds
};

// Throws braid::Error naming the layout part when it does not fit the model or the world
// (tp not dividing the heads, pp the layers, tp x pp the world, ...).
StepCost predict_step(const CostInputs& in, const MachineProfile& profile);

// The activation and gradient elements a block makes for `tokens` tokens of widths d, qkv
// (q, k and v together), mlp_in (the MLP's first product's outputs) and h (Note [Framework
// cost]).
double fresh_elements(double d, double qkv, double mlp_in, double h, double tokens);

// The checks predict_step() makes, without predicting ("" when the layout is valid).
std::string layout_problem(const CostInputs& in);

}  // namespace braid::parallel::cost
