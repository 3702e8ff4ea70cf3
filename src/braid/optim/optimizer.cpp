#include "braid/optim/optimizer.h"

#include <optional>

#include "braid/kernels/ops.h"

namespace braid::optim {
namespace {

void check_slice(const char* opt, const ParamSlice& s) {
  BRAID_CHECK(!s.grad.defined() || s.grad.numel() == s.shard.numel, opt, ": parameter '", s.name(),
              "' holds ", s.shard.numel, " elements but its gradient ", s.grad.numel());
  if (!s.param.defined()) return;  // the state store holds the master weights
  BRAID_CHECK(s.param.dtype() == DType::f32, opt, ": parameter '", s.name(),
              "' must be f32 (master weights), got ", dtype_name(s.param.dtype()));
  BRAID_CHECK(s.shard.numel == s.param.numel(), opt, ": parameter '", s.name(), "' holds ",
              s.param.numel(), " elements but its shard record says ", s.shard.numel);
}

std::unique_ptr<StateStore> or_resident(std::unique_ptr<StateStore> store) {
  return store ? std::move(store) : std::make_unique<ResidentStateStore>();
}

}  // namespace

ParamSlice ParamSlice::whole(std::string name, Tensor param, Tensor grad) {
  ShardRecord r{std::move(name), param.shape(), {}, 0, param.numel(), param.dtype()};
  ParamSlice s;
  s.shard = std::move(r);
  s.param = std::move(param);
  s.grad = std::move(grad);
  return s;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::vector<std::string> state_names)
    : groups_(std::move(groups)), state_names_(std::move(state_names)) {
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) where_.emplace_back(g, i);
}

Optimizer::~Optimizer() = default;

void Optimizer::set_state_store(std::unique_ptr<StateStore> store) {
  BRAID_CHECK(step_count_ == 0, name(), ": the state store must be set before the first step");
  std::vector<const ParamSlice*> slices;
  for (auto [g, i] : where_) slices.push_back(&groups_[g].params[i]);
  store->attach(slices, static_cast<int>(state_names_.size()));
  store->set_updater([this](size_t k) { update_slice(k); });
  store_ = std::move(store);
}

namespace {
bool own_masters(const ParamSlice& s, const SliceSlot& slot) {
  return s.param.defined() && slot.param.storage() == s.param.storage() &&
         slot.param.offset() == s.param.offset();
}
}  // namespace

// Slice k acquired from the store with its gradient (the store's first: offloaded, or a host
// copy, Note [Optimizer state on the host]) and, where the update writes the slice's own masters
// and fuses the cast, its compute copy; nullopt for a frozen slice.
std::optional<Optimizer::SliceUpdate> Optimizer::acquire_slice(size_t k) {
  auto [g, i] = where_.at(k);
  const ParamSlice& s = groups_[g].params[i];
  if (!s.trainable()) return std::nullopt;
  SliceSlot slot = store_->acquire(k);
  BRAID_CHECK(s.grad.defined() || slot.grad.defined(), name(), ": the state store gave no ",
              "gradient for '", s.name(), "'");
  const bool fused = s.compute.defined() && own_masters(s, slot) && fuses_compute_copy();
  Tensor grad = slot.grad.defined() ? slot.grad : s.grad;
  return SliceUpdate{&groups_[g], std::move(slot), std::move(grad), fused ? s.compute : Tensor()};
}

// After slice k's update: its compute copy and release (Note [Compute copy in the step]).
// Where the update writes the slice's own masters, the copy is written by the update's pass (or
// cast from them) before release, where a strategy's store may publish the slice; a store's own
// copy of the masters is written back at release.
void Optimizer::finish_slice(size_t k, const SliceUpdate& u) {
  auto [g, i] = where_.at(k);
  const ParamSlice& s = groups_[g].params[i];
  const bool own = own_masters(s, u.slot), fused = u.compute.defined();
  Tensor compute = s.compute;  // a handle on the slice's copy
  if (compute.defined() && own && !fused) kernels::cast(compute, s.param);
  store_->release(k);
  if (compute.defined() && !own) {
    BRAID_CHECK(s.param.defined(), name(), ": slice '", s.name(),
                "' names a compute copy but its masters live in the state store");
    kernels::cast(compute, s.param);
  }
}

void Optimizer::update_slice(size_t k) {
  std::optional<SliceUpdate> u = acquire_slice(k);
  if (!u) return;  // frozen
  Tensor compute = u->compute;
  update(*u->group, u->slot, u->grad, step_lr_, compute.defined() ? &compute : nullptr);
  finish_slice(k, *u);
}

