// Dynamic loss scaling for f16 training (Megatron's DynamicGradScaler):
// the scale starts at 2^32; a step whose gradients hold inf/NaN is skipped and counts against the
// hysteresis (2): when the hysteresis is used up the scale halves (not below min_scale = 1); after
// growth_interval (1000) consecutive clean steps the scale doubles and the hysteresis is restored.
// bf16 and f32 training use a constant scale of 1.
#ifndef MT_TRAIN_LOSS_SCALER_H_
#define MT_TRAIN_LOSS_SCALER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace mt {
namespace train {

struct LossScalerConfig {
  bool dynamic = false;
  double initial_scale = 4294967296.0;  // 2^32
  double min_scale = 1.0;
  int64_t growth_interval = 1000;
  int hysteresis = 2;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config);
  double scale() const { return scale_; }
  // Whether the scale is dynamic (f16), so that skipped steps are part of its work.
  bool dynamic() const { return config_.dynamic; }
  // Records the outcome of a step: found_inf means the step must be skipped.
  void Update(bool found_inf);
  // State for checkpoints: "scale growth_tracker hysteresis_tracker".
  std::string Serialize() const;
  absl::Status Restore(const std::string& state);

 private:
  LossScalerConfig config_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int hysteresis_tracker_;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_LOSS_SCALER_H_
