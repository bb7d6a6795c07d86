// Where a tensor's memory lives: the host, or CUDA device n.
#ifndef MT_CORE_DEVICE_H_
#define MT_CORE_DEVICE_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {

enum class DeviceType { kCpu, kCuda };
// The --device names of every binary: "cpu", "cuda" (core/fields.h enum settings).
inline constexpr std::pair<absl::string_view, DeviceType> kDeviceTypeNames[] = {
    {"cpu", DeviceType::kCpu}, {"cuda", DeviceType::kCuda}};
// "cpu" or "cuda" (the --device value of a subprocess).
absl::string_view DeviceTypeName(DeviceType type);

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;  // CUDA ordinal; always 0 for the CPU.

  static constexpr Device Cpu() { return Device{DeviceType::kCpu, 0}; }
  static constexpr Device Cuda(int index) { return Device{DeviceType::kCuda, index}; }

  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  // "cpu" or "cuda:N".
  std::string ToString() const;

  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

// Parses "cpu", "cuda" (device 0) or "cuda:N"; InvalidArgument otherwise.
absl::StatusOr<Device> ParseDevice(absl::string_view text);

}  // namespace mt

#endif  // MT_CORE_DEVICE_H_