void Optimizer::step(float lr) {
  store_->flush();  // a deferred step's last updates (Note [Deferred step], state_store.h)
  ++step_count_;
  step_lr_ = lr;
  if (store_->defer_step()) return;
  store_->begin_step();
  // Where the store's slots stay resident, every slice is acquired first and updated at once.
  if (!(store_->slots_stay_resident() && updates_all_at_once())) {
    for (size_t k : store_->step_order()) update_slice(k);
    store_->end_step();
    return;
  }
  std::vector<SliceUpdate> gathered;
  std::vector<size_t> gathered_k;
  for (size_t k : store_->step_order()) {
    std::optional<SliceUpdate> u = acquire_slice(k);
    if (!u) continue;  // frozen
    gathered.push_back(std::move(*u));
    gathered_k.push_back(k);
  }
  if (!gathered.empty()) {
    update_all(gathered, lr);
    for (size_t j = 0; j < gathered.size(); ++j) finish_slice(gathered_k[j], gathered[j]);
  }
  store_->end_step();
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state_tensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t k = 0; k < where_.size(); ++k) {
    auto [g, i] = where_[k];
    std::vector<Tensor> state = store_->resident_state(k);
    for (size_t j = 0; j < state.size(); ++j)
      out.emplace_back(groups_[g].params[i].name() + "." + state_names_[j], state[j]);
  }
  return out;
}

void Optimizer::visit_slices(const std::function<void(const ParamSlice&, SliceSlot&)>& fn,
                             bool write) {
  store_->visit(
      [&](size_t k, SliceSlot& slot) {
        auto [g, i] = where_.at(k);
        fn(groups_[g].params[i], slot);
      },
      write);
  if (!write) return;
  for (ParamGroup& group : groups_)  // Note [Compute copy in the step]
    for (ParamSlice& s : group.params)
      if (s.compute.defined() && s.param.defined()) kernels::cast(s.compute, s.param);
}

AdamW::AdamW(std::vector<ParamGroup> groups, float beta1, float beta2, float eps,
             std::unique_ptr<StateStore> store)
    : Optimizer(std::move(groups), {"exp_avg", "exp_avg_sq"}),
      beta1_(beta1),
      beta2_(beta2),
      eps_(eps) {
  BRAID_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1,
              "adamw: betas must be in [0, 1), got beta1 ", beta1, ", beta2 ", beta2);
  BRAID_CHECK(eps >= 0, "adamw: eps must be >= 0, got ", eps);
  for (const auto& g : groups_)
    for (const auto& s : g.params) check_slice("adamw", s);
  set_state_store(or_resident(std::move(store)));
}

void AdamW::update(const ParamGroup& group, SliceSlot& slot, const Tensor& grad, float lr,
                   Tensor* compute) {
  if (compute) {
    kernels::adamw_step(slot.param, grad, slot.state[0], slot.state[1], lr * group.lr_scale, beta1_,
                        beta2_, eps_, group.weight_decay, step_count_, *compute);
    return;
  }
  kernels::adamw_step(slot.param, grad, slot.state[0], slot.state[1], lr * group.lr_scale, beta1_,
                      beta2_, eps_, group.weight_decay, step_count_);
}

void AdamW::update_all(std::vector<SliceUpdate>& updates, float lr) {
  std::vector<kernels::AdamWSlice> slices;
  slices.reserve(updates.size());
  for (SliceUpdate& u : updates) {
    slices.push_back({&u.slot.param, &u.grad, &u.slot.state[0], &u.slot.state[1],
                      u.compute.defined() ? &u.compute : nullptr, lr * u.group->lr_scale,
                      u.group->weight_decay});
  }
  kernels::adamw_step(slices, beta1_, beta2_, eps_, step_count_);
}

SGD::SGD(std::vector<ParamGroup> groups, float momentum, bool nesterov,
         std::unique_ptr<StateStore> store)
    : Optimizer(std::move(groups), momentum > 0 ? std::vector<std::string>{"momentum_buffer"}
                                                : std::vector<std::string>{}),
      momentum_(momentum),
      nesterov_(nesterov) {
  BRAID_CHECK(momentum >= 0, "sgd: momentum must be >= 0, got ", momentum);
  BRAID_CHECK(!nesterov || momentum > 0, "sgd: nesterov needs momentum > 0");
  for (const auto& g : groups_)
    for (const auto& s : g.params) check_slice("sgd", s);
  set_state_store(or_resident(std::move(store)));
}

void SGD::update(const ParamGroup& group, SliceSlot& slot, const Tensor& grad, float lr,
                 Tensor* /*compute*/) {
  // Note [SGD first step]: torch initialises the momentum buffer to the first gradient; a
  // restored optimizer (step_count > 1 at its first update) continues from its saved buffer.
  const bool first_step = step_count_ == 1;
  Tensor none;
  Tensor& buf = momentum_ > 0 ? slot.state[0] : none;
  kernels::sgd_step(slot.param, grad, buf, lr * group.lr_scale, momentum_, group.weight_decay,
                    nesterov_, first_step);
}

}  // namespace braid::optim
