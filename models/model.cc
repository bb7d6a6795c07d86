#include "models/model.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace mt {
namespace models {

absl::Status Model::Logits(const nn::StepContext& sc, const TensorView& tokens,
                           const TensorView& full) {
  (void)sc;
  (void)tokens;
  (void)full;
  return absl::UnimplementedError(
      absl::StrCat("architecture '", config().ArchitectureName(),
                   "' has no language-model head over every position (no logits for generation)"));
}

double LayerMatrixWeights(const nn::ParameterStore& store, const std::string& layer_prefix) {
  double weights = 0;
  for (int i = 0; i < store.size(); ++i) {
    const nn::ParamSpec& spec = store.spec(i);
    if (spec.global_shape.size() != 2 || spec.name.rfind(layer_prefix, 0) != 0) continue;
    weights +=
        static_cast<double>(spec.global_shape[0]) * static_cast<double>(spec.global_shape[1]);
  }
  return weights;
}

}  // namespace models
}  // namespace mt
