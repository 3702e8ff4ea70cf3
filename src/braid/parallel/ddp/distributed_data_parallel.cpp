#include "braid/parallel/ddp/distributed_data_parallel.h"

#include <algorithm>
#include <numeric>

#include "braid/core/error.h"
#include "braid/kernels/ops.h"

namespace braid::parallel {

std::vector<DdpBucket> plan_buckets(const std::vector<int64_t>& offsets,
                                    const std::vector<int64_t>& sizes,
                                    const std::vector<bool>& trainable, int64_t bucket_elems) {
  const int n = static_cast<int>(offsets.size());
  // Walk parameters from the end of the buffer to its start (Note [DDP buckets]).
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return offsets[a] > offsets[b]; });
  std::vector<DdpBucket> buckets;
  bool open = false;
  for (int i : order) {
    if (!trainable[i]) {
      open = false;  // a frozen parameter closes the bucket: buckets never span one
      continue;
    }
    if (!open || buckets.back().size >= bucket_elems) {
      buckets.push_back({offsets[i], 0, {}});
      buckets.back().size = sizes[i];
      open = true;
    } else {
      DdpBucket& b = buckets.back();
      int64_t end = b.offset + b.size;
      b.offset = offsets[i];
      b.size = end - b.offset;  // includes alignment padding between parameters
    }
    buckets.back().params.push_back(i);
  }
  return buckets;
}

struct DistributedDataParallel::State {
  std::vector<DdpParam> params;
  Tensor flat_params;
  Tensor flat_grads;
  std::shared_ptr<comm::ProcessGroup> group;
  DdpOptions options;
  std::vector<DdpBucket> buckets;
  std::vector<int> bucket_of;  // parameter -> bucket (-1: frozen)
  std::vector<int> pending;    // per bucket: parameters whose gradient is not final
  std::vector<bool> param_ready;
  std::vector<std::shared_ptr<comm::Work>> works;
  std::vector<Tensor> staging;  // per bucket, reduce_dtype (Note [Reduce dtype])
  int next_launch = 0;
  bool sync = true;
  bool in_backward = false;
  DdpStepStats stats;

  void reset() {
    for (size_t b = 0; b < buckets.size(); ++b)
      pending[b] = static_cast<int>(buckets[b].params.size());
    std::fill(param_ready.begin(), param_ready.end(), false);
    works.assign(buckets.size(), nullptr);
    next_launch = 0;
    in_backward = false;
  }

  // Waits for every launched bucket, casts reduce-dtype sums back and resets for the next
  // backward (the end of finish_backward and reduce_accumulated).
  void wait_all();
  // Marks the trainable parameters whose gradient has not arrived in this backward as ready
  // and returns their names.
  std::vector<std::string> mark_rest_ready();

  void launch_ready(bool during_backward) {
    while (next_launch < static_cast<int>(buckets.size()) && pending[next_launch] == 0) {
      const DdpBucket& b = buckets[next_launch];
      Tensor grads = flat_grads.flat_range(b.offset, b.size);
      if (options.reduce_dtype != grads.dtype()) {
        Tensor& stage = staging[static_cast<size_t>(next_launch)];
        if (!stage.defined())
          stage = Tensor::empty(Shape{b.size}, options.reduce_dtype, MemCategory::communication);
        kernels::cast(stage, grads);
        grads = stage;
      }
      works[next_launch] = group->all_reduce(grads);
      if (during_backward) ++stats.buckets_launched_in_backward;
      stats.bytes += b.size * static_cast<int64_t>(dtype_size(grads.dtype()));
      ++next_launch;
    }
  }

  void on_grad_ready(int i) {
    if (!sync || bucket_of[i] < 0) return;
    if (!in_backward) {
      in_backward = true;
      stats = {};
    }
    BRAID_CHECK(!param_ready[i], "DDP: parameter '", params[i].param.name(),
                "' produced its gradient twice in one backward; DDP supports one backward per "
                "optimizer step (use no_sync for accumulation)");
    param_ready[i] = true;
    --pending[bucket_of[i]];
    launch_ready(true);
  }
};

