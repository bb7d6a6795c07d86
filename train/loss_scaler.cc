#include "train/loss_scaler.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mt {
namespace train {

LossScaler::LossScaler(const LossScalerConfig& config)
    : config_(config),
      scale_(config.dynamic ? config.initial_scale : 1.0),
      hysteresis_tracker_(config.hysteresis) {}

void LossScaler::Update(bool found_inf) {
  if (!config_.dynamic) return;
  if (found_inf) {
    growth_tracker_ = 0;
    if (--hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * 0.5, config_.min_scale);
    return;
  }
  if (++growth_tracker_ == config_.growth_interval) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = config_.hysteresis;
    scale_ *= 2.0;
  }
}

std::string LossScaler::Serialize() const {
  return absl::StrFormat("%.17g %d %d", scale_, growth_tracker_, hysteresis_tracker_);
}

absl::Status LossScaler::Restore(const std::string& state) {
  double scale;
  long long growth;
  int hyst;
  if (std::sscanf(state.c_str(), "%lf %lld %d", &scale, &growth, &hyst) != 3 || !(scale > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("bad loss scaler state '", state, "'"));
  }
  scale_ = scale;
  growth_tracker_ = growth;
  hysteresis_tracker_ = hyst;
  return absl::OkStatus();
}

}  // namespace train
}  // namespace mt
