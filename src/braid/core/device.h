// Where a tensor's bytes live. CPU now; CUDA is a later backend behind the same seam.
#pragma once

#include <string>

namespace braid {

enum class DeviceType { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool operator==(const Device&) const = default;
  std::string str() const;
};

}  // namespace braid