DistributedDataParallel::DistributedDataParallel(std::vector<DdpParam> params, Tensor flat_params,
                                                 Tensor flat_grads,
                                                 std::shared_ptr<comm::ProcessGroup> group,
                                                 DdpOptions options)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  BRAID_CHECK(group != nullptr, "DDP needs a process group");
  BRAID_CHECK(flat_params.numel() == flat_grads.numel(), "DDP: flat parameter buffer has ",
              flat_params.numel(), " elements but the gradient buffer has ", flat_grads.numel());
  BRAID_CHECK(options.bucket_mb > 0, "DDP: bucket_mb must be positive, got ", options.bucket_mb);
  s.params = std::move(params);
  s.flat_params = flat_params;
  s.flat_grads = flat_grads;
  s.group = std::move(group);
  s.options = options;

  std::vector<int64_t> offsets, sizes;
  std::vector<bool> trainable;
  for (const DdpParam& p : s.params) {
    offsets.push_back(p.offset);
    sizes.push_back(p.param.value().numel());
    trainable.push_back(p.param.requires_grad());
    BRAID_CHECK(p.offset >= 0 && p.offset + sizes.back() <= flat_grads.numel(), "DDP: parameter '",
                p.param.name(), "' at offset ", p.offset, " with ", sizes.back(),
                " elements lies outside the flat buffer of ", flat_grads.numel(), " elements");
  }
  auto elem_bytes = static_cast<double>(dtype_size(flat_grads.dtype()));
  auto bucket_elems =
      std::max<int64_t>(1, static_cast<int64_t>(options.bucket_mb * 1048576.0 / elem_bytes));
  s.buckets = plan_buckets(offsets, sizes, trainable, bucket_elems);
  s.bucket_of.assign(s.params.size(), -1);
  for (size_t b = 0; b < s.buckets.size(); ++b)
    for (int i : s.buckets[b].params) s.bucket_of[i] = static_cast<int>(b);
  s.pending.assign(s.buckets.size(), 0);
  s.staging.resize(s.buckets.size());
  BRAID_CHECK(is_floating(options.reduce_dtype), "DDP: reduce dtype must be f32, bf16 or f16, got ",
              dtype_name(options.reduce_dtype));
  s.param_ready.assign(s.params.size(), false);
  s.reset();

  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (!s.params[i].param.requires_grad()) continue;
    s.params[i].param.register_post_accumulate_hook([weak, i](autograd::Variable&) {
      if (auto st = weak.lock()) st->on_grad_ready(static_cast<int>(i));
    });
  }
  if (options.broadcast_parameters && s.group->size() > 1)
    s.group->broadcast(s.flat_params, 0)->wait();
}

DistributedDataParallel::~DistributedDataParallel() {
  // Never leave a reduction writing into gradient memory we no longer track.
  for (auto& w : state_->works) {
    if (!w) continue;
    try {
      w->wait();
    } catch (...) {
    }
  }
}

void DistributedDataParallel::set_sync(bool sync) {
  state_->sync = sync;
}
bool DistributedDataParallel::sync() const {
  return state_->sync;
}
const std::vector<DdpBucket>& DistributedDataParallel::buckets() const {
  return state_->buckets;
}
const DdpStepStats& DistributedDataParallel::last_step_stats() const {
  return state_->stats;
}
comm::ProcessGroup& DistributedDataParallel::group() const {
  return *state_->group;
}

void DistributedDataParallel::finish_backward() {
  State& s = *state_;
  if (!s.sync) return;
  if (!s.in_backward) s.stats = {};
  const std::vector<std::string> unused = s.mark_rest_ready();
  if (!unused.empty() && !s.options.find_unused_parameters) {
    std::string names;
    for (size_t k = 0; k < unused.size() && k < 5; ++k)
      names += (k ? ", '" : "'") + unused[k] + "'";
    if (unused.size() > 5) names += " and " + std::to_string(unused.size() - 5) + " more";
    // Wait for what was launched so no reduction is left writing into the gradients.
    for (auto& w : s.works)
      if (w) w->wait();
    s.reset();
    BRAID_THROW("DDP: ", unused.size(),
                " trainable parameter(s) received no gradient in this "
                "backward: ",
                names,
                ". Freeze them (requires_grad = false) or set "
                "parallel.find_unused_parameters: true");
  }
  s.launch_ready(false);
  s.wait_all();
}

void DistributedDataParallel::reduce_accumulated() {
  State& s = *state_;
  s.sync = true;
  s.stats = {};
  s.mark_rest_ready();
  s.launch_ready(false);
  s.wait_all();
}

std::vector<std::string> DistributedDataParallel::State::mark_rest_ready() {
  std::vector<std::string> names;
  for (size_t i = 0; i < params.size(); ++i) {
    if (bucket_of[i] < 0 || param_ready[i]) continue;
    names.push_back(params[i].param.name());
    param_ready[i] = true;
    --pending[bucket_of[i]];
  }
  return names;
}

void DistributedDataParallel::State::wait_all() {
  State& s = *this;
  s.stats.buckets = static_cast<int64_t>(s.buckets.size());
  auto t0 = std::chrono::steady_clock::now();
  for (auto& w : s.works) w->wait();
  s.stats.exposed_wait_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // Note [Reduce dtype]: the reduced sums come back into the gradient buffer's dtype.
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    if (!s.staging[b].defined()) continue;
    Tensor grads = s.flat_grads.flat_range(s.buckets[b].offset, s.buckets[b].size);
    kernels::cast(grads, s.staging[b]);
  }
  s.reset();
}

}  // namespace braid::parallel
