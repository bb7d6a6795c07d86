#include "core/simd.h"

#include "glog/logging.h"
#include "hwy/highway.h"
#include "hwy/targets.h"

namespace mt {

std::vector<SimdTarget> SimdTargets() {
  std::vector<SimdTarget> targets;
  // Highway's list runs from the lowest bit, which is the best target.
  for (int64_t bit : hwy::SupportedAndGeneratedTargets()) {
    targets.push_back({bit, hwy::TargetName(bit)});
  }
  return targets;
}

std::string SimdTargetName() {
  const int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
  return usable == 0 ? "none" : hwy::TargetName(usable & -usable);
}

ScopedSimdTarget::ScopedSimdTarget(const SimdTarget& target) {
  CHECK_NE(hwy::SupportedTargets() & target.bit, 0)
      << "SIMD target " << target.name << " is not supported here";
  hwy::SetSupportedTargetsForTest(target.bit);
}

ScopedSimdTarget::~ScopedSimdTarget() { hwy::SetSupportedTargetsForTest(0); }

}  // namespace mt
