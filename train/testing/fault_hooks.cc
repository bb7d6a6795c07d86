#include "train/testing/fault_hooks.h"

#include <chrono>
#include <limits>
#include <thread>

#include "core/ops/elementwise.h"

namespace mt {
namespace train {
namespace testing {
namespace {

// Sets the first element of this rank's reduced gradients to +inf.
absl::Status OverflowGradient(const TrainingParts& parts) {
  return ops::Fill(*parts.exec, parts.store->flat_grads().Slice(0, 1),
                   std::numeric_limits<double>::infinity());
}

}  // namespace

absl::Status GradOverflow::AfterBackward(int64_t iteration, const TrainingParts& parts,
                                         models::Losses* loss) {
  (void)loss;
  if (iteration != iteration_ || (rank_ >= 0 && rank_ != parts.parallel->rank())) {
    return absl::OkStatus();
  }
  return OverflowGradient(parts);
}

absl::Status NonfiniteInjection::AfterBackward(int64_t iteration, const TrainingParts& parts,
                                               models::Losses* loss) {
  const int64_t first = first_ - 1;  // 0-based, as `iteration`.
  if (first_ < 1 || iteration < first || iteration >= first + count_) return absl::OkStatus();
  if (target_ == NonfiniteTarget::kGrad) return OverflowGradient(parts);
  if (parts.parallel->dp_rank() == 0) {
    loss->total = std::numeric_limits<double>::quiet_NaN();
    for (double& p : loss->parts) p = std::numeric_limits<double>::quiet_NaN();
  }
  return absl::OkStatus();
}

absl::Status SlowRank::AfterBackward(int64_t iteration, const TrainingParts& parts,
                                     models::Losses* loss) {
  (void)iteration;
  (void)loss;
  if (parts.parallel->rank() == rank_) std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace train
}  // namespace mt
