// CPU-only build of DeviceContext: there is no device to hold resources for.
#include <utility>

#include "absl/status/status.h"
#include "core/cuda/device_context.h"

namespace mt {
namespace cuda {
namespace internal {
struct DeviceContextState {};
}  // namespace internal

DeviceContext::DeviceContext(int device, std::unique_ptr<internal::DeviceContextState> state)
    : device_(device), state_(std::move(state)) {}

DeviceContext::~DeviceContext() = default;

absl::StatusOr<std::unique_ptr<DeviceContext>> DeviceContext::Create(int, const Options&) {
  return absl::UnimplementedError(
      "DeviceContext: this binary was built without CUDA; rebuild on a machine with the CUDA "
      "toolkit (and without --config=cpu_only)");
}

size_t DeviceContext::gemm_plans() const { return 0; }
size_t DeviceContext::scratch_bytes() const { return 0; }

}  // namespace cuda
}  // namespace mt
