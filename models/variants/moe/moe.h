// The mixture-of-experts decoder (architecture "moe", Mixtral-like): the modern decoder's blocks
// (RMSNorm, rotary positions, no attention biases) whose MLP is a mixture of SwiGLU experts with
// a top-k linear router (moe_mlp.h), in the GPT-2 model's decoder (models/gpt2). MoeModel wraps
// that GptModel to add what the experts bring to the model interface:
//   - the losses: "lm loss", then "moe aux loss" (the load-balancing losses of every layer,
//     coefficient included) and, with moe_z_loss_coeff > 0, "moe z loss"; the objective is their
//     sum, and ForwardBackward's loss_scale reaches the routers through MoeStats. After them, not
//     losses and not in the objective, "moe load <e>" for each expert e: the share of the routed
//     (token, expert) slots expert e got, over every layer (1 / E each when balanced), which the
//     trainer logs, averaged over the micro-batches and data-parallel ranks, with the losses;
//     under pipeline parallelism each stage reports the auxiliary losses of its own layers and
//     their loads weighted by its share of the layers, and the trainer sums them over the stages
//     (output_stage_parts), so the logged values are the whole model's;
//   - FLOPs of the ACTIVE weights: each token runs topk experts, not all of them;
//   - the per-expert token counts of the last forward (stats()).
// Tensor parallelism as the dense layers (two all-reduces per layer each way). Pipeline stages
// (PipelineStage) delegate to the wrapped model's and set the routers' loss scale in
// StageBackward. Sequence parallelism is refused
// (InvalidArgument); generation works (the experts run in eval mode through the key/value-cache
// decoder of the wrapped model).
#ifndef MT_MODELS_VARIANTS_MOE_MOE_H_
#define MT_MODELS_VARIANTS_MOE_MOE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/config.h"
#include "models/gpt2/gpt2.h"
#include "models/model.h"
#include "models/pipeline_stage.h"
#include "models/variants/moe/moe_mlp.h"
#include "nn/parameter.h"

namespace mt {
namespace models {
namespace moe {

class MoeModel : public Model, public PipelineStage {
 public:
  // InvalidArgument for num_experts < 1, learned positions, post-norm or sequence parallelism;
  // GptModel::Create's errors.
  static absl::StatusOr<std::unique_ptr<MoeModel>> Create(const ModelConfig& config,
                                                          nn::ParameterStore* store,
                                                          const ModelOptions& options);

  const ModelConfig& config() const override { return inner_->config(); }
  int64_t padded_vocab() const override { return inner_->padded_vocab(); }
  std::vector<std::string> loss_names() const override;
  // "lm loss" alone; the auxiliary losses and loads come from every stage.
  int output_stage_parts() const override { return 1; }
  absl::StatusOr<Losses> ForwardBackward(const nn::StepContext& sc, const Batch& batch,
                                         Backward backward, double loss_scale = 1.0) override;
  // Megatron's formula with each layer's active matrix weights: attention, router and topk
  // experts.
  double TrainingFlops(int64_t batch, int64_t seq_length, int64_t scored) const override;
  ActivationBytes activation_bytes() const override { return inner_->activation_bytes(); }
  absl::Status Logits(const nn::StepContext& sc, const TensorView& tokens,
                      const TensorView& full) override {
    return inner_->Logits(sc, tokens, full);
  }
  IncrementalDecoder* incremental_decoder() override { return inner_->incremental_decoder(); }
  PipelineStage* pipeline_stage() override { return this; }

  // PipelineStage: the wrapped model's, with this stage's auxiliary losses and loads added.
  absl::StatusOr<Losses> StageForward(const nn::StepContext& sc, const Batch& batch,
                                      const TensorView& input, const TensorView& output) override;
  absl::Status StageBackward(const nn::StepContext& sc, const TensorView& output_grad,
                             const TensorView& input_grad, double loss_scale = 1.0) override;
  Shape StageBoundaryShape(int64_t batch, int64_t seq_length) const override {
    return inner_->StageBoundaryShape(batch, seq_length);
  }
  int tied_embedding_handle() const override { return inner_->tied_embedding_handle(); }
  const MoeStats& stats() const { return *stats_; }

 private:
  MoeModel() = default;
  // l with the auxiliary losses of the last forward appended.
  Losses WithAuxiliary(Losses l) const;
  std::unique_ptr<GptModel> inner_;
  std::shared_ptr<MoeStats> stats_;
  double active_layer_weights_ = 0;
  bool recompute_ = false;
  bool holds_output_ = true;
  double layer_share_ = 1.0;  // This stage's layers / the model's.
};

// Matrix weights of one MoE layer a token runs through: 4 h^2 (attention), h E (router) and
// topk * 3 h f (its experts).
double ActiveLayerWeights(const ModelConfig& config);

}  // namespace moe
}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_VARIANTS_MOE_MOE_H_
