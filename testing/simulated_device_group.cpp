#include "testing/simulated_device_group.h"

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/device_group.h"
#include "braid/core/error.h"

namespace braid::testing {
namespace {

using comm::CollectiveOp;
using comm::OpType;
using comm::ProcessGroup;
using comm::ProcessGroupOptions;
using comm::Work;

std::atomic<int64_t> g_made{0};
std::atomic<int64_t> g_ops{0};

class SimulatedDeviceGroup final : public ProcessGroup {
 public:
  SimulatedDeviceGroup(std::shared_ptr<ProcessGroup> host, Device home, ProcessGroupOptions options)
      : ProcessGroup(host->rank(), host->size(), std::move(options)),
        host_(std::move(host)),
        home_(home) {
    ++g_made;
    start();
  }
  ~SimulatedDeviceGroup() override { stop(); }

  std::string backend() const override { return "simulated"; }
  Device home_device() const override { return home_; }

 protected:
  void run_collective(const CollectiveOp& op, Clock::time_point) override {
    if (op.type == OpType::split) {  // split's (color, key) exchange: the base class's, on the host
      host_->all_gather(op.out, op.in)->wait();
      return;
    }
    check(op, op.in);
    check(op, op.out);
    ++g_ops;
    switch (op.type) {
      case OpType::all_reduce:
        return host_->all_reduce(op.out, op.reduce)->wait();
      case OpType::reduce_scatter:
        return host_->reduce_scatter(op.out, op.in, op.reduce)->wait();
      case OpType::all_gather:
        return host_->all_gather(op.out, op.in)->wait();
      case OpType::broadcast:
        return host_->broadcast(op.out, op.root)->wait();
      case OpType::all_to_all:
        return host_->all_to_all(op.out, op.in)->wait();
      case OpType::barrier:
        return host_->barrier()->wait();
      default:
        throw CommError(op.describe() + ": not a collective");
    }
  }

  void start_p2p(const CollectiveOp& op, std::shared_ptr<Work> work, Clock::time_point) override {
    check(op, op.in);
    ++g_ops;
    auto inner = op.type == OpType::send ? host_->send(op.in, op.root, op.tag)
                                         : host_->recv(op.in, op.root, op.tag);
    pending_.push_back({std::move(inner), std::move(work)});
  }

  bool poll_p2p() override {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (!it->inner->is_completed()) {
        ++it;
        continue;
      }
      try {
        it->inner->wait();
        it->outer->mark_done();
      } catch (const std::exception& e) {
        it->outer->mark_failed(std::string(e.what()));
      }
      it = pending_.erase(it);
    }
    return !pending_.empty();
  }

  void fail_p2p(const std::string& why) override {
    for (auto& p : pending_) p.outer->mark_failed(prefix() + "failed: " + why);
    pending_.clear();
  }

  std::shared_ptr<ProcessGroup> make_subgroup(int color, const std::vector<int>& members, uint64_t,
                                              ProcessGroupOptions options) override {
    int index = 0;
    while (color >= 0 && members[static_cast<size_t>(index)] != rank()) ++index;
    auto host = host_->split(color, index, options.name + "/host");
    if (!host) return nullptr;
    return std::make_shared<SimulatedDeviceGroup>(std::move(host), home_, std::move(options));
  }

 private:
  struct Pending {
    std::shared_ptr<Work> inner;  // the host group's
    std::shared_ptr<Work> outer;  // the caller's
  };

  void check(const CollectiveOp& op, const Tensor& t) const {
    if (!t.defined() || t.device() == home_) return;
    throw CommError(op.describe() + ": a tensor is on " + t.device().str() +
                    "; the simulated device group works on " + home_.str());
  }

  std::shared_ptr<ProcessGroup> host_;
  Device home_;
  std::deque<Pending> pending_;  // comm thread
};

}  // namespace

void register_simulated_device_group() {
  comm::register_device_group(
      DeviceType::cuda, "simulated",
      [](ProcessGroup& bootstrap, Device device, ProcessGroupOptions options) {
        auto host = bootstrap.split(0, bootstrap.rank(), options.name + "/host");
        return std::make_shared<SimulatedDeviceGroup>(std::move(host), device, std::move(options));
      });
}

void unregister_simulated_device_group() {
  comm::register_device_group(DeviceType::cuda, "", nullptr);
}

int64_t simulated_device_groups_made() {
  return g_made;
}

int64_t simulated_device_group_ops() {
  return g_ops;
}

}  // namespace braid::testing
