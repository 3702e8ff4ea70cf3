#include "braid/parallel/pipeline/stage_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <utility>

#include "braid/autograd/functions.h"
#include "braid/autograd/variable.h"
#include "braid/autograd/weight_gradients.h"
#include "braid/core/error.h"

namespace braid::parallel::pipeline {

using autograd::Variable;

namespace {

// Note [Pipeline messages]: one tag per kind and receiving virtual stage.
enum Kind { kActivation = 0, kGradient = 1, kHeader = 2 };
int tag(Kind kind, int virtual_stage) {
  return 4 * virtual_stage + kind;
}

constexpr int kHeaderSize = 6;  // ndim, 4 dims, dtype

// Note [Pipeline metadata on the host]: the activation header and the step's loss are values the
// stages read on the host, so they are made there whatever the default device (a stage on a
// device runs under the trainer's DeviceScope); the local and MPI groups send host tensors as
// they are and stage only the device activations and gradients (Note [Device staging]).
Tensor host_header() {
  return host_i64(kHeaderSize);
}

Tensor header_of(const Tensor& t) {
  BRAID_CHECK(t.dim() <= 4, "pipeline: activations of ", t.dim(), " dimensions");
  Tensor h = host_header();
  int64_t* d = h.data<int64_t>();
  std::fill(d, d + kHeaderSize, 0);
  d[0] = t.dim();
  for (int i = 0; i < t.dim(); ++i) d[1 + i] = t.size(i);
  d[5] = static_cast<int64_t>(t.dtype());
  return h;
}

std::string describe(const Shape& shape, DType dtype) {
  return shape.str() + " " + std::string(dtype_name(dtype));
}

}  // namespace

Tensor host_i64(int64_t n) {
  return Tensor::empty(Shape{n}, DType::i64, MemCategory::communication,
                       MemoryScope::current_tracker(), Device::cpu());
}

struct StageRunner::State {
  std::shared_ptr<comm::ProcessGroup> pp;
  ScheduleShape shape;
  std::vector<BlockRange> partition;
  Timeline* timeline = nullptr;
  int stage = 0, p = 1, V = 1;

  // One run.
  nn::StagedModel* model = nullptr;
  const MicroBatches* batches = nullptr;
  std::vector<std::pair<Tensor, Tensor>> data;  // micro-batches read so far
  struct Slot {
    Variable input;   // the leaf holding received activations (not on virtual stage 0)
    Variable output;  // the chunk's output, or the loss on the last virtual stage
    autograd::WeightGradients weights;  // B's weight gradients, for W (zb_h1)
  };
  std::vector<std::vector<Slot>> slots;  // [chunk][micro]
  std::optional<Shape> act_shape;        // every activation message of this run has it
  DType act_dtype = DType::f32;
  DType compute = DType::f32;
  struct Posted {
    Action action;
    Tensor buffer;
    std::shared_ptr<comm::Work> work;
  };
  std::optional<Posted> posted;  // the receive posted ahead for the next action
  std::vector<std::shared_ptr<comm::Work>> sends;
  // Note [Messages to this rank]: zb_v's last stage hands chunk 0's output to chunk 1 (and the
  // gradient back) on the same rank, by tag and micro-batch, not through the group.
  std::map<std::pair<int, int>, Tensor> handed;
  double wait_ms = 0;

  int virtual_stage(int chunk) const { return pipeline::virtual_stage(shape, stage, chunk); }
  int rank_of(int vs) const { return stage_of(shape, vs); }
  // The virtual stage `a`'s message comes from (a receives()).
  int source(const Action& a) const {
    const int vs = virtual_stage(a.chunk);
    return a.kind == Action::Kind::forward ? vs - 1 : vs + 1;
  }
  // Whether `a` receives its message from this rank itself.
  bool handed_here(const Action& a) const { return rank_of(source(a)) == stage; }

