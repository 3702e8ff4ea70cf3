#include "braid/nn/param_layout.h"

#include <algorithm>
#include <map>

#include "braid/core/error.h"

namespace braid::nn {

namespace {
int64_t round_up(int64_t n, int64_t m) {
  return (n + m - 1) / m * m;
}
}  // namespace

ParamLayout::ParamLayout(Module& root, const std::vector<UnitDecl>& decls, int64_t pad_multiple,
                         bool subset)
    : pad_multiple_(pad_multiple) {
  BRAID_CHECK(pad_multiple > 0 && pad_multiple % kAlign == 0, "ParamLayout: pad_multiple ",
              pad_multiple, " must be a positive multiple of ", kAlign);
  // Which unit owns each parameter slot.
  std::map<const Parameter*, int> owner;
  for (size_t u = 0; u < decls.size(); ++u) {
    for (Module* m : decls[u].owners) {
      BRAID_CHECK(m != nullptr, "ParamLayout: unit '", decls[u].name, "' has a null owner");
      for (auto& [name, p] : m->named_parameter_slots()) {
        auto [it, inserted] = owner.emplace(p, static_cast<int>(u));
        BRAID_CHECK(inserted, "ParamLayout: a parameter ('", name, "' under unit '", decls[u].name,
                    "') belongs to units '", decls[static_cast<size_t>(it->second)].name, "' and '",
                    decls[u].name, "'");
      }
    }
  }
  units_.resize(decls.size());
  for (size_t u = 0; u < decls.size(); ++u) {
    units_[u].name = decls[u].name;
    units_[u].owners = decls[u].owners;
    units_[u].users = decls[u].owners;
    for (Module* b : decls[u].borrowers) units_[u].users.push_back(b);
  }
  int current = 0;
  int index = 0;  // position in root's declaration order
  for (auto& [name, p] : root.named_parameter_slots()) {
    auto it = owner.find(p);
    ++index;
    if (it == owner.end() && subset) continue;
    BRAID_CHECK(it != owner.end(), "ParamLayout: parameter '", name, "' belongs to no unit");
    const int u = it->second;
    BRAID_CHECK(u >= current, "ParamLayout: parameter '", name, "' of unit '", units_[u].name,
                "' comes after parameters of unit '", units_[current].name,
                "' (a unit's parameters must be contiguous in declaration order)");
    current = u;
    UnitInfo& unit = units_[static_cast<size_t>(u)];
    const int64_t n = p->shape.numel();
    params_.push_back({name, p, index - 1, u, unit.numel, n});
    unit.params.push_back(static_cast<int>(params_.size()) - 1);
    unit.numel += n;
  }
  BRAID_CHECK(params_.size() == owner.size(), "ParamLayout: ", owner.size() - params_.size(),
              " parameter(s) of the units are not under the root module");
  *this = with_padding(pad_multiple);
}

ParamLayout ParamLayout::with_padding(int64_t pad_multiple) const {
  BRAID_CHECK(pad_multiple > 0 && pad_multiple % kAlign == 0, "ParamLayout: pad_multiple ",
              pad_multiple, " must be a positive multiple of ", kAlign);
  ParamLayout out = *this;
  out.pad_multiple_ = pad_multiple;
  out.total_ = 0;
  for (UnitInfo& u : out.units_) {
    u.padded = round_up(u.numel, pad_multiple);
    u.offset = out.total_;
    out.total_ = round_up(out.total_ + u.padded, kAlign);
  }
  return out;
}

int64_t ParamLayout::num_parameters() const {
  int64_t n = 0;
  for (const UnitInfo& u : units_) n += u.numel;
  return n;
}

const ParamInfo& ParamLayout::param(std::string_view name) const {
  for (const ParamInfo& p : params_)
    if (p.name == name) return p;
  BRAID_THROW("ParamLayout: no parameter named '", name, "' (", params_.size(), " parameters)");
}

void ParamLayout::init_unit(int u, Tensor& unit_params, uint64_t seed) const {
  const int64_t n = units_.at(static_cast<size_t>(u)).numel;
  init_unit_range(u, 0, n, unit_params.flat_range(0, n), seed);
}

void ParamLayout::for_each_part(
    int u, int64_t begin, int64_t end,
    const std::function<void(const ParamInfo*, int64_t, int64_t)>& fn) const {
  int64_t at = begin;
  for (int i : units_.at(static_cast<size_t>(u)).params) {  // in unit order
    const ParamInfo& p = params_[static_cast<size_t>(i)];
    const int64_t a = std::max(at, p.unit_offset), b = std::min(end, p.unit_offset + p.numel);
    if (a >= b) continue;
    if (at < a) fn(nullptr, at, a);
    fn(&p, a, b);
    at = b;
  }
  if (at < end) fn(nullptr, at, end);
}

void ParamLayout::init_unit_range(int u, int64_t begin, int64_t end, Tensor part,
                                  uint64_t seed) const {
  const UnitInfo& unit = units_.at(static_cast<size_t>(u));
  BRAID_CHECK(
      part.dtype() == DType::f32 && part.numel() == end - begin && begin >= 0 && begin <= end,
      "ParamLayout::init_unit_range: unit '", unit.name, "' elements [", begin, ", ", end,
      ") need an f32 buffer of as many, got ", dtype_name(part.dtype()), " ", part.numel());
  if (!part.device().is_cpu()) {  // drawn on the host, as on the CPU, then copied over
    Tensor host = part.to(Device::cpu());
    init_unit_range(u, begin, end, host, seed);
    part.copy_(host);
    return;
  }
  const Rng base(seed);
  float* data = part.data<float>();
  for_each_part(u, begin, end, [&](const ParamInfo* p, int64_t from, int64_t to) {
    float* dst = data + (from - begin);
    if (!p) {
      std::fill(dst, dst + (to - from), 0.0f);
      return;
    }
    // Elements [a, b) of the parameter.
    const int64_t a = from - p->unit_offset, b = to - p->unit_offset;
    const ParamInit init = p->param->init;
    if (init.std <= 0) {
      std::fill(dst, dst + (b - a), init.value);
      return;
    }
    Rng rng = base.fork(static_cast<uint64_t>(p->index));
    if (!p->param->tp.is_split()) {
      rng.discard(2 * static_cast<uint64_t>(a));  // normal() draws two numbers
      for (int64_t j = a; j < b; ++j) dst[j - a] = init.std * rng.normal();
      return;
    }
    // A tensor-parallel slice draws the whole parameter's stream and keeps its part, so every
    // layout initialises the same model (Note [Tensor-parallel layout]).
    Tensor full = Tensor::empty(p->param->full_shape, DType::f32, MemCategory::other,
                                MemoryScope::current_tracker(), Device::cpu());
    float* out = full.data<float>();
    for (int64_t j = 0; j < full.numel(); ++j) out[j] = init.std * rng.normal();
    Tensor local = Tensor::empty(p->param->shape, DType::f32, MemCategory::other,
                                 MemoryScope::current_tracker(), Device::cpu());
    take_slice(full, local, p->param->tp);
    std::copy(local.data<float>() + a, local.data<float>() + b, dst);
  });
}

void ParamLayout::bind_unit(int u, const Tensor& unit_params, const Tensor& unit_grads) const {
  const UnitInfo& unit = units_.at(static_cast<size_t>(u));
  BRAID_CHECK(unit_params.numel() >= unit.numel, "ParamLayout::bind_unit: unit '", unit.name,
              "' has ", unit.numel, " elements but the buffer ", unit_params.numel());
  BRAID_CHECK(!unit_grads.defined() || unit_grads.numel() >= unit.numel,
              "ParamLayout::bind_unit: unit '", unit.name, "' has ", unit.numel,
              " elements but the gradient buffer ", unit_grads.numel());
  for (int i : unit.params) {
    const ParamInfo& p = params_[static_cast<size_t>(i)];
    Parameter* slot = p.param;
    Tensor value = unit_params.flat_range(p.unit_offset, p.numel).view(slot->shape);
    if (!slot->var.defined()) {
      slot->var = Variable(value, slot->requires_grad, p.name);
    } else {
      slot->var.value() = value;
    }
    Tensor grad;
    if (unit_grads.defined() && slot->requires_grad)
      grad = unit_grads.flat_range(p.unit_offset, p.numel).view(slot->shape);
    slot->var.set_grad(grad);
  }
}

void ParamLayout::declare_unit(int u) const {
  for (int i : units_.at(static_cast<size_t>(u)).params) {
    const ParamInfo& p = params_[static_cast<size_t>(i)];
    Parameter* slot = p.param;
    if (!slot->var.defined()) slot->var = Variable::unbound(slot->requires_grad, p.name);
  }
  unbind_unit(u);
}

void ParamLayout::unbind_unit(int u) const {
  for (int i : units_.at(static_cast<size_t>(u)).params) {
    Parameter* slot = params_[static_cast<size_t>(i)].param;
    if (!slot->var.defined()) continue;
    slot->var.value() = Tensor();
    slot->var.set_grad(Tensor());
  }
}

}  // namespace braid::nn
