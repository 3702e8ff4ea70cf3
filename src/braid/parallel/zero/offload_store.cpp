#include "braid/parallel/zero/offload_store.h"

#include <algorithm>
#include <map>

#include "braid/core/error.h"
#include "braid/core/memory_tracker.h"
#include "braid/kernels/ops.h"

namespace braid::parallel {

namespace {
// f32 elements rounded up to whole 4096-byte blocks (transfers are made of them).
int64_t rounded(int64_t n) {
  return (n + 1023) / 1024 * 1024;
}

// Where a page's step runs (Note [Offload on a device]): with its master weights.
Device step_device(const OffloadPage& p) {
  return p.master.defined() ? p.master.device() : Device::cpu();
}

// A copy of t on the step's device, or undefined where the step runs on the host (or t is).
Tensor device_copy(Device device, const Tensor& t) {
  return !t.defined() || device.is_cpu() ? Tensor() : t.to(device);
}

bool g_deferral = true;  // set_deferred_step_for_testing
}  // namespace

void set_deferred_step_for_testing(bool on) {
  g_deferral = on;
}

OffloadedStateStore::OffloadedStateStore(std::shared_ptr<OffloadFile> file,
                                         std::vector<OffloadPage> pages,
                                         std::vector<SlicePlace> places, const float* grad_scale,
                                         std::function<void(int)> page_done,
                                         std::function<void(DeferredPages*)> link)
    : file_(std::move(file)),
      pages_(std::move(pages)),
      places_(std::move(places)),
      grad_scale_(grad_scale),
      page_done_(std::move(page_done)),
      link_(std::move(link)),
      pending_(pages_.size(), false) {
  if (link_) link_(this);
}

OffloadedStateStore::~OffloadedStateStore() {
  if (link_) link_(nullptr);  // a step still pending is dropped with the state
  try {
    reap(true);
    for (Loaded& l : loaded_)
      for (auto& t : l.io) t->wait();
  } catch (...) {
  }
}

void OffloadedStateStore::attach(const std::vector<const optim::ParamSlice*>& slices,
                                 int num_states) {
  num_states_ = num_states;
  num_slices_ = slices.size();
  std::map<std::pair<std::string, int64_t>, const SlicePlace*> where;
  for (const SlicePlace& p : places_) where[{p.name, p.offset}] = &p;
  page_of_.assign(slices.size(), 0);
  at_.assign(slices.size(), 0);
  numel_.assign(slices.size(), 0);
  trainable_.assign(pages_.size(), 0);
  for (size_t i = 0; i < slices.size(); ++i) {
    const optim::ParamSlice& s = *slices[i];
    auto it = where.find({s.name(), s.shard.offset});
    BRAID_CHECK(it != where.end(), "offload: optimizer slice '", s.name(), "' at element ",
                s.shard.offset, " is not in any offloaded page");
    page_of_[i] = it->second->page;
    at_[i] = it->second->at;
    numel_[i] = s.shard.numel;
    if (s.trainable()) ++trainable_[static_cast<size_t>(page_of_[i])];
  }
  order_ = StateStore::step_order();
  std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) {
    return page_of_[a] != page_of_[b] ? page_of_[a] < page_of_[b] : at_[a] < at_[b];
  });
  slices_of_.assign(pages_.size(), {});
  for (size_t i : order_) {
    const int p = page_of_[i];
    slices_of_[static_cast<size_t>(p)].push_back(i);
    if (trainable_[static_cast<size_t>(p)] > 0 && (page_order_.empty() || page_order_.back() != p))
      page_order_.push_back(p);
  }
  state_region_.assign(pages_.size(), -1);
  if (num_states_ > 0)
    for (size_t p = 0; p < pages_.size(); ++p)
      state_region_[p] = file_->add_region(num_states_ * rounded(pages_[p].piece) * 4);
  file_->reserve();  // a full disk fails here, at start (zeros until written: zero state)
}

OffloadedStateStore::Loaded* OffloadedStateStore::find(int page) {
  for (Loaded& l : loaded_)
    if (l.page == page) return &l;
  return nullptr;
}

