// The CUDA build's choice of poison_blocks.h.
#include "core/cuda/poison_blocks.h"

namespace mt {
namespace cuda {
namespace internal {

bool PoisonCachedBlocks() { return false; }

}  // namespace internal
}  // namespace cuda
}  // namespace mt
