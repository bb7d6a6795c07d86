// Loads OpenBLAS before main() with the kernel chosen from the CPU's features (core/openblas.h).
// Link it (alwayslink) into every binary that multiplies matrices: //core/ops:gemm does.
#include "core/openblas.h"

namespace {

// Priority 101, the first one available to programs: before the executable's other constructors
// and static initialisers (which may already multiply matrices), while the process has one thread.
__attribute__((constructor(101))) void LoadOpenBlasBeforeMain() { mt::LoadOpenBlas(); }

}  // namespace
