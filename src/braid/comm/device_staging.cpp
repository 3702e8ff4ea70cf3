// Note [Device staging] (process_group.h): operations on tensors away from the memory the
// backend reads and writes (device tensors for a host backend, host tensors for a device one).
#include <algorithm>

#include "braid/comm/process_group.h"

namespace braid::comm {

namespace {

// Whether t must be staged for a backend at `home`: a device tensor for a host backend, a host
// tensor for a device backend (a tensor on another device is the backend's to refuse).
bool away(const Tensor& t, Device home) {
  return t.defined() && t.device().is_cpu() != home.is_cpu();
}

// Element offset of b's first element from a's, when both view one storage.
int64_t element_offset(const Tensor& a, const Tensor& b) {
  const auto* pa = static_cast<const char*>(a.device_data());
  const auto* pb = static_cast<const char*>(b.device_data());
  return (pb - pa) / static_cast<std::ptrdiff_t>(dtype_size(a.dtype()));
}

bool overlap(const Tensor& a, const Tensor& b) {
  if (!a.shares_storage(b) || a.numel() == 0 || b.numel() == 0) return false;
  const int64_t d = element_offset(a, b);
  return d < a.numel() && -d < b.numel();
}

}  // namespace

bool ProcessGroup::staged(const CollectiveOp& op) const {
  // split's (color, key) exchange is the backends' own, on the host.
  const Device home = home_device();
  return op.type != OpType::split && (away(op.in, home) || away(op.out, home));
}

Tensor ProcessGroup::stage_collective(CollectiveOp& op) {
  const Tensor in = op.in, out = op.out;
  const Device home = home_device();
  const bool in_away = away(in, home), out_away = away(out, home);
  const DType dtype = in_away ? in.dtype() : out.dtype();
  // The checks of the public calls let views overlap only as the same view or one as a chunk
  // of the other: then one range at home holds both, at the same distance.
  const bool shared = in_away && out_away && overlap(in, out);
  const int64_t need = shared ? std::max(in.numel(), out.numel())
                              : (in_away ? in.numel() : 0) + (out_away ? out.numel() : 0);
  const auto index = static_cast<size_t>(dtype);
  if (staging_.size() <= index) staging_.resize(index + 1);
  Tensor& buffer = staging_[index];
  if (!buffer.defined() || buffer.numel() < need) {
    const auto held = static_cast<int64_t>(buffer.defined() ? buffer.nbytes() : 0);
    buffer = Tensor();
    release_memory(held);
    charge_memory(need * static_cast<int64_t>(dtype_size(dtype)));  // OutOfMemory: nothing held
    buffer = Tensor::empty(Shape{need}, dtype, MemCategory::communication, nullptr, home);
  }
  Tensor home_in = in, home_out = out;
  if (shared) {
    const int64_t d = element_offset(in, out);  // out's place in in (d >= 0) or in's in out
    const int64_t base = std::max<int64_t>(0, -d);
    home_in = buffer.flat_range(base, in.numel());
    home_out = buffer.flat_range(base + d, out.numel());
  } else {
    if (in_away) home_in = buffer.flat_range(0, in.numel());
    if (out_away) home_out = buffer.flat_range(in_away ? in.numel() : 0, out.numel());
  }
  if (in_away) home_in.copy_(in);  // waits for the device's queued work, then copies
  op.in = home_in.view(in.shape());
  op.out = home_out.view(out.shape());
  return out_away ? out : Tensor();
}

void ProcessGroup::start_staged_p2p(CollectiveOp& op, const std::shared_ptr<Work>& work,
                                    Clock::time_point deadline) {
  const Tensor away = op.in;
  // Charged to the tracker until the last handle (the backend's) lets go.
  Tensor home = Tensor::empty(away.shape(), away.dtype(), MemCategory::communication,
                              memory_tracker(), home_device());
  op.in = op.out = home;
  if (op.type == OpType::send) {
    home.copy_(away);
    start_p2p(op, work, deadline);
    return;
  }
  auto inner = make_work(op);
  start_p2p(op, inner, deadline);
  staged_recvs_.push_back({away, home, std::move(inner), work});
}

bool ProcessGroup::poll_staged() {
  for (auto it = staged_recvs_.begin(); it != staged_recvs_.end();) {
    if (!it->inner->is_completed()) {
      ++it;
      continue;
    }
    try {
      it->inner->wait();  // rethrows the backend's failure
      it->away.copy_(it->home);
      it->outer->mark_done();
    } catch (const std::exception& e) {
      it->outer->mark_failed(std::string(e.what()));
    }
    it = staged_recvs_.erase(it);
  }
  return !staged_recvs_.empty();
}

void ProcessGroup::fail_staged(const std::string& why) {
  poll_staged();  // the backend has failed its recvs: pass that on
  for (StagedRecv& r : staged_recvs_)
    r.outer->mark_failed(r.outer->description() + " failed: " + why);
  staged_recvs_.clear();
}

}  // namespace braid::comm
