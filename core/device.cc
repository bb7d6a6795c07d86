#include "core/device.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace mt {

absl::string_view DeviceTypeName(DeviceType type) {
  return type == DeviceType::kCuda ? "cuda" : "cpu";
}

std::string Device::ToString() const {
  return is_cpu() ? std::string("cpu") : absl::StrCat("cuda:", index);
}

absl::StatusOr<Device> ParseDevice(absl::string_view text) {
  if (text == "cpu") return Device::Cpu();
  if (text == "cuda") return Device::Cuda(0);
  int index = 0;
  if (absl::ConsumePrefix(&text, "cuda:") && absl::SimpleAtoi(text, &index) && index >= 0) {
    return Device::Cuda(index);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", text, "'; expected cpu, cuda or cuda:N"));
}

}  // namespace mt