void OffloadedStateStore::load(int page) {
  if (find(page)) return;
  // Note [Offload pages]: at most one page is being written back while two are read or in use.
  while (writing_.size() > 1) {
    for (auto& t : writing_.front().io) t->wait();
    writing_.pop_front();
  }
  const OffloadPage& p = pages_[static_cast<size_t>(page)];
  const int64_t n = rounded(p.piece);
  Loaded l;
  l.page = page;
  l.remaining = trainable_[static_cast<size_t>(page)];
  if (num_states_ > 0) {
    l.state = io_buffer(num_states_ * n, DType::f32, MemCategory::optimizer_state);
    l.io.push_back(file_->read(state_region_[static_cast<size_t>(page)], l.state));
  }
  if (p.param_region >= 0) {
    l.params = io_buffer(n, DType::f32, MemCategory::parameters);
    l.io.push_back(file_->read(p.param_region, l.params));
  }
  if (p.grad_region >= 0) {
    l.grads = io_buffer(p.piece, DType::f32, MemCategory::gradients);
    l.io.push_back(file_->read(p.grad_region, l.grads));
  }
  loaded_.push_back(std::move(l));
}

void OffloadedStateStore::mark_pending() {
  scale_ = *grad_scale_;
  for (int p : page_order_) pending_[static_cast<size_t>(p)] = true;
}

void OffloadedStateStore::begin_step() {
  reap(false);
  mark_pending();
  for (size_t k = 0; k < page_order_.size() && k < 2; ++k) load(page_order_[k]);
}

// Note [Deferred step]: f32 masters in the file that forward gathers from directly.
bool OffloadedStateStore::deferrable(int page) const {
  const OffloadPage& p = pages_[static_cast<size_t>(page)];
  return g_deferral && p.param_region >= 0 && !p.compute_copy.defined() && !p.master.defined();
}

bool OffloadedStateStore::defer_step() {
  if (!updater_ || !link_ ||
      std::none_of(page_order_.begin(), page_order_.end(), [&](int p) { return deferrable(p); }))
    return false;
  reap(false);
  mark_pending();
  for (int p : page_order_)  // pages with masters in memory: now, as a step would
    if (!deferrable(p)) run(p);
  return true;
}

Tensor OffloadedStateStore::run(int page) {
  if (!pending_.at(static_cast<size_t>(page))) return Tensor();
  // The last page's write-back had its unit's forward to finish in: forward holds two pages (this
  // one and the next, read ahead) and its gathered units, whatever the disk's timing.
  reap(true);
  for (size_t i : slices_of_[static_cast<size_t>(page)]) updater_(i);
  BRAID_CHECK(!pending_[static_cast<size_t>(page)], "offload: page ", page,
              " was not updated by its slices");
  return std::move(updated_params_);
}

void OffloadedStateStore::flush() {
  for (int p : page_order_)
    if (pending_[static_cast<size_t>(p)]) run(p);
}

optim::SliceSlot OffloadedStateStore::acquire(size_t i) {
  const int page = page_of_.at(i);
  load(page);
  Loaded& l = *find(page);
  if (!l.ready) {
    for (auto& t : l.io) t->wait();
    l.io.clear();
    if (l.grads.defined() && scale_ != 1.0f) kernels::scale(l.grads, scale_);
    const Device device = step_device(pages_[static_cast<size_t>(page)]);
    l.device_state = device_copy(device, l.state);
    l.device_grads = device_copy(device, l.grads);
    l.ready = true;
  }
  // Read the next page while this one is updated (Note [Offload pages]): the next one the step
  // has still to update.
  auto next = std::find(page_order_.begin(), page_order_.end(), page);
  if (next != page_order_.end()) {
    next = std::find_if(next + 1, page_order_.end(),
                        [&](int p) { return pending_[static_cast<size_t>(p)]; });
    if (next != page_order_.end()) load(*next);
  }
  Loaded& cur = *find(page);  // load() may have moved elements of the deque
  const OffloadPage& p = pages_[static_cast<size_t>(page)];
  const int64_t at = at_[i], n = numel_[i], stride = rounded(p.piece);
  const Tensor& state = cur.device_state.defined() ? cur.device_state : cur.state;
  const Tensor& grads = cur.device_grads.defined() ? cur.device_grads : cur.grads;
  optim::SliceSlot slot;
  slot.param = p.param_region >= 0 ? cur.params.flat_range(at, n) : p.master.flat_range(at, n);
  for (int k = 0; k < num_states_; ++k) slot.state.push_back(state.flat_range(k * stride + at, n));
  if (grads.defined()) slot.grad = grads.flat_range(at, n);
  return slot;
}

void OffloadedStateStore::release(size_t i) {
  const int page = page_of_.at(i);
  for (auto it = loaded_.begin(); it != loaded_.end(); ++it) {
    if (it->page != page || --it->remaining > 0) continue;
    Loaded l = std::move(*it);
    loaded_.erase(it);
    pending_[static_cast<size_t>(page)] = false;
    updated_params_ = l.params;  // Note [Deferred step]
    refresh_compute_copy(l.page, l.params);
    if (page_done_) page_done_(l.page);
    write_back(l);
    return;
  }
}

