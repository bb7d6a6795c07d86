#include "models/model.h"

#include "absl/strings/str_cat.h"

namespace mt {
namespace models {

absl::Status Model::Logits(const nn::StepContext& sc, const TensorView& tokens,
                           const TensorView& full) {
  (void)sc;
  (void)tokens;
  (void)full;
  return absl::UnimplementedError(absl::StrCat(
      "architecture '", config().ArchitectureName(),
      "' has no language-model head over every position (no logits for generation)"));
}

absl::StatusOr<MultipleChoiceResult> Model::MultipleChoice(const nn::StepContext& sc,
                                                           const Batch& batch, Backward backward,
                                                           double loss_scale) {
  (void)sc;
  (void)batch;
  (void)backward;
  (void)loss_scale;
  return absl::UnimplementedError(absl::StrCat("architecture '", config().ArchitectureName(),
                                               "' has no multiple-choice head"));
}

}  // namespace models
}  // namespace mt
