#include "train/lr_schedule.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace mt {
namespace train {

absl::Status LrScheduleConfig::Validate() const {
  if (!(max_lr >= 0) || !(min_lr >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("lr (", max_lr, ") and min_lr (", min_lr, ") must be non-negative"));
  }
  if (min_lr > max_lr) {
    return absl::InvalidArgumentError(absl::StrCat("min_lr ", min_lr, " exceeds lr ", max_lr));
  }
  if (warmup_samples < 0 || decay_samples < warmup_samples) {
    return absl::InvalidArgumentError(absl::StrCat("need 0 <= lr_warmup_samples (", warmup_samples,
                                                   ") <= lr_decay_samples (", decay_samples, ")"));
  }
  return absl::OkStatus();
}

double LrSchedule::LrAt(int64_t samples) const {
  const LrScheduleConfig& c = config_;
  if (c.warmup_samples > 0 && samples <= c.warmup_samples) {
    return c.max_lr * static_cast<double>(samples) / static_cast<double>(c.warmup_samples);
  }
  if (c.style == DecayStyle::kConstant) return c.max_lr;
  if (samples >= c.decay_samples) return c.min_lr;
  const double ratio = static_cast<double>(samples - c.warmup_samples) /
                       static_cast<double>(c.decay_samples - c.warmup_samples);
  const double coeff =
      c.style == DecayStyle::kLinear ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return c.min_lr + coeff * (c.max_lr - c.min_lr);
}

}  // namespace train
}  // namespace mt
