// The SIMD instruction sets of the CPU kernels written with Google Highway (core/ops/*_simd.cc).
//
// Each such kernel is compiled for every target from the build's baseline (-march in .bazelrc) up
// to AVX-512 (Highway's AVX2, AVX3, ...), and the first call picks the best one the CPU supports
// (runtime dispatch). The kernels use only correctly rounded lane operations (add, mul, div, sqrt;
// no fused multiply-add) unless their header says otherwise, so every target gives the same bits.
//
// Thread-safety: SimdTargetName and SimdTargets may be called from any thread. ScopedSimdTarget
// (for tests) changes the target of every kernel in the process: create it while no kernel runs.
#ifndef MT_CORE_SIMD_H_
#define MT_CORE_SIMD_H_

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

// One SIMD target: Highway's bit for it and its name ("SSE4", "AVX2", "AVX3", ...).
struct SimdTarget {
  int64_t bit = 0;
  std::string name;
};

// The targets compiled into this binary that this CPU supports, best first (at most as many as
// the build generates; a CPU below the baseline is not supported at all).
std::vector<SimdTarget> SimdTargets();

// The name of the target the kernels run now (the best of SimdTargets(), unless a
// ScopedSimdTarget is alive).
std::string SimdTargetName();

// Makes every Highway kernel run `target` (one of SimdTargets()) while it lives; the destructor
// returns to the CPU's best. For tests that run each kernel at each target.
class ScopedSimdTarget {
 public:
  explicit ScopedSimdTarget(const SimdTarget& target);
  ~ScopedSimdTarget();
  ScopedSimdTarget(const ScopedSimdTarget&) = delete;
  ScopedSimdTarget& operator=(const ScopedSimdTarget&) = delete;
};

}  // namespace mt

#endif  // MT_CORE_SIMD_H_