// Note [Offloaded compute copy]: the page's master weights were just updated (or loaded).
void OffloadedStateStore::refresh_compute_copy(int page, const Tensor& params) {
  const OffloadPage& p = pages_[static_cast<size_t>(page)];
  if (!p.compute_copy.defined() || !params.defined()) return;
  Tensor copy = p.compute_copy;  // a handle on the unit's buffer
  kernels::cast(copy, params.flat_range(0, p.piece));
}

void OffloadedStateStore::write_back(Loaded& l) {
  const OffloadPage& p = pages_[static_cast<size_t>(l.page)];
  l.grads = Tensor();  // read only
  l.device_grads = Tensor();
  if (l.device_state.defined()) l.state.copy_(l.device_state);  // waits for the step's kernels
  l.device_state = Tensor();
  if (num_states_ > 0)
    l.io.push_back(file_->write(state_region_[static_cast<size_t>(l.page)], l.state));
  if (p.param_region >= 0) l.io.push_back(file_->write(p.param_region, l.params));
  writing_.push_back(std::move(l));
  reap(false);
}

void OffloadedStateStore::reap(bool wait_all) {
  while (!writing_.empty()) {
    Loaded& l = writing_.front();
    const bool done = std::all_of(l.io.begin(), l.io.end(), [](auto& t) { return t->done(); });
    if (!wait_all && !done) return;
    for (auto& t : l.io) t->wait();  // rethrows a failed write
    writing_.pop_front();
  }
}

void OffloadedStateStore::end_step() {
  updated_params_ = Tensor();
  reap(true);
  for (Loaded& l : loaded_)  // read ahead but not needed (should not happen)
    for (auto& t : l.io) t->wait();
  loaded_.clear();
}

std::vector<Tensor> OffloadedStateStore::resident_state(size_t) {
  BRAID_THROW("the optimizer state is offloaded to ", file_->path().string(),
              "; reading it back whole (for a checkpoint) is not supported yet");
}

void OffloadedStateStore::visit(const std::function<void(size_t, optim::SliceSlot&)>& fn,
                                bool write) {
  flush();     // a deferred step's pages first (Note [Deferred step])
  end_step();  // nothing of a step may still be in flight
  std::vector<std::vector<size_t>> slices_of(pages_.size());
  for (size_t i = 0; i < page_of_.size(); ++i)
    slices_of[static_cast<size_t>(page_of_[i])].push_back(i);
  for (size_t p = 0; p < pages_.size(); ++p) {
    if (slices_of[p].empty()) continue;
    const OffloadPage& page = pages_[p];
    const int64_t stride = rounded(page.piece);
    Tensor state, params;
    if (num_states_ > 0) {
      state = io_buffer(num_states_ * stride, DType::f32, MemCategory::optimizer_state);
      file_->read(state_region_[p], state)->wait();
    }
    if (page.param_region >= 0) {
      params = io_buffer(stride, DType::f32, MemCategory::parameters);
      file_->read(page.param_region, params)->wait();
    }
    Tensor device_state = device_copy(step_device(page), state);
    const Tensor& step_state = device_state.defined() ? device_state : state;
    for (size_t i : slices_of[p]) {
      const int64_t at = at_[i], n = numel_[i];
      optim::SliceSlot slot;
      slot.param = params.defined() ? params.flat_range(at, n) : page.master.flat_range(at, n);
      for (int k = 0; k < num_states_; ++k)
        slot.state.push_back(step_state.flat_range(k * stride + at, n));
      fn(i, slot);
    }
    if (!write) continue;
    refresh_compute_copy(static_cast<int>(p), params);
    if (device_state.defined()) state.copy_(device_state);
    if (state.defined()) file_->write(state_region_[p], state)->wait();
    if (params.defined()) file_->write(page.param_region, params)->wait();
  }
}

std::string OffloadedStateStore::describe() const {
  int64_t state = 0, params = 0, grads = 0;
  for (size_t p = 0; p < pages_.size(); ++p) {
    if (state_region_[p] >= 0) state += file_->region_bytes(state_region_[p]);
    if (pages_[p].param_region >= 0) params += file_->region_bytes(pages_[p].param_region);
    if (pages_[p].grad_region >= 0) grads += file_->region_bytes(pages_[p].grad_region);
  }
  return "offloaded to " + file_->path().string() + (file_->is_direct() ? " (direct I/O)" : "") +
         ": optimizer state " + format_bytes(state) + ", parameters " + format_bytes(params) +
         ", gradients " + format_bytes(grads);
}

}  // namespace braid::parallel
