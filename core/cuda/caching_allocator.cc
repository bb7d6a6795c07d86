#include "core/cuda/caching_allocator.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cuda/poison_blocks.h"
#include "core/cuda_device.h"
#include "glog/logging.h"

namespace mt {
namespace cuda {

namespace {
constexpr size_t kSmallGranule = 512;
constexpr size_t kSmallLimit = size_t{1} << 20;
}  // namespace

CachingAllocator::Backend CachingAllocator::CudaBackend(int device) {
  Backend backend{[device](size_t nbytes) { return Malloc(device, nbytes); },
                  [device](void* ptr) { cuda::Free(device, ptr); }, nullptr};
  if (internal::PoisonCachedBlocks()) {
    backend.poison = [device](void* ptr, size_t nbytes) {
      const absl::Status s = Memset(device, ptr, 0xFF, nbytes);
      CHECK(s.ok()) << "poisoning a cached block: " << s;
    };
  }
  return backend;
}

CachingAllocator::CachingAllocator(Backend backend) : backend_(std::move(backend)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!in_use_.empty()) {
    LOG(ERROR) << "CachingAllocator destroyed with " << in_use_.size() << " blocks ("
               << stats_.bytes_in_use << " bytes) still in use; leaking them";
  }
  EmptyCacheLocked();
}

size_t CachingAllocator::RoundSize(size_t nbytes) {
  if (nbytes == 0) return 0;
  if (nbytes <= kSmallLimit) return (nbytes + kSmallGranule - 1) / kSmallGranule * kSmallGranule;
  // 2^k < nbytes <= 2^(k+1): round up to a multiple of 2^(k-2).
  int k = 0;
  while ((size_t{2} << k) < nbytes) ++k;
  const size_t step = size_t{1} << (k - 2);
  return (nbytes + step - 1) / step * step;
}

absl::StatusOr<void*> CachingAllocator::Allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t size = RoundSize(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* ptr = nullptr;
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    stats_.bytes_cached -= size;
    ++stats_.cache_hits;
  } else {
    absl::StatusOr<void*> fresh = backend_.allocate(size);
    if (!fresh.ok() && absl::IsResourceExhausted(fresh.status()) && stats_.bytes_cached > 0) {
      // Memory parked in other size classes may be what is missing: release it and retry once.
      EmptyCacheLocked();
      fresh = backend_.allocate(size);
    }
    if (!fresh.ok()) {
      if (!absl::IsResourceExhausted(fresh.status())) return fresh.status();
      return absl::ResourceExhaustedError(absl::StrCat(
          fresh.status().message(), " (caching allocator: ", size, " bytes requested, ",
          stats_.bytes_in_use, " in use, peak ", stats_.peak_bytes_in_use,
          "); reduce the batch size or the model's activation memory"));
    }
    ptr = *fresh;
    stats_.bytes_reserved += size;
    ++stats_.backend_allocations;
  }
  if (backend_.poison) backend_.poison(ptr, size);
  in_use_.emplace(ptr, size);
  stats_.bytes_in_use += size;
  if (stats_.bytes_in_use > stats_.peak_bytes_in_use) {
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }
  ++stats_.allocations;
  return ptr;
}

void CachingAllocator::Free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_use_.find(ptr);
  CHECK(it != in_use_.end()) << "CachingAllocator::Free of " << ptr
                             << ", which this allocator did not hand out (or freed twice)";
  const size_t size = it->second;
  in_use_.erase(it);
  stats_.bytes_in_use -= size;
  stats_.bytes_cached += size;
  free_[size].push_back(ptr);
}

void CachingAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  EmptyCacheLocked();
}

void CachingAllocator::EmptyCacheLocked() {
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) {
      backend_.free(p);
      stats_.bytes_reserved -= size;
      stats_.bytes_cached -= size;
      ++stats_.backend_frees;
    }
  }
  free_.clear();
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

absl::StatusOr<DeviceAllocation> DeviceAllocation::Make(CachingAllocator* allocator,
                                                        size_t nbytes) {
  absl::StatusOr<void*> p = allocator->Allocate(nbytes);
  if (!p.ok()) return p.status();
  DeviceAllocation a;
  a.allocator_ = allocator;
  a.data_ = *p;
  a.nbytes_ = nbytes;
  return a;
}

DeviceAllocation::~DeviceAllocation() { Release(); }

void DeviceAllocation::Release() {
  if (allocator_ != nullptr && data_ != nullptr) allocator_->Free(data_);
  allocator_ = nullptr;
  data_ = nullptr;
  nbytes_ = 0;
}

DeviceAllocation::DeviceAllocation(DeviceAllocation&& other) noexcept
    : allocator_(std::exchange(other.allocator_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      nbytes_(std::exchange(other.nbytes_, 0)) {}

DeviceAllocation& DeviceAllocation::operator=(DeviceAllocation&& other) noexcept {
  if (this != &other) {
    Release();
    allocator_ = std::exchange(other.allocator_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    nbytes_ = std::exchange(other.nbytes_, 0);
  }
  return *this;
}

}  // namespace cuda
}  // namespace mt