  const std::pair<Tensor, Tensor>& batch(int m) {
    while (static_cast<int>(data.size()) <= m)
      data.push_back(batches->next(static_cast<int64_t>(data.size())));
    return data[static_cast<size_t>(m)];
  }

  // Whether `a` receives a message, and from where.
  bool receives(const Action& a) const {
    const int vs = virtual_stage(a.chunk);
    if (a.kind == Action::Kind::weight) return false;
    return a.kind == Action::Kind::forward ? vs > 0 : vs < V - 1;
  }

  void post(const Action& a) {
    if (handed_here(a)) return;
    const int vs = virtual_stage(a.chunk);
    const bool fwd = a.kind == Action::Kind::forward;
    Tensor buffer = Tensor::empty(*act_shape, act_dtype, MemCategory::activations);
    auto work = fwd ? pp->recv(buffer, rank_of(vs - 1), tag(kActivation, vs))
                    : pp->recv(buffer, rank_of(vs + 1), tag(kGradient, vs));
    posted = Posted{a, buffer, work};
  }

  // The header a sender puts before micro-batch 0's activations: checked against what this
  // stage expects, and the shape of every activation message of the run.
  void receive_header(int vs) {
    Tensor h = host_header();  // Note [Pipeline metadata on the host]
    wait(pp->recv(h, rank_of(vs - 1), tag(kHeader, vs)));
    const int64_t* d = h.data<int64_t>();
    BRAID_CHECK(d[0] >= 1 && d[0] <= 4 && d[5] >= 0 && d[5] <= static_cast<int64_t>(DType::u8),
                "pipeline stage ", stage, ": a malformed activation header from stage ",
                rank_of(vs - 1));
    std::vector<int64_t> dims(d + 1, d + 1 + d[0]);
    const Shape got(dims);
    const DType dtype = static_cast<DType>(d[5]);
    const DType want = expected_dtype();
    const std::optional<int64_t> width = model->activation_width();
    BRAID_CHECK(dtype == want && got.numel() > 0 && (!width || got[-1] == *width) &&
                    (!act_shape || *act_shape == got),
                "pipeline stage ", stage, " (virtual stage ", vs, ") expected activations of ",
                act_shape ? describe(*act_shape, want)
                          : (width ? "[..., " + std::to_string(*width) + "] " : std::string()) +
                                std::string(dtype_name(want)),
                " from stage ", rank_of(vs - 1), " but received ", describe(got, dtype),
                ": the stages run different models, batch shapes or precisions");
    act_shape = got;
    act_dtype = dtype;
  }

  // Activations travel in the compute dtype the model was materialised in (a sharded stage's
  // parameters are not there to ask between its uses).
  DType expected_dtype() const { return compute; }

  // Action a's message: the one posted ahead, or received now.
  Tensor receive(const Action& a) {
    const int vs = virtual_stage(a.chunk);
    if (handed_here(a)) {
      const Kind kind = a.kind == Action::Kind::forward ? kActivation : kGradient;
      auto it = handed.find({tag(kind, vs), a.micro});
      BRAID_CHECK(it != handed.end(), "pipeline stage ", stage, ": ", action_name(a),
                  " runs before the pass on this rank that makes its input");
      Tensor t = std::move(it->second);
      handed.erase(it);
      return t;
    }
    if (a.kind == Action::Kind::forward && a.micro == 0) receive_header(vs);
    if (!posted || !(posted->action == a)) post(a);
    Posted mine = std::move(*posted);
    posted.reset();
    wait(mine.work);
    return mine.buffer;
  }

  void wait(const std::shared_ptr<comm::Work>& work) {
    if (work->is_completed()) {
      work->wait();
      return;
    }
    const double t0 = timeline ? timeline->now_us() : 0;
    const auto c0 = std::chrono::steady_clock::now();
    work->wait();
    wait_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
    if (timeline) timeline->add(TimelineEvent::Kind::idle, -1, -1, t0, timeline->now_us());
  }

