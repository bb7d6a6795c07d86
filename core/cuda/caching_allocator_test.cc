#include "core/cuda/caching_allocator.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/cuda_device.h"
#include "gtest/gtest.h"

namespace mt {
namespace cuda {
namespace {

// A host backend with a byte budget and a record of what it handed out, so the allocator's logic
// is tested on any machine.
struct FakeBackend {
  size_t budget = size_t{1} << 30;
  size_t live_bytes = 0;
  int allocs = 0;
  int frees = 0;
  std::map<void*, size_t> live;  // Pointer -> size.
  std::vector<size_t> sizes;     // Of every backend allocation.

  CachingAllocator::Backend Make() {
    return CachingAllocator::Backend{
        [this](size_t n) -> absl::StatusOr<void*> {
          if (live_bytes + n > budget) {
            return absl::ResourceExhaustedError("fake device out of memory");
          }
          void* p = std::malloc(n);
          live[p] = n;
          live_bytes += n;
          sizes.push_back(n);
          ++allocs;
          return p;
        },
        [this](void* p) {
          EXPECT_EQ(live.count(p), 1u) << "backend free of a pointer it did not hand out";
          live_bytes -= live[p];
          live.erase(p);
          ++frees;
          std::free(p);
        }};
  }
};

TEST(CachingAllocatorTest, RoundsToSizeClasses) {
  EXPECT_EQ(CachingAllocator::RoundSize(0), 0u);
  EXPECT_EQ(CachingAllocator::RoundSize(1), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(512), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(CachingAllocator::RoundSize(1 << 20), size_t{1} << 20);
  // Above 1 MiB: four steps per power of two.
  EXPECT_EQ(CachingAllocator::RoundSize((1 << 20) + 1), size_t{5} << 18);  // 1.25 MiB
  EXPECT_EQ(CachingAllocator::RoundSize(size_t{3} << 20), size_t{3} << 20);
  EXPECT_EQ(CachingAllocator::RoundSize((size_t{3} << 20) + 1), size_t{7} << 19);  // 3.5 MiB
  EXPECT_EQ(CachingAllocator::RoundSize(size_t{1} << 30), size_t{1} << 30);
  // Never smaller than asked, never more than 25% (plus a granule) larger.
  for (size_t n : {size_t{7}, size_t{4097}, size_t{999999}, size_t{1234567}, size_t{87654321}}) {
    const size_t r = CachingAllocator::RoundSize(n);
    EXPECT_GE(r, n);
    EXPECT_LE(r, n + n / 4 + 512) << n;
  }
}

// The optional poison hook sees every block handed out, fresh or reused, with its rounded size.
TEST(CachingAllocatorTest, PoisonsEveryBlockHandedOut) {
  FakeBackend fake;
  CachingAllocator::Backend backend = fake.Make();
  backend.poison = [](void* p, size_t n) { std::memset(p, 0xFF, n); };
  CachingAllocator alloc(std::move(backend));
  absl::StatusOr<void*> a = alloc.Allocate(1000);
  ASSERT_TRUE(a.ok());
  std::memset(*a, 0, 1000);
  alloc.Free(*a);
  absl::StatusOr<void*> b = alloc.Allocate(700);  // The same block again.
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(*b, *a);
  const auto* bytes = static_cast<const unsigned char*>(*b);
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(bytes[i], 0xFF) << i;
  alloc.Free(*b);
}

TEST(CachingAllocatorTest, ReusesFreedBlocksOfTheSameClass) {
  FakeBackend fake;
  CachingAllocator alloc(fake.Make());
  absl::StatusOr<void*> a = alloc.Allocate(1000);
  ASSERT_TRUE(a.ok());
  std::memset(*a, 1, 1000);  // The block is usable memory of at least the size asked.
  alloc.Free(*a);
  absl::StatusOr<void*> b = alloc.Allocate(700);  // Same class (1024 bytes).
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, *a);
  EXPECT_EQ(fake.allocs, 1);
  absl::StatusOr<void*> c = alloc.Allocate(5000);  // Another class: a fresh block.
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*c, *a);
  EXPECT_EQ(fake.allocs, 2);
  EXPECT_EQ(fake.sizes[1], 5120u);

  CachingAllocator::Stats s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 1024u + 5120u);
  EXPECT_EQ(s.bytes_cached, 0u);
  EXPECT_EQ(s.bytes_reserved, 1024u + 5120u);
  EXPECT_EQ(s.allocations, 3);
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.backend_allocations, 2);

