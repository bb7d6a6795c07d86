// LayerNorm module, TransformerLayer (pre-norm or post-norm) and TransformerStack.
//
//   pre-norm (GPT-2, Megatron BERT):  x1 = x + drop(attn(LN1(x)));  y = x1 + drop(mlp(LN2(x1)))
//   post-norm (original BERT):        x1 = LN1(x + drop(attn(x)));  y = LN2(x1 + drop(mlp(x1)))
//
// A layer does exactly two TP all-reduces forward and two backward. Hidden dropout acts on the
// replicated [B, T, H] stream with masks keyed by the global element index (sample_offset * T * H
// + i), identical on the TP ranks and independent of the TP and DP degrees.
//
// Precision: activations (the residual stream included) are in the store's compute dtype (f32,
// bf16 or f16). LayerNorm computes its statistics in f32 and reads gamma/beta as the f32 MASTER
// weights (ParameterStore::value, which the op accepts next to a 16-bit x), accumulating their
// gradients in f32: unlike Megatron, which casts them to the compute dtype, they are never rounded.
//
// Activation checkpointing (Recompute::kYes): after Forward a layer keeps only its input (owned by
// the stack) and frees everything else; Backward first re-runs Forward, with the same dropout
// masks, then back-propagates. Gradients are bit-identical to the stored-activation path; the
// recomputation repeats the forward's two all-reduces inside Backward.
#ifndef MT_NN_TRANSFORMER_H_
#define MT_NN_TRANSFORMER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/ops/elementwise.h"
#include "core/ops/softmax.h"
#include "core/tensor.h"
#include "nn/attention.h"
#include "nn/context.h"
#include "nn/mlp.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {

enum class NormPosition { kPreNorm, kPostNorm };
enum class Recompute { kNo, kYes };

// LayerNorm over the last dim with replicated gamma (ones) and beta (zeros), no weight decay; x and
// y in any float dtype, gamma/beta read as f32 masters, statistics and gradients in f32.
class LayerNormModule {
 public:
  LayerNormModule() = default;
  static absl::StatusOr<LayerNormModule> Create(ParameterStore* store, const std::string& prefix,
                                                int64_t hidden, float eps);
  // x, y: [N, H]; saves x (a view) and the row statistics.
  absl::Status Forward(const StepContext& sc, const TensorView& x, const TensorView& y);
  // dx overwritten (may not alias dy); gamma/beta gradients accumulated.
  absl::Status Backward(const StepContext& sc, const TensorView& dy, const TensorView& dx);
  void Release();
  int64_t ActivationBytes() const { return mean_.nbytes() + rstd_.nbytes(); }

 private:
  ParameterStore* store_ = nullptr;
  int gamma_ = -1, beta_ = -1;
  float eps_ = 1e-5f;
  TensorView x_;
  Tensor mean_, rstd_, dgamma_, dbeta_;
};

struct TransformerLayerConfig {
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t ffn = 0;  // 0: 4 * hidden.
  NormPosition norm = NormPosition::kPreNorm;
  ops::CausalMask causal = ops::CausalMask::kYes;
  float hidden_dropout = 0.0f;
  float attention_dropout = 0.0f;
  float layernorm_eps = 1e-5f;
  double init_std = 0.02;
  double output_init_std = 0.02;
  Recompute recompute = Recompute::kNo;
};

class TransformerLayer {
 public:
  static absl::StatusOr<std::unique_ptr<TransformerLayer>> Create(
      ParameterStore* store, const std::string& prefix, int layer_index,
      const TransformerLayerConfig& config);
  // x: [B, T, H] in the compute dtype, kept alive by the caller until Backward; y: [B, T, H].
  // InvalidArgument for another shape or dtype.
  absl::Status Forward(const StepContext& sc, const TensorView& x, const TensorView* padding_mask,
                       const TensorView& y);
  // dy: [B, T, H]; dx: [B, T, H] (compute dtype).
  absl::Status Backward(const StepContext& sc, const TensorView& dy, const TensorView& dx);
  // Bytes of activations this layer holds now (excluding its input).
  int64_t ActivationBytes() const;
  // Bytes held at the start of the last Backward (after any recomputation).
  int64_t backward_peak_bytes() const { return backward_peak_bytes_; }

 private:
  TransformerLayer() = default;
  absl::Status ForwardImpl(const StepContext& sc, const TensorView& y);
  void ReleaseAll();
  ops::DropoutArgs HiddenDropout(const StepContext& sc, int site) const;

  TransformerLayerConfig config_;
  DType dtype_ = DType::kF32;  // The store's compute dtype.
  int layer_index_ = 0;
  LayerNormModule ln1_, ln2_;
  ParallelSelfAttention attention_;
  ParallelMLP mlp_;
  TensorView x_;
  const TensorView* padding_mask_ = nullptr;
  TensorView padding_mask_copy_;
  int64_t B_ = 0, T_ = 0;
  bool saved_ = false;
  int64_t backward_peak_bytes_ = 0;
  // [B, T, H] buffers. Pre-norm: ln1_out_, x1_, ln2_out_. Post-norm: s1_, x1_, s2_.
  Tensor ln1_out_, x1_, ln2_out_, s1_, s2_, branch_;
};

class TransformerStack {
 public:
  // Layers named "<prefix>.<i>".
  static absl::StatusOr<std::unique_ptr<TransformerStack>> Create(
      ParameterStore* store, const std::string& prefix, int num_layers,
      const TransformerLayerConfig& config);
  // x: [B, T, H] in the compute dtype; returns a view of the stack's output buffer (valid until
  // the next Forward).
  absl::StatusOr<TensorView> Forward(const StepContext& sc, const TensorView& x,
                                     const TensorView* padding_mask);
  // dy: [B, T, H]; dx: [B, T, H] (may alias dy).
  absl::Status Backward(const StepContext& sc, const TensorView& dy, const TensorView& dx);
  int num_layers() const { return static_cast<int>(layers_.size()); }
  // Activation bytes held between Forward and Backward (layer internals plus the residual stream
  // buffers), and the largest transient extra seen during the last Backward (a recomputed layer).
  int64_t HeldActivationBytes() const;
  int64_t peak_backward_extra_bytes() const { return peak_backward_extra_; }

 private:
  std::vector<std::unique_ptr<TransformerLayer>> layers_;
  std::vector<int> first_handles_;  // The first parameter handle of each layer.
  std::vector<Tensor> hidden_;  // [L + 1] x [B, T, H]; hidden_[0] is a copy of the input.
  int64_t peak_backward_extra_ = 0;
};

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_TRANSFORMER_H_
