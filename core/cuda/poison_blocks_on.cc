// The choice of poison_blocks.h under the emulator and --define=mt_poison_blocks=on.
#include "core/cuda/poison_blocks.h"

namespace mt {
namespace cuda {
namespace internal {

bool PoisonCachedBlocks() { return true; }

}  // namespace internal
}  // namespace cuda
}  // namespace mt
