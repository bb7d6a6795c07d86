// The CUDA runtime as the rest of the project sees it: plain C++ with Status errors, no CUDA
// headers. In CPU-only builds every call returns Unimplemented (or 0 devices), so code above core/
// never needs #ifdefs.
#ifndef MT_CORE_CUDA_DEVICE_H_
#define MT_CORE_CUDA_DEVICE_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mt {
namespace cuda {

// True when this binary was built with CUDA kernels.
bool BuiltWithCuda();
// Number of usable CUDA devices; 0 when none is present, the driver is missing, or the build is
// CPU-only.
int DeviceCount();
// "no CUDA device: <reason>" or the device names; for skip messages and logs.
std::string Describe();

absl::StatusOr<void*> Malloc(int device, size_t nbytes);
void Free(int device, void* ptr);

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
// Synchronous copy on the default stream.
absl::Status Memcpy(void* dst, const void* src, size_t nbytes, CopyKind kind);
// Synchronous strided copy of `height` rows of `width` bytes: row i goes from src + i * spitch to
// dst + i * dpitch (cudaMemcpy2D). Used to split or assemble a tensor along its last dimension.
absl::Status Memcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                      size_t height, CopyKind kind);
absl::Status Synchronize(int device);
// Sets nbytes of device memory at ptr to the byte `value` (cudaMemset, default stream).
absl::Status Memset(int device, void* ptr, int value, size_t nbytes);
// Bytes of the device's memory in use by every process and context (total - free, as
// cudaMemGetInfo reports them).
absl::StatusOr<size_t> MemoryInUse(int device);

}  // namespace cuda
}  // namespace mt

#endif  // MT_CORE_CUDA_DEVICE_H_
