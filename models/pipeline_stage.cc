#include "models/pipeline_stage.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mt {
namespace models {

absl::Status PipelineStage::CheckStageBoundary(absl::string_view model, const ExecContext& ec,
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

absl::StatusOr<PipelineStage*> PipelineStageOf(Model& model) {
  PipelineStage* stage = model.pipeline_stage();
  if (stage == nullptr) return NoStages(model.config());
  return stage;
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

}  // namespace models
}  // namespace mt
