// The parallel attention + MLP block (GPT-J, PaLM): both branches read one LayerNorm of the
// residual stream and are summed into it,
//
//   y = x + dropout(attn(LN(x)) + mlp(LN(x)) + b_attn + b_mlp),
//
// so that under tensor parallelism the two row-parallel outputs are summed BEFORE their
// all-reduce, and the two column-parallel input gradients before theirs: one all-reduce forward
// and one backward per layer instead of GPT-2's two each way (nn/linear.h TpReduce::kPartial).
// The row-parallel biases are added once, after the all-reduce; dropout masks are keyed by the
// global element index, as everywhere, so results do not depend on the TP degree.
//
// Parameters: "<prefix>.ln.{weight,bias}", "<prefix>.attention.*", "<prefix>.mlp.*" (GeLU MLP).
// Activations in the store's compute dtype; activation checkpointing as nn::TransformerLayer
// (keep only the input, recompute in Backward with the same masks).
#ifndef MT_MODELS_VARIANTS_PARALLEL_BLOCK_PARALLEL_BLOCK_H_
#define MT_MODELS_VARIANTS_PARALLEL_BLOCK_PARALLEL_BLOCK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nn/attention.h"
#include "nn/layer.h"
#include "nn/mlp.h"
#include "nn/norm.h"
#include "nn/transformer.h"

namespace mt {
namespace models {

class ParallelBlock : public nn::Layer {
 public:
  // InvalidArgument for a post-norm config (the block is pre-norm by construction) and the
  // modules' errors.
  static absl::StatusOr<std::unique_ptr<ParallelBlock>> Create(
      nn::ParameterStore* store, const std::string& prefix, int layer_index,
      const nn::TransformerLayerConfig& config);
  // The blocks of a stack with this config.
  static nn::LayerFactory Factory(const nn::TransformerLayerConfig& config);

  absl::Status Forward(const nn::StepContext& sc, const TensorView& x,
                       const TensorView* padding_mask, const TensorView& y) override;
  absl::Status Backward(const nn::StepContext& sc, const TensorView& dy,
                        const TensorView& dx) override;
  int64_t ActivationBytes() const override;
  int64_t backward_peak_bytes() const override { return backward_peak_bytes_; }

 private:
  ParallelBlock() = default;
  // The forward from the saved input into y; keeps what Backward needs.
  absl::Status ForwardImpl(const nn::StepContext& sc, const TensorView& y);
  void ReleaseAll();
  ops::DropoutArgs HiddenDropout(const nn::StepContext& sc) const;

  nn::TransformerLayerConfig config_;  // tp_reduce = kPartial for the attention and the MLP.
  DType dtype_ = DType::kF32;
  int layer_index_ = 0;
  std::unique_ptr<nn::Norm> ln_;
  nn::ParallelSelfAttention attention_;
  std::unique_ptr<nn::Mlp> mlp_;
  nn::SavedInput input_;
  int64_t B_ = 0, T_ = 0;
  bool saved_ = false;
  int64_t backward_peak_bytes_ = 0;
  Tensor ln_out_, branch_, mlp_out_;  // [B, T, H]
};

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_VARIANTS_PARALLEL_BLOCK_PARALLEL_BLOCK_H_
