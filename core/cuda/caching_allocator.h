// A caching allocator for device memory: freed blocks go to per-size-class free lists and are
// handed out again without a cudaMalloc / cudaFree (each of which can cost milliseconds and, for
// cudaFree, synchronizes the device).
//
// It is an explicit object, not a process-wide allocator (a hidden per-process allocator would be
// global state): whoever sets up a GPU run owns one per device and stream and names
// it in ExecContext::memory_pool, and core/alloc.h then takes every tensor's memory from it (it is
// a DeviceMemoryPool, core/tensor.h). Without one, Buffer::Allocate calls cuda::Malloc.
//
// Size classes: requests are rounded up to a multiple of 512 bytes up to 1 MiB, and above that to
// one of four steps per power of two (1.25, 1.5, 1.75, 2 x 2^k), so a class wastes at most 25%. A
// request is served from the free list of its own class only (no splitting), which keeps reuse
// exact and the bookkeeping small; memory cached in other classes is released and the allocation
// retried once before running out of memory.
//
// Streams: blocks are reused in program order, so a block freed here may be handed out at once.
// That is safe when every kernel touching this allocator's memory runs on ONE stream (the stream
// orders the old user's kernels before the new user's). With several streams, synchronize before
// Free, or give each stream its own allocator.
//
// Thread-safe (one mutex). The destructor returns cached blocks to the backend; blocks still in
// use are reported with LOG(ERROR) and leaked (their users may still run).
#ifndef MT_CORE_CUDA_CACHING_ALLOCATOR_H_
#define MT_CORE_CUDA_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace mt {
namespace cuda {

class CachingAllocator : public DeviceMemoryPool {
 public:
  // Where blocks come from and go back to. `allocate` returns ResourceExhausted when out of
  // memory (other errors are passed through).
  struct Backend {
    std::function<absl::StatusOr<void*>(size_t nbytes)> allocate;
    std::function<void(void* ptr)> free;
    // Optional: called on every block handed out (fresh or reused) with its rounded size.
    std::function<void(void* ptr, size_t nbytes)> poison;
  };
  // cuda::Malloc / cuda::Free on `device` (core/cuda_device.h). Under the CUDA emulator every
  // block handed out is first filled with 0xFF bytes (NaN in every float type), so that a kernel
  // reading memory nobody wrote gives NaN instead of whatever a previous tensor left there
  // (core/cuda/poison_blocks.h).
  static Backend CudaBackend(int device);

  struct Stats {
    size_t bytes_in_use = 0;       // Rounded sizes of the blocks handed out.
    size_t peak_bytes_in_use = 0;  // Highest bytes_in_use so far (ResetPeak() restarts it).
    size_t bytes_cached = 0;       // Free blocks kept for reuse.
    size_t bytes_reserved = 0;     // bytes_in_use + bytes_cached: what the backend has given.
    int64_t allocations = 0;       // Successful Allocate calls with nbytes > 0.
    int64_t cache_hits = 0;        // ...of which served from a free list.
    int64_t backend_allocations = 0;
    int64_t backend_frees = 0;
  };

  explicit CachingAllocator(Backend backend);
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least nbytes (nullptr for 0). ResourceExhausted if the backend is out of memory
  // even after the cache was released (the message gives the statistics).
  absl::StatusOr<void*> Allocate(size_t nbytes) override;
  // Returns a block from Allocate to the cache. CHECK-fails for a pointer this allocator did not
  // hand out (a programmer error); nullptr is a no-op.
  void Free(void* ptr) override;
  // Gives every cached block back to the backend.
  void EmptyCache();

  Stats stats() const;
  void ResetPeak();

  // The size class of a request: what Allocate(nbytes) reserves.
  static size_t RoundSize(size_t nbytes);

 private:
  void EmptyCacheLocked();

  Backend backend_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // Size class -> cached blocks.
  std::unordered_map<void*, size_t> in_use_;   // Block -> size class.
  Stats stats_;
};

// A block from a CachingAllocator, returned to it on destruction. Move-only.
class DeviceAllocation {
 public:
  DeviceAllocation() = default;
  static absl::StatusOr<DeviceAllocation> Make(CachingAllocator* allocator, size_t nbytes);
  ~DeviceAllocation();
  DeviceAllocation(DeviceAllocation&& other) noexcept;
  DeviceAllocation& operator=(DeviceAllocation&& other) noexcept;
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }

 private:
  void Release();
  CachingAllocator* allocator_ = nullptr;
  void* data_ = nullptr;
  size_t nbytes_ = 0;
};

}  // namespace cuda
}  // namespace mt

#endif  // MT_CORE_CUDA_CACHING_ALLOCATOR_H_
