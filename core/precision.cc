#include "core/precision.h"

namespace mt {

absl::StatusOr<DType> PrecisionFlags::Resolve(DeviceType device) const {
  if (fp16 + bf16 + fp32 > 1) {
    return absl::InvalidArgumentError(
        "--fp16, --bf16 and --fp32 are exclusive; pick one (default: f32 on the CPU, bf16 on "
        "CUDA)");
  }
  if (fp16) return DType::kF16;
  if (bf16) return DType::kBF16;
  if (fp32) return DType::kF32;
  return device == DeviceType::kCuda ? DType::kBF16 : DType::kF32;
}

}  // namespace mt
