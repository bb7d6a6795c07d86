// BERT's task heads as modules with Forward/Backward, on the encoder's output. Each keeps what
// its backward needs; the model (bert.h) owns the encoder and calls them.
//
//   MlmHead:   at the scored positions only: dense H->H, GeLU, LayerNorm, logits from the word
//              embedding (tied decoder) + an output bias [padded_vocab] split across the TP ranks
//              like the logits, vocab-parallel cross-entropy (the logits are never gathered).
//              Forward: two all-reduces (the cross-entropy); backward: one (the tied decoder's
//              input gradient).
//   SopHead:   Linear(H -> 2) on the pooled [CLS] output, serial cross-entropy, labels {0, 1}.
//   MultipleChoiceHead (RACE): pooled -> dropout -> Linear(H -> 1) -> scores [Q, C] ->
//              cross-entropy over the choices.
// The dense layers are replicated on every TP rank (nn::ReplicatedLinear). Precision: activations
// in the store's compute dtype; the MLM logits are f32 (plus the f32 master of the output bias)
// and every cross-entropy computes in f32.
#ifndef MT_MODELS_BERT_BERT_HEADS_H_
#define MT_MODELS_BERT_BERT_HEADS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "models/config.h"
#include "nn/context.h"
#include "nn/cross_entropy.h"
#include "nn/embedding.h"
#include "nn/parameter.h"
#include "nn/replicated_linear.h"
#include "nn/transformer.h"

namespace mt {
namespace models {

class MlmHead {
 public:
  MlmHead() = default;
  // Declares lm_head.dense.{weight,bias}, lm_head.layernorm.{weight,bias}, lm_head.bias [V_pad]
  // (split dim 0).
  static absl::StatusOr<MlmHead> Create(nn::ParameterStore* store, const ModelConfig& config,
                                        int64_t padded_vocab);
  // seq: [N, H] the encoder output (kept by the caller until Backward); labels_host: i32 [N] on
  // the host, the target token or ops::kIgnoreIndex. Returns the SUM of the losses over the
  // scored positions and sets *scored to their number (InvalidArgument if none).
  absl::StatusOr<double> Forward(const nn::StepContext& sc, nn::VocabParallelEmbedding& word,
                                 const TensorView& seq, const TensorView& labels_host,
                                 int64_t* scored);
  // ACCUMULATES d(scale * sum of losses) into the parameters and into dseq [N, H].
  absl::Status Backward(const nn::StepContext& sc, nn::VocabParallelEmbedding& word, double scale,
                        const TensorView& dseq);
  // The last Forward's loss of each scored position, in row order (f32 [M] on the device).
  TensorView losses() const { return losses_.view(); }
  // As Backward, with a weight per scored position: d(sum_m dlosses[m] * loss_m), dlosses f32 [M]
  // on the device (overwritten).
  absl::Status BackwardWeighted(const nn::StepContext& sc, nn::VocabParallelEmbedding& word,
                                const TensorView& dlosses, const TensorView& dseq);

 private:
  nn::ParameterStore* store_ = nullptr;
  int64_t vocab_size_ = 0;
  ops::GeluForm gelu_form_ = ops::GeluForm::kTanh;
  nn::ReplicatedLinear dense_;
  nn::LayerNormModule ln_;
  int bias_ = -1;  // Handle of lm_head.bias [V_pad] (this rank's [V_pad / tp] slice).
  Tensor bias_scratch_;
  nn::VocabParallelCrossEntropy loss_;
  // Activations of the last Forward, on the M scored positions.
  int64_t M_ = 0;
  Tensor rows_;                       // i32 [M]: rows of seq with a label
  Tensor targets_;                    // i32 [M]
  Tensor in_;                         // [M, H] seq at those rows
  Tensor dense_out_, gelu_, ln_out_;  // [M, H]
  Tensor logits_;                     // [M, V_pad / tp] f32
  Tensor losses_;                     // [M] f32
};

class SopHead {
 public:
  SopHead() = default;
  // Declares sop_head.{weight [H, 2], bias [2]}.
  static absl::StatusOr<SopHead> Create(nn::ParameterStore* store, const ModelConfig& config);
  // pooled: [B, H] (kept by the caller until Backward); labels: i32 [B] in {0, 1} on the device.
  // Returns the SUM of the losses.
  absl::StatusOr<double> Forward(const nn::StepContext& sc, const TensorView& pooled,
                                 const TensorView& labels);
  // ACCUMULATES d(scale * sum of losses) into the parameters; dpooled [B, H] is overwritten.
  absl::Status Backward(const nn::StepContext& sc, double scale, const TensorView& dpooled);

 private:
  DType dtype_ = DType::kF32;
  nn::ReplicatedLinear linear_;
  TensorView pooled_, labels_;
  Tensor logits_;  // [B, 2]
  Tensor losses_;  // [B] f32
};

class MultipleChoiceHead {
 public:
  MultipleChoiceHead() = default;
  // Declares multiple_choice_head.{weight [H, 1], bias [1]} (as Megatron; the bias adds the same
  // constant to every choice, so its gradient is zero up to rounding).
  static absl::StatusOr<MultipleChoiceHead> Create(nn::ParameterStore* store,
                                                   const ModelConfig& config);
  // pooled: [Q * C, H]; labels: i32 [Q] in [0, C) on the device. Dropout keyed by
  // (sc.sample_offset + row) * H. Returns the SUM of the losses and each question's argmax.
  absl::StatusOr<double> Forward(const nn::StepContext& sc, const TensorView& pooled,
                                 const TensorView& labels, std::vector<int>* predictions);
  // ACCUMULATES d(scale * sum of losses) into the parameters; dpooled [Q * C, H] is overwritten.
  absl::Status Backward(const nn::StepContext& sc, double scale, const TensorView& dpooled);

 private:
  ops::DropoutArgs Dropout(const nn::StepContext& sc) const;

  DType dtype_ = DType::kF32;
  float dropout_ = 0.0f;
  int64_t hidden_ = 0;
  nn::ReplicatedLinear linear_;
  int64_t Q_ = 0, C_ = 0;
  TensorView labels_;
  Tensor dropped_;  // [Q * C, H] pooled after dropout
  Tensor scores_;   // [Q * C, 1] == [Q, C]
  Tensor losses_;   // [Q] f32
};

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_BERT_BERT_HEADS_H_
