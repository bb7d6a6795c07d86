#include "models/model.h"

#include <string>
#include <utility>

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

namespace {
absl::Status NoDecoding(const ModelConfig& config) {
  return absl::UnimplementedError(absl::StrCat("architecture '", config.ArchitectureName(),
                                               "' has no incremental decoding (generation)"));
}
}  // namespace

absl::Status Model::StartDecoding(const nn::StepContext& sc, int64_t batch, int64_t max_length) {
  (void)sc;
  (void)batch;
  (void)max_length;
  return NoDecoding(config());
}

absl::Status Model::DecodeStep(const nn::StepContext& sc, const TensorView& tokens,
                               const TensorView& logits) {
  (void)sc;
  (void)tokens;
  (void)logits;
  return NoDecoding(config());
}

absl::StatusOr<Losses> Model::StageForward(const nn::StepContext& sc, const Batch& batch,
                                           const TensorView& input, const TensorView& output) {
  (void)sc;
  (void)batch;
  (void)input;
  (void)output;
  return NoStages(config());
}

Shape Model::StageBoundaryShape(int64_t batch, int64_t seq_length) const {
  return {batch, seq_length, config().hidden_size};
}

absl::Status Model::CheckStageBoundary(absl::string_view model, const ExecContext& ec,
                                       const TensorView& t, DType dtype, int64_t batch,
                                       int64_t seq_length, const char* what) const {
  const Shape want = StageBoundaryShape(batch, seq_length);
  if (t.shape != want || t.dtype != dtype || t.device != ec.device || !t.IsContiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(model, " pipeline stage: ", what, " ", t.DebugString(), " must be contiguous ",
                     DTypeName(dtype), " ", ShapeToString(want), " on ", ec.device.ToString()));
  }
  return absl::OkStatus();
}

absl::Status Model::StageBackward(const nn::StepContext& sc, const TensorView& output_grad,
                                  const TensorView& input_grad, double loss_scale) {
  (void)sc;
  (void)output_grad;
  (void)input_grad;
  (void)loss_scale;
  return NoStages(config());
}

absl::StatusOr<int> StageLayerCount(const StageOptions& stage, const ModelConfig& config,
                                    absl::string_view model) {
  const int layers =
      stage.num_layers == 0 ? config.num_layers - stage.first_layer : stage.num_layers;
  if (stage.first_layer < 0 || layers < 1 || stage.first_layer + layers > config.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat(model, ": the pipeline stage's layers [", stage.first_layer, ", ",
                     stage.first_layer + layers, ") are not a non-empty range of the model's ",
                     config.num_layers, " layers"));
  }
  return layers;
}

nn::LayerFactory StageBlocks(nn::LayerFactory blocks, int first_layer) {
  return [blocks = std::move(blocks), first_layer](nn::ParameterStore* store, const std::string&,
                                                   int i) {
    return blocks(store, absl::StrCat("layers.", first_layer + i), first_layer + i);
  };
}

absl::Status NoStages(const ModelConfig& config) {
  return absl::UnimplementedError(
      absl::StrCat("architecture '", config.ArchitectureName(),
                   "' cannot be split into pipeline stages (--pipeline_model_parallel_size 1)"));
}

absl::StatusOr<MultipleChoiceResult> Model::MultipleChoice(const nn::StepContext& sc,
                                                           const Batch& batch, Backward backward,
                                                           double loss_scale) {
  (void)sc;
  (void)batch;
  (void)backward;
  (void)loss_scale;
  return absl::UnimplementedError(
      absl::StrCat("architecture '", config().ArchitectureName(), "' has no multiple-choice head"));
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
