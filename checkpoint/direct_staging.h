// What the direct reads and writes of checkpoint files share (internal to
// //checkpoint:safetensors): the size of their pieces and of their staging ring, rounding to an
// alignment, and the ring's aligned memory.
#ifndef MT_CHECKPOINT_DIRECT_STAGING_H_
#define MT_CHECKPOINT_DIRECT_STAGING_H_

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "glog/logging.h"

namespace mt {
namespace checkpoint {
namespace internal {

inline constexpr size_t kPieceBytes = size_t{4} << 20;
inline constexpr size_t kSlots = 8;   // Staging buffers: 32 MiB in all.
inline constexpr int kIoThreads = 2;  // Requests in flight, so that the device always has one.

inline uint64_t AlignDown(uint64_t x, uint64_t a) { return x / a * a; }
inline uint64_t AlignUp(uint64_t x, uint64_t a) { return AlignDown(x + a - 1, a); }

// Ranges whose in-place interior is at least this large go straight between the file and their
// memory (below: a request of its own would cost more than copying through the staging ring).
inline constexpr uint64_t kInPlaceFrom = uint64_t{1} << 20;

// The interior [*begin, *end) of the n bytes at `memory` that sit at file offset `offset`, cut on
// multiples of `block` (a multiple of `align`), if it can be read or written in place: the memory
// address and the file offset agree modulo the direct-I/O alignment, and it is kInPlaceFrom or
// more.
inline bool InPlaceInterior(const void* memory, uint64_t offset, uint64_t n, uint64_t align,
                            uint64_t block, uint64_t* begin, uint64_t* end) {
  if (reinterpret_cast<uintptr_t>(memory) % align != offset % align) return false;
  *begin = AlignUp(offset, block);
  *end = AlignDown(offset + n, block);
  return *end > *begin && *end - *begin >= kInPlaceFrom;
}

struct FreeAligned {
  void operator()(char* p) const { std::free(p); }
};
using StagingMemory = std::unique_ptr<char, FreeAligned>;

// kSlots buffers of piece_bytes, aligned to the file's direct-I/O alignment and to 2 MiB (huge
// pages where the kernel gives them: fewer page faults). Dies if the memory cannot be had.
inline StagingMemory AllocateStaging(size_t piece_bytes, size_t file_alignment) {
  const size_t bytes = kSlots * piece_bytes;
  const size_t align = std::max<size_t>(file_alignment, size_t{2} << 20);
  StagingMemory memory(static_cast<char*>(std::aligned_alloc(align, AlignUp(bytes, align))));
  CHECK(memory != nullptr) << "cannot allocate " << bytes << " bytes of staging buffers";
  ::madvise(memory.get(), bytes, MADV_HUGEPAGE);  // Advice only.
  return memory;
}

}  // namespace internal
}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_DIRECT_STAGING_H_
