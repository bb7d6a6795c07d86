// Learning-rate schedule counted in samples, as Megatron's AnnealingLR: linear warmup from 0 to
// max_lr over warmup_samples, then constant, linear or cosine decay to min_lr at decay_samples, and
// min_lr afterwards. The trainer advances it by the global batch size after every step that was
// NOT skipped (a step skipped for inf/NaN gradients does not move the schedule).
#ifndef MT_TRAIN_LR_SCHEDULE_H_
#define MT_TRAIN_LR_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {
namespace train {

enum class DecayStyle { kConstant, kLinear, kCosine };
inline constexpr std::pair<absl::string_view, DecayStyle> kDecayStyleNames[] = {
    {"constant", DecayStyle::kConstant},
    {"linear", DecayStyle::kLinear},
    {"cosine", DecayStyle::kCosine}};

struct LrScheduleConfig {
  double max_lr = 1.5e-4;
  double min_lr = 1e-5;
  int64_t warmup_samples = 0;
  int64_t decay_samples = 0;  // Samples at which decay ends (>= warmup_samples).
  DecayStyle style = DecayStyle::kCosine;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("lr", &self.max_lr, "Peak learning rate.");
    v("min_lr", &self.min_lr, "Final learning rate.");
    v("lr_warmup_samples", &self.warmup_samples, "Samples of linear warmup.");
    v("lr_decay_samples", &self.decay_samples,
      "Samples at which decay ends (0 in a driver: train_iters x global_batch_size).");
    v("lr_decay_style", &self.style, "Decay after warmup: constant, linear or cosine.",
      kDecayStyleNames);
  }
  // InvalidArgument for negative rates, min_lr > max_lr, or decay_samples < warmup_samples.
  absl::Status Validate() const;
};

class LrSchedule {
 public:
  explicit LrSchedule(const LrScheduleConfig& config) : config_(config) {}
  // The learning rate after `samples` scheduled samples.
  double LrAt(int64_t samples) const;
  double lr() const { return LrAt(samples_); }
  void Advance(int64_t samples) { samples_ += samples; }
  int64_t samples() const { return samples_; }
  void set_samples(int64_t samples) { samples_ = samples; }  // Resuming from a checkpoint.

 private:
  LrScheduleConfig config_;
  int64_t samples_ = 0;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_LR_SCHEDULE_H_
