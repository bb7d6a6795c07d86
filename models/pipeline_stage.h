// Pipeline stages, a capability of a models::Model (model.h: Model::pipeline_stage()): the model
// built as one part of the whole (ModelOptions::stage) runs that part on a micro-batch, passing
// its activation to the next stage and its gradient back; train/pipeline_schedule.h drives the
// stages. GptModel (and so the GPT family's variants) and BertModel (pretraining heads) implement
// it; built as the whole model (the default StageOptions) they are one stage holding every layer.
// Also the helpers the implementations build their stages with.
#ifndef MT_MODELS_PIPELINE_STAGE_H_
#define MT_MODELS_PIPELINE_STAGE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "models/config.h"
#include "models/model.h"
#include "nn/context.h"
#include "nn/layer.h"

namespace mt {
namespace models {

// Every stage is given the whole micro-batch (the first reads its tokens, the last its labels).
class PipelineStage {
 public:
  virtual ~PipelineStage() = default;

  // Forward of this stage on one micro-batch (sc.mode selects dropout). The stage holding the
  // input embeds batch.tokens and ignores `input`; the others read `input` (the previous stage's
  // output, StageBoundaryShape, compute dtype, the model's device). The stage holding the output
  // returns the losses (as Model::ForwardBackward) and ignores `output`; the others write their
  // last layer's output into `output` (StageBoundaryShape, compute dtype, the model's device) and
  // return Losses without parts.
  // The activations stay for StageBackward until the next StageForward. InvalidArgument for
  // inputs of the wrong shape, dtype or device (and ForwardBackward's input errors).
  virtual absl::StatusOr<Losses> StageForward(const nn::StepContext& sc, const Batch& batch,
                                              const TensorView& input,
                                              const TensorView& output) = 0;
  // Backward of the latest StageForward (the same sc): ACCUMULATES the gradients of this stage's
  // parameters. The stage holding the output starts from loss_scale * d(total) and ignores
  // `output_grad`; the others read output_grad = d(scaled loss)/d(output). Writes input_grad =
  // d(scaled loss)/d(input) unless the stage holds the input (then it is ignored); both
  // StageBoundaryShape. FailedPrecondition without a forward; InvalidArgument for wrong shapes.
  virtual absl::Status StageBackward(const nn::StepContext& sc, const TensorView& output_grad,
                                     const TensorView& input_grad, double loss_scale = 1.0) = 0;
  // The activation one stage passes to the next (and its gradient: `input`, `output` and their
  // gradients above) for a micro-batch of `batch` sequences of seq_length tokens: [B, T, H], or
  // with sequence parallelism this TP rank's slice of the sequence, [B, T / tp, H].
  virtual Shape StageBoundaryShape(int64_t batch, int64_t seq_length) const = 0;
  // The store handle of this stage's copy of a word embedding that the first and the last stage
  // share (its gradient is summed over the embedding group), or -1 when there is none here.
  virtual int tied_embedding_handle() const = 0;

 protected:
  // For the stages' implementations: InvalidArgument unless `t` is a contiguous
  // StageBoundaryShape(batch, seq_length) tensor of `dtype` on ec's device; the message names
  // `model`'s pipeline stage ("GPT-2") and `what` ("input", "output gradient").
  absl::Status CheckStageBoundary(absl::string_view model, const ExecContext& ec,
                                  const TensorView& t, DType dtype, int64_t batch,
                                  int64_t seq_length, const char* what) const;
};

// model.pipeline_stage(), or NoStages(model.config()) when it has none.
absl::StatusOr<PipelineStage*> PipelineStageOf(Model& model);

// The number of transformer layers `stage` builds of `config`'s (num_layers 0: through the last);
// InvalidArgument, naming `model` ("GPT-2", "BERT"), unless they are a non-empty range of them.
absl::StatusOr<int> StageLayerCount(const StageOptions& stage, const ModelConfig& config,
                                    absl::string_view model);

// The block factory of a stage's stack: its block i is the model's layer first_layer + i, built
// by `blocks` under the name "layers.<global index>" and with that index (dropout streams,
// initialisation scales), so that the stages together are the whole model.
nn::LayerFactory StageBlocks(nn::LayerFactory blocks, int first_layer);

// Unimplemented: `config`'s architecture has no pipeline stages. Factories of such architectures
// return it for ModelOptions whose stage is not whole().
absl::Status NoStages(const ModelConfig& config);

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_PIPELINE_STAGE_H_
