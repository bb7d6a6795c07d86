// Writing a file around the page cache (the safetensors writer's large files; internal to
// //checkpoint:safetensors): I/O threads write the file in pieces of a few MiB with direct writes,
// two requests in flight (the device takes the bytes from memory; the CPU copies nothing into a
// page cache and no writeback follows). Where a part's address and file offset agree modulo the
// alignment, its interior between 4096-byte file-system blocks (1 MiB or more) is written straight
// from its memory; the rest is gathered, in order, into a ring of aligned staging buffers. The
// last buffer is padded to the alignment, and the file cut back to its size when it is closed.
#ifndef MT_CHECKPOINT_DIRECT_WRITE_H_
#define MT_CHECKPOINT_DIRECT_WRITE_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "core/file_system.h"

namespace mt {
namespace checkpoint {
namespace internal {

// One run of bytes to write.
struct WritePart {
  const void* data = nullptr;
  size_t size = 0;
};

// Writes the parts, one after the other, from offset 0, then closes the file with `sync`.
// InvalidArgument where the kernel refuses the direct writes (the caller writes the file again
// through the page cache); the errno status of a failed write or close otherwise.
absl::Status WriteDirect(DirectWritableFile& file, const std::vector<WritePart>& parts, Sync sync);

}  // namespace internal
}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_DIRECT_WRITE_H_