  void send(const Tensor& t, int to_vs, Kind kind, int micro) {
    if (rank_of(to_vs) == stage) {  // Note [Messages to this rank]
      handed[{tag(kind, to_vs), micro}] = t;
      return;
    }
    const double t0 = timeline ? timeline->now_us() : 0;
    if (kind == kActivation && micro == 0)
      sends.push_back(pp->send(header_of(t), rank_of(to_vs), tag(kHeader, to_vs)));
    sends.push_back(pp->send(t, rank_of(to_vs), tag(kind, to_vs)));
    if (timeline) timeline->add(TimelineEvent::Kind::send, micro, -1, t0, timeline->now_us());
  }

  void finish_sends() {
    for (auto& w : sends) w->wait();
    sends.clear();
  }
};

StageRunner::StageRunner(std::shared_ptr<comm::ProcessGroup> pp, ScheduleShape shape,
                         std::vector<BlockRange> partition, Timeline* timeline)
    : s_(std::make_unique<State>()) {
  check_schedule(shape);
  BRAID_CHECK(static_cast<int>(partition.size()) == shape.virtual_stages(),
              "StageRunner: ", partition.size(), " block ranges for ", shape.virtual_stages(),
              " virtual stages");
  BRAID_CHECK(pp && pp->size() == shape.stages, "StageRunner: the pp group has ",
              pp ? pp->size() : 0, " ranks for ", shape.stages, " stages");
  s_->stage = pp->rank();
  s_->p = shape.stages;
  s_->V = shape.virtual_stages();
  s_->pp = std::move(pp);
  s_->shape = shape;
  s_->partition = std::move(partition);
  s_->timeline = timeline;
}

StageRunner::~StageRunner() = default;

StepLoss StageRunner::run(nn::StagedModel& model, const MicroBatches& batches,
                          const std::function<void(int64_t, int64_t)>& begin_backward,
                          const std::function<void()>& end_backward) {
  State& s = *s_;
  ScheduleShape shape = s.shape;
  shape.micro_batches = static_cast<int>(batches.count);
  check_schedule(shape);
  const std::vector<Action> actions = stage_actions(shape, s.stage);
  const int v = shape.chunks, M = shape.micro_batches;
  const bool split = has_weight_passes(shape.kind);
  s.model = &model;
  s.batches = &batches;
  s.data.clear();
  s.slots = std::vector<std::vector<State::Slot>>(static_cast<size_t>(v));
  for (std::vector<State::Slot>& chunk : s.slots) chunk.resize(static_cast<size_t>(M));
  s.act_shape.reset();
  s.posted.reset();
  s.handed.clear();
  s.wait_ms = 0;
  StepLoss out;
  // Note [Pipeline reduction]: with weight passes, B and W each run as a backward of their own.
  const int64_t backwards = static_cast<int64_t>(M) * v * (split ? 2 : 1);
  int64_t k = 0;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const int vs = s.virtual_stage(a.chunk);
    const BlockRange& blocks = s.partition[static_cast<size_t>(vs)];
    State::Slot& slot = s.slots[static_cast<size_t>(a.chunk)][static_cast<size_t>(a.micro)];
    const bool fwd = a.kind == Action::Kind::forward;
    const bool weight = a.kind == Action::Kind::weight;
    const auto& [ids, targets] = s.batch(a.micro);
    // Note [Packed rows]: each action runs under its micro-batch's layout (a checkpointed block
    // reruns its forward in the backward, after other micro-batches' forwards).
    const nn::PackedRowsScope packed(model,
                                     batches.positions ? batches.positions(a.micro) : Tensor());
    Tensor message = s.receives(a) ? s.receive(a) : Tensor();
    // Overlap: the next action's message travels while this one computes.
    if (i + 1 < actions.size()) {
      const Action& next = actions[i + 1];
      const bool header = next.kind == Action::Kind::forward && next.micro == 0;
      if (s.act_shape && s.receives(next) && !header) s.post(next);  // not when handed here
    }
    if (batches.at && !weight && (fwd ? a.chunk == 0 : a.chunk == v - 1))
      batches.at(a.micro, fwd ? "forward" : "backward");
    const double t0 = s.timeline ? s.timeline->now_us() : 0;
    if (fwd) {
      model.begin_forward(ids);
      Variable x;
      if (vs == 0) {
        x = model.embed(ids);
      } else {
        x = Variable(message, /*requires_grad=*/true);
        x.zero_grad();
        slot.input = x;
      }
      Variable y = model.run_layers(x, blocks.begin, blocks.end);
      if (vs == s.V - 1) {
        const autograd::RecomputeLmHead recompute(split);  // Note [Fused LM head]
        slot.output = model.head_loss(y, targets, batches.denominator);
        const double l = slot.output.value().item();
        out.sum += l;
        out.finite = out.finite && std::isfinite(l);
      } else {
        if (!s.act_shape) {
          s.act_shape = y.shape();
          s.act_dtype = y.value().dtype();
        }
        slot.output = y;
      }
    } else if (weight) {
      begin_backward(k++, backwards);
      slot.weights.run();
      end_backward();
    } else {
      begin_backward(k++, backwards);
      if (split) {
        Tensor dout = message;
        if (vs == s.V - 1) {  // the seed, as Variable::backward(loss_scale) makes it
          dout = Tensor::empty(slot.output.shape(), slot.output.value().dtype(),
                               MemCategory::activations);
          dout.fill_(batches.loss_scale);
        }
        std::vector<Variable> inputs;
        if (vs > 0) inputs.push_back(slot.input);
        autograd::backward_inputs(slot.output, dout, inputs, slot.weights);
      } else if (vs == s.V - 1) {
        slot.output.backward(batches.loss_scale);
      } else {
        slot.output.backward(message);
      }
      end_backward();
    }
    if (s.timeline)
      s.timeline->add(fwd      ? TimelineEvent::Kind::forward
                      : weight ? TimelineEvent::Kind::weight
                               : TimelineEvent::Kind::backward,
                      a.micro, a.chunk, t0, s.timeline->now_us());
    if (fwd && vs < s.V - 1) s.send(slot.output.value(), vs + 1, kActivation, a.micro);
    if (a.kind == Action::Kind::backward) {
      if (vs > 0) s.send(slot.input.grad(), vs - 1, kGradient, a.micro);
      // The micro-batch's activations of this chunk are free now (but what its W reads).
      slot.input = Variable();
      slot.output = Variable();
    }
    if (weight) slot = {};
  }
  s.finish_sends();
  wait_ms_ = s.wait_ms;
  s.data.clear();
  s.model = nullptr;
  s.batches = nullptr;
  return out;
}

void StageRunner::set_compute_dtype(DType dtype) {
  s_->compute = dtype;
}

void StageRunner::forward_only(nn::StagedModel& model, const Tensor& ids,
                               const std::function<void(const Variable&)>& head) {
  State& s = *s_;
  autograd::NoGradGuard no_grad;
  // Evaluation and generation are not steps: nothing goes on the timeline.
  Timeline* const timeline = std::exchange(s.timeline, nullptr);
  s.model = &model;
  s.act_shape.reset();
  s.posted.reset();
  s.handed.clear();
  model.begin_forward(ids);
  for (int c = 0; c < s.shape.chunks; ++c) {
    const int vs = s.virtual_stage(c);
    const BlockRange& blocks = s.partition[static_cast<size_t>(vs)];
    Variable x = vs == 0 ? model.embed(ids) : Variable(s.receive({Action::Kind::forward, 0, c}));
    Variable y = model.run_layers(x, blocks.begin, blocks.end);
    if (vs == s.V - 1) {
      head(y);
    } else {
      s.send(y.value(), vs + 1, kActivation, 0);
      s.finish_sends();
    }
  }
  s.model = nullptr;
  s.timeline = timeline;
}

}  // namespace braid::parallel::pipeline
