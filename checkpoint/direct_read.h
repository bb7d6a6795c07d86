// Reading byte ranges of a file into memory around the page cache (the safetensors reader's large
// reads; internal to //checkpoint:safetensors). The ranges are read in aligned pieces of a few MiB
// by I/O threads (the device's DMA fills them, the CPU copies nothing into a page cache), two
// requests in flight. Where a range's destination address and file offset agree modulo the
// alignment, its aligned interior (1 MiB or more) is read straight into the destination; the rest
// (every range that does not align so, and the heads and tails of those that do) goes into a ring
// of aligned staging buffers, from which the calling thread copies each piece. The calling thread
// takes the pieces in file order and reports each range's progress, so that hashing can follow
// behind.
#ifndef MT_CHECKPOINT_DIRECT_READ_H_
#define MT_CHECKPOINT_DIRECT_READ_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "core/file_system.h"

namespace mt {
namespace checkpoint {
namespace internal {

// `size` bytes of the file from `offset`, to go to `dst`.
struct ReadSpan {
  uint64_t offset = 0;
  size_t size = 0;
  char* dst = nullptr;
};

// Called on the calling thread, in file order: spans [0, index) are in place, and the first
// `bytes` of span `index`.
using ReadProgress = std::function<void(size_t index, size_t bytes)>;

// Reads `spans` (sorted by offset, not overlapping) from `file` into their destinations. (*done)[i]
// (resized to spans.size()) is how many leading bytes of span i are in place, also on an error:
// spans are completed in order, so a caller can go on from there with buffered reads.
// InvalidArgument where the kernel refuses the direct reads (EINVAL: a file system that opens with
// O_DIRECT but cannot do it), for the caller to fall back; DataLoss naming the path if the file
// ends before a span does; the errno status of a failed read otherwise. *in_place_bytes: how many
// of the bytes in place were read straight into their destinations, not through staging. Bytes
// past (*done)[i] may have been written too (pieces read ahead).
absl::Status ReadSpansDirect(const DirectReadFile& file, const std::vector<ReadSpan>& spans,
                             const ReadProgress& progress, std::vector<size_t>* done,
                             uint64_t* in_place_bytes);

}  // namespace internal
}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_DIRECT_READ_H_
