#include "models/stages.h"

#include <utility>

#include "core/status.h"
#include "models/registry.h"

namespace mt {
namespace models {

ModelOptions StageChunkOptions(const ModelOptions& options, const comm::PipelineSplit& split,
                               int stage, int v) {
  ModelOptions o = options;
  o.stage.first_layer = split.FirstLayer(stage, v);
  o.stage.num_layers = split.layers_per_chunk();
  o.stage.holds_input = split.HoldsInput(stage, v);
  o.stage.holds_output = split.HoldsOutput(stage, v);
  if (split.stages == 1 && split.virtual_stages == 1) o.stage = StageOptions();
  return o;
}

absl::StatusOr<std::vector<std::unique_ptr<Model>>> CreateStageModels(
    const ModelConfig& config, nn::ParameterStore* store, const ModelOptions& options,
    const comm::PipelineSplit& split, int stage) {
  std::vector<std::unique_ptr<Model>> chunks;
  for (int v = 0; v < split.virtual_stages; ++v) {
    ASSIGN_OR_RETURN(std::unique_ptr<Model> m,
                     CreateModel(config, store, StageChunkOptions(options, split, stage, v)));
    chunks.push_back(std::move(m));
  }
  return chunks;
}

absl::StatusOr<std::vector<std::vector<std::string>>> StageParameterNames(
    const ModelConfig& config, int tp_size, const comm::PipelineSplit& split) {
  std::vector<std::vector<std::string>> names;
  for (int stage = 0; stage < split.stages; ++stage) {
    nn::ParameterStore store(/*tp_rank=*/0, tp_size, DType::kF32);
    ASSIGN_OR_RETURN(const std::vector<std::unique_ptr<Model>> chunks,
                     CreateStageModels(config, &store, ModelOptions(), split, stage));
    std::vector<std::string>& mine = names.emplace_back();
    for (int i = 0; i < store.size(); ++i) mine.push_back(store.spec(i).name);
  }
  return names;
}

}  // namespace models
}  // namespace mt
