// The names of the enum flags (core/fields.h) the drivers and experiments share: where a run goes
// (--device), over which communicator (--comm_backend), in which compute dtype.
#ifndef MT_JOBS_PRETRAIN_RUN_SETTINGS_H_
#define MT_JOBS_PRETRAIN_RUN_SETTINGS_H_

#include <utility>

#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/fields.h"

namespace mt {
namespace jobs {

enum class DeviceKind { kCpu, kCuda };
inline constexpr std::pair<absl::string_view, DeviceKind> kDeviceNames[] = {
    {"cpu", DeviceKind::kCpu}, {"cuda", DeviceKind::kCuda}};
// "cpu" or "cuda": the --device value of a subprocess.
inline absl::string_view DeviceName(DeviceKind device) {
  return EnumName<DeviceKind>(device, kDeviceNames);
}
enum class CommBackend { kAuto, kMpi, kNccl };
inline constexpr std::pair<absl::string_view, CommBackend> kCommBackendNames[] = {
    {"auto", CommBackend::kAuto}, {"mpi", CommBackend::kMpi}, {"nccl", CommBackend::kNccl}};
inline constexpr std::pair<absl::string_view, DType> kComputeDTypeNames[] = {
    {"f32", DType::kF32}, {"bf16", DType::kBF16}, {"f16", DType::kF16}};

}  // namespace jobs
}  // namespace mt

#endif  // MT_JOBS_PRETRAIN_RUN_SETTINGS_H_
