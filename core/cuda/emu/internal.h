// Shared state of the CUDA emulator's host side (runtime.cc, streams.cc, scheduler.cc, blas_*.cc);
// see emu.h.
#ifndef MT_CORE_CUDA_EMU_INTERNAL_H_
#define MT_CORE_CUDA_EMU_INTERNAL_H_

#include <cuda_runtime.h>

#include <cstddef>

namespace mt {
namespace cuda_emu {

// Records the emulated cudaGetLastError() value of the calling thread (sticky until read).
void SetLastError(cudaError_t error);

// cudaFuncAttributeMaxDynamicSharedMemorySize per kernel (default: 48 KiB).
void SetMaxDynamicShared(const void* kernel, int bytes);
int MaxDynamicShared(const void* kernel);
constexpr int kDefaultDynamicShared = 48 * 1024;
constexpr int kMaxDynamicSharedOptIn = 227 * 1024;  // H100/H200: 232448 bytes per block.

// Device memory is inaccessible to host code except while a DeviceAccess is alive (kernels,
// copies, cuBLAS calls), so host code that dereferences a device pointer faults at once instead
// of passing here and failing on a GPU. With memory protection keys (x86 PKU), the allocations
// carry one key and a DeviceAccess opens it for the calling thread only (a register write);
// without them (or with MT_CUDA_EMU_PROTECT=mprotect), the allocations are PROT_NONE and each one
// is opened by a SIGSEGV handler on its first touch inside a DeviceAccess and closed again when the
// last DeviceAccess ends (runtime.cc OnSegv). MT_CUDA_EMU_PROTECT=0 turns the protection off.
// Nestable.
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;

 private:
  int saved_rights_ = -1;  // the thread's rights for the key before (PKU only)
};

// Whether [p, p + bytes) lies inside one live cudaMalloc allocation (bytes may be 0: p may then
// also be the allocation's end).
bool IsDeviceRange(const void* p, size_t bytes);

// Prints "CUDA emulator: <message>" to stderr and aborts: a kernel or call did something that
// is undefined or would hang on a GPU.
[[noreturn]] void Fail(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace cuda_emu
}  // namespace mt

#endif  // MT_CORE_CUDA_EMU_INTERNAL_H_
