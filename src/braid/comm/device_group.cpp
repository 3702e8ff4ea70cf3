#include "braid/comm/device_group.h"

#include <map>
#include <mutex>
#include <utility>

namespace braid::comm {

namespace {

struct Registered {
  std::string name;
  DeviceGroupMaker maker;
};

// Function-local: makers register at static initialisation, in any order with this file's.
std::map<DeviceType, Registered>& registry(std::unique_lock<std::mutex>& lock) {
  static std::mutex mu;
  static std::map<DeviceType, Registered> makers;
  lock = std::unique_lock(mu);
  return makers;
}

}  // namespace

void register_device_group(DeviceType type, std::string name, DeviceGroupMaker maker) {
  std::unique_lock<std::mutex> lock;
  auto& makers = registry(lock);
  if (!maker) {
    makers.erase(type);
    return;
  }
  makers[type] = {std::move(name), std::move(maker)};
}

std::string device_group_backend(DeviceType type) {
  std::unique_lock<std::mutex> lock;
  const auto& makers = registry(lock);
  const auto it = makers.find(type);
  return it == makers.end() ? std::string() : it->second.name;
}

std::shared_ptr<ProcessGroup> make_device_group(ProcessGroup& bootstrap, Device device,
                                                ProcessGroupOptions options) {
  DeviceGroupMaker maker;
  {
    std::unique_lock<std::mutex> lock;
    const auto& makers = registry(lock);
    const auto it = makers.find(device.type);
    if (it == makers.end()) return nullptr;
    maker = it->second.maker;
  }
  auto group = maker(bootstrap, device, std::move(options));
  if (group) group->set_memory_tracker(bootstrap.memory_tracker());  // Note [Group memory]
  return group;
}

}  // namespace braid::comm