  alloc.Free(*b);
  alloc.Free(*c);
  s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_cached, 1024u + 5120u);
  EXPECT_EQ(s.peak_bytes_in_use, 1024u + 5120u);
  EXPECT_EQ(fake.frees, 0);  // Cached, not returned.

  alloc.EmptyCache();
  s = alloc.stats();
  EXPECT_EQ(s.bytes_cached, 0u);
  EXPECT_EQ(s.bytes_reserved, 0u);
  EXPECT_EQ(s.backend_frees, 2);
  EXPECT_EQ(fake.frees, 2);
  EXPECT_TRUE(fake.live.empty());
}

TEST(CachingAllocatorTest, PeakTracksTheHighWaterMarkAndResets) {
  FakeBackend fake;
  CachingAllocator alloc(fake.Make());
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(*alloc.Allocate(512));
  for (void* p : blocks) alloc.Free(p);
  EXPECT_EQ(alloc.stats().peak_bytes_in_use, 5u * 512);
  alloc.ResetPeak();
  EXPECT_EQ(alloc.stats().peak_bytes_in_use, 0u);
  void* p = *alloc.Allocate(100);
  EXPECT_EQ(alloc.stats().peak_bytes_in_use, 512u);
  EXPECT_EQ(fake.allocs, 5);  // Served from the cache.
  alloc.Free(p);
}

TEST(CachingAllocatorTest, ReleasesTheCacheBeforeRunningOutOfMemory) {
  FakeBackend fake;
  fake.budget = 8192;
  CachingAllocator alloc(fake.Make());
  void* a = *alloc.Allocate(4096);
  void* b = *alloc.Allocate(4096);
  alloc.Free(a);
  alloc.Free(b);  // 8 KiB cached in the 4 KiB class; the backend has nothing left.
  absl::StatusOr<void*> big = alloc.Allocate(6000);  // Another class: needs the cache released.
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(fake.frees, 2);
  EXPECT_EQ(alloc.stats().bytes_cached, 0u);
  // Now truly out of memory: a clear ResourceExhausted.
  absl::StatusOr<void*> more = alloc.Allocate(4096);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(more.status().message().find("caching allocator"), std::string::npos) << more.status();
  alloc.Free(*big);
}

TEST(CachingAllocatorTest, OtherBackendErrorsPassThrough) {
  CachingAllocator alloc(CachingAllocator::Backend{
      [](size_t) -> absl::StatusOr<void*> { return absl::InternalError("driver broke"); },
      [](void*) {}});
  absl::StatusOr<void*> p = alloc.Allocate(10);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(alloc.stats().allocations, 0);
  EXPECT_TRUE(alloc.Allocate(0).ok());
  EXPECT_EQ(*alloc.Allocate(0), nullptr);
}

TEST(CachingAllocatorTest, DeviceAllocationReturnsItsBlock) {
  FakeBackend fake;
  CachingAllocator alloc(fake.Make());
  {
    absl::StatusOr<DeviceAllocation> a = DeviceAllocation::Make(&alloc, 3000);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->nbytes(), 3000u);
    DeviceAllocation moved = std::move(*a);
    EXPECT_EQ(a->data(), nullptr);
    EXPECT_NE(moved.data(), nullptr);
    EXPECT_EQ(alloc.stats().bytes_in_use, 3072u);
  }
  EXPECT_EQ(alloc.stats().bytes_in_use, 0u);
  EXPECT_EQ(alloc.stats().bytes_cached, 3072u);
}

TEST(CachingAllocatorDeathTest, FreeOfAForeignPointerIsAProgrammerError) {
  FakeBackend fake;
  CachingAllocator alloc(fake.Make());
  int x = 0;
  EXPECT_DEATH(alloc.Free(&x), "did not hand out");
}

TEST(CachingAllocatorTest, ServesDeviceMemory) {
  if (DeviceCount() == 0) GTEST_SKIP() << Describe();
  CachingAllocator alloc(CachingAllocator::CudaBackend(0));
  absl::StatusOr<void*> a = alloc.Allocate(size_t{3} << 20);
  ASSERT_TRUE(a.ok()) << a.status();
  std::vector<char> host(size_t{3} << 20, 7), back(size_t{3} << 20, 0);
  ASSERT_TRUE(Memcpy(*a, host.data(), host.size(), CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(Memcpy(back.data(), *a, back.size(), CopyKind::kDeviceToHost).ok());
  EXPECT_EQ(host, back);
  alloc.Free(*a);
  absl::StatusOr<void*> b = alloc.Allocate((size_t{3} << 20) - 100);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, *a);
  alloc.Free(*b);
  alloc.EmptyCache();
  EXPECT_EQ(alloc.stats().bytes_reserved, 0u);
}

}  // namespace
}  // namespace cuda
}  // namespace mt
