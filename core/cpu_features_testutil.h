// Synthetic feature sets for the tests of CPU feature detection and kernel choice. testonly.
#ifndef MT_CORE_CPU_FEATURES_TESTUTIL_H_
#define MT_CORE_CPU_FEATURES_TESTUTIL_H_

#include "core/cpu_features.h"

namespace mt {
namespace testing {

// A CPU with everything up to AVX-512 F/BW/VL/DQ, all enabled by the OS.
inline CpuFeatures Avx512CpuFeatures() {
  CpuFeatures f;
  f.sse3 = f.fma = f.osxsave = f.avx = f.avx2 = true;
  f.avx512f = f.avx512dq = f.avx512bw = f.avx512vl = true;
  f.os_ymm = f.os_zmm = true;
  return f;
}

}  // namespace testing
}  // namespace mt

#endif  // MT_CORE_CPU_FEATURES_TESTUTIL_H_
