// The model chunks of a pipeline stage: which layers, and whether the input embedding and the
// output head, each chunk of stage `stage` holds under a comm::PipelineSplit (1F1B: one chunk a
// stage; interleaved: several), built through the registry (models/registry.h). What the training
// schedule (train/pipeline_schedule.h) runs, and what tells a checkpoint's tensors their stage.
#ifndef MT_MODELS_STAGES_H_
#define MT_MODELS_STAGES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/parallel_context.h"
#include "models/config.h"
#include "models/model.h"
#include "nn/parameter.h"

namespace mt {
namespace models {

// `options` for chunk v of `stage` under `split` (its StageOptions replaced; the default stage,
// the whole model, when the split has one stage of one chunk).
ModelOptions StageChunkOptions(const ModelOptions& options, const comm::PipelineSplit& split,
                               int stage, int v);

// This stage's model chunks in `store` (chunk v: the layers comm::PipelineSplit gives (stage, v),
// the input embedding and output head where it says), created through the registry with
// `options` (whose stage is replaced). The errors of CreateModel.
absl::StatusOr<std::vector<std::unique_ptr<Model>>> CreateStageModels(
    const ModelConfig& config, nn::ParameterStore* store, const ModelOptions& options,
    const comm::PipelineSplit& split, int stage);

// The names of the parameters each pipeline stage's store holds under `split` (split.stages
// lists, every chunk of a stage in one), from stage models declared in a store of TP degree
// tp_size (nothing is allocated): where a checkpoint's tensors go in that layout. The errors of
// CreateStageModels.
absl::StatusOr<std::vector<std::vector<std::string>>> StageParameterNames(
    const ModelConfig& config, int tp_size, const comm::PipelineSplit& split);

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_STAGES_H_
