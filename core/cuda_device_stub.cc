// CPU-only build: there is no CUDA device.
#include "core/cuda_device.h"

namespace mt {
namespace cuda {

namespace {
absl::Status NoCuda() {
  return absl::UnimplementedError(
      "this binary was built without CUDA; rebuild on a machine with the CUDA toolkit "
      "(and without --config=cpu_only)");
}
}  // namespace

bool BuiltWithCuda() { return false; }
int DeviceCount() { return 0; }
std::string Describe() { return "no CUDA device: built without CUDA"; }
absl::StatusOr<void*> Malloc(int, size_t) { return NoCuda(); }
void Free(int, void*) {}
absl::Status Memcpy(void*, const void*, size_t, CopyKind) { return NoCuda(); }
absl::Status Memcpy2D(void*, size_t, const void*, size_t, size_t, size_t, CopyKind) {
  return NoCuda();
}
absl::Status Synchronize(int) { return NoCuda(); }
absl::Status Memset(int, void*, int, size_t) { return NoCuda(); }
absl::StatusOr<size_t> MemoryInUse(int) { return NoCuda(); }

}  // namespace cuda
}  // namespace mt
