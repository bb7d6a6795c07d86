// Pipeline stages against the whole model, for the architectures' stage tests: the stages of a
// model chained by hand (forwards first to last, backwards last to first) must give the whole
// model's losses and gradients bit for bit. testonly.
#ifndef MT_MODELS_TESTING_STAGE_TESTUTIL_H_
#define MT_MODELS_TESTING_STAGE_TESTUTIL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "models/config.h"
#include "models/model.h"
#include "models/pipeline_stage.h"
#include "nn/parameter.h"

namespace mt {
namespace models {
namespace testing {

struct BuiltModel {
  std::unique_ptr<nn::ParameterStore> store;
  std::unique_ptr<Model> model;
  PipelineStage* stage = nullptr;  // The model's.
};

// `config`'s model, or the part `stage` says, through the registry in a store of its own (TP 1,
// `dtype`), allocated from seed 5. CreateModel's and Allocate's errors; PipelineStageOf's for a
// model without stages.
absl::StatusOr<BuiltModel> BuildStage(const ModelConfig& config, DType dtype,
                                      nn::Recompute recompute, const StageOptions& stage);

// Runs the whole model's ForwardBackward on `batch` (tokens [B, T]) and the same step through
// `stages` equal stages chained by hand, with dropout on and loss scale 8, and checks with gtest
// that the losses (total, parts, scored) and every parameter's gradient are the whole model's
// bit for bit (the tied word embedding: the sum of its copies on the first and the last stage,
// which report it as tied_embedding_handle), and that the stages' training FLOPs add up to the
// whole model's. `what` names the case in failures.
void ExpectStagesEqualWholeModel(const ModelConfig& config, int stages, DType dtype,
                                 nn::Recompute recompute, const Batch& batch,
                                 const std::string& what);

// The argument errors every architecture's stages share, for `config` (4 layers, hidden size h)
// and `batch` (tokens [B, T]): a stage past the last layer is refused when created (layers [3, 5)
// of 4); a middle stage (layers [1, 3)) holds no tied copy, refuses ForwardBackward and a
// StageBackward before any StageForward (FailedPrecondition), an input or output gradient of
// another shape than [B, T, h] (InvalidArgument). As does the whole model, it reports no tied copy.
void ExpectStageArgumentErrors(const ModelConfig& config, const Batch& batch);

}  // namespace testing
}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_TESTING_STAGE_TESTUTIL_H_
