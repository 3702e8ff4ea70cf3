// StageRunner: runs one rank's part of a pipeline schedule (schedule.h) on its model chunks.
//
// Forward (m, c) of virtual stage vs = c * p + stage: the first virtual stage embeds micro-batch
// m's ids, the others take a leaf Variable holding the activations received from vs - 1; the
// chunk's blocks run; the last virtual stage computes the loss, the others send their output to
// vs + 1 and keep it for backward. Backward (m, c): the last virtual stage runs backward from its
// loss, the others from the output gradient received from vs + 1; the input leaf's gradient goes
// back to vs - 1. What a forward keeps lives until its backward (so gpipe holds m micro-batches'
// activations per chunk and 1f1b at most p - stage, Note [Pipeline memory]). With weight passes
// (zb_h1) the backward is B, autograd::backward_inputs: the input leaf's gradient now, the
// parameters' recorded in the slot, and W runs them (Note [Split backward]); what they read
// lives until W.
//
// Note [Pipeline messages]: activations and gradients travel by send/recv over the pp group,
// tagged by kind and receiving virtual stage; a schedule runs each chunk's forwards (and its
// backwards) in micro-batch order, so messages of one tag arrive in the order they are consumed.
// At micro-batch 0 of every step each sender first sends a small header (shape and dtype), which
// the receiver checks against what it expects, so mismatched stages fail with one line naming
// both sides instead of reading garbage. The receive for the next action is posted before the
// current one computes, so transfers overlap compute; sends never wait for the receiver.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/nn/staged_model.h"
#include "braid/parallel/pipeline/partition.h"
#include "braid/parallel/pipeline/schedule.h"
#include "braid/parallel/pipeline/timeline.h"
#include "braid/parallel/step.h"

namespace braid::parallel::pipeline {

// n i64 values on the host whatever the default device, charged to communication: the values
// the stages read on the host (Note [Pipeline metadata on the host], stage_runner.cpp).
Tensor host_i64(int64_t n);

class StageRunner {
 public:
  // partition: every virtual stage's blocks. The group's rank is the pipeline stage.
  StageRunner(std::shared_ptr<comm::ProcessGroup> pp, ScheduleShape shape,
              std::vector<BlockRange> partition, Timeline* timeline);
  ~StageRunner();

  // Runs the schedule over the step's micro-batches. Around each backward (and each B and W pass
  // where the schedule splits them) it calls begin_backward(k, n) (the k-th of the n this rank
  // runs) and end_backward(). Returns the
  // summed loss of the micro-batches on the last stage (0 elsewhere) and whether it was finite.
  StepLoss run(nn::StagedModel& model, const MicroBatches& batches,
               const std::function<void(int64_t k, int64_t n)>& begin_backward,
               const std::function<void()>& end_backward);
  // A forward without recording through every virtual stage; on the last virtual stage calls
  // head(hidden) with the last chunk's output.
  void forward_only(nn::StagedModel& model, const Tensor& ids,
                    const std::function<void(const autograd::Variable&)>& head);

  double last_wait_ms() const { return wait_ms_; }  // waiting for receives in the last run
  // The dtype the model computes in (MaterializeOptions::param_dtype): what activations are.
  void set_compute_dtype(DType dtype);

 private:
  struct State;
  std::unique_ptr<State> s_;
  double wait_ms_ = 0;
};

}  // namespace braid::parallel::pipeline
