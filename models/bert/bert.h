// BERT with Megatron tensor parallelism (the Megatron-LM paper, section 3 and Tables 4-6).
//
// Encoder: vocab-parallel word embedding + learned positions + token-type embeddings, summed
// -> (post-norm only: embedding LayerNorm) -> dropout -> N bidirectional TransformerLayers with a
// padding mask -> (pre-norm only: final LayerNorm). Pre-norm is Megatron's BERT (the one that
// scales past 336M); post-norm is the original BERT.
//
// Heads, on the encoder output `seq` [B * T, H]: the pooler (dense H->H + tanh on position 0,
// [CLS], of every sequence), and the task heads of bert_heads.h: MLM (at the scored positions
// only, tied decoder) and sentence-order prediction on the pooled output (Heads::kPretraining),
// or the multiple-choice head for RACE (Heads::kMultipleChoice).
// The heads are replicated on every TP rank (nn::ReplicatedLinear), except the tied decoder and
// its bias. Initialisation: N(0, init_std), the layers' output projections N(0, init_std /
// sqrt(2 * layers)); biases zero, LayerNorm gamma one.
//
// Parameter names (GLOBAL shapes; V = padded vocab):
//   embedding.word.weight [V, H] (split dim 0), embedding.position.weight [P, H] (if
//   position_embeddings), embedding.token_type.weight [num_token_types, H],
//   embedding.layernorm.{weight,bias} [H] (post-norm only), layers.<i>.* (nn/transformer.h),
//   final_layernorm.{weight,bias} [H] (pre-norm only), pooler.dense.{weight [H, H], bias [H]},
//   and per head set (ModelOptions::heads):
//   kPretraining: lm_head.dense.{weight [H, H], bias [H]}, lm_head.layernorm.{weight,bias} [H],
//                 lm_head.bias [V] (split dim 0), sop_head.{weight [H, 2], bias [2]};
//   kMultipleChoice: multiple_choice_head.{weight [H, 1], bias [1]} (as Megatron; the bias adds
//                 the same constant to every choice, so its gradient is zero up to rounding).
//
// Pipeline stages (ModelOptions::stage; pretraining heads, no sequence parallelism): a stage
// declares the parameters above of its layers (global indices) and, on the first stage, the
// embeddings, on the last the final LayerNorm, the pooler and the heads, and a copy of the word
// embedding for the tied decoder (its gradient summed over the embedding group).
//
// Dropout masks are keyed by global element indices (sc.sample_offset counts sequences, i.e. rows
// of `tokens`), so they do not depend on the TP degree. The same object serves TP = 1 (null
// communicator) and TP > 1; every rank of a TP group calls it with the same inputs. A pretraining
// step costs, in the TP group: forward 1 (embedding) + 2 per layer + 2 (MLM cross-entropy)
// all-reduces; backward 2 per layer + 1 (tied decoder input gradient). A multiple-choice step:
// forward 1 + 2 per layer, backward 2 per layer. The pooler, SOP and multiple-choice heads
// communicate nothing.
//
// Mixed precision: the model computes in the store's compute dtype (nn::ParameterStore; f32, bf16
// or f16) with f32 master weights and f32 gradients. Activations are in the compute dtype
// (including the SOP logits and the multiple-choice scores, whose cross-entropy computes in f32);
// LayerNorms compute in f32 with their f32 master gamma/beta; the MLM logits are f32 (a GEMM with
// f32 output from the compute-dtype tied embedding) plus the f32 master of lm_head.bias, and the
// vocab-parallel cross-entropy computes in f32.
//
// Devices: the model runs where its store lives (nn::ParameterStore's device); every StepContext
// must carry an ExecContext with that `device` (InvalidArgument otherwise), and all activations
// and scratch are allocated there. The i32 inputs (tokens, token types, padding mask, labels) may
// be host tensors, as the data loaders produce them, or tensors already on that device: host
// inputs are uploaded into buffers the model keeps (reused while the shapes stay). The labels are
// also read on the host (downloaded when given on the device): the MLM labels to select the
// scored positions, the SOP labels to check them. Losses and predictions are returned on the host.
#ifndef MT_MODELS_BERT_BERT_H_
#define MT_MODELS_BERT_BERT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "models/bert/bert_heads.h"
#include "models/config.h"
#include "models/context_parallel.h"
#include "models/model.h"
#include "models/multiple_choice.h"
#include "models/pipeline_stage.h"
#include "models/sequence_parallel.h"
#include "nn/context.h"
#include "nn/cross_entropy.h"
#include "nn/embedding.h"
#include "nn/parameter.h"
#include "nn/replicated_linear.h"
#include "nn/transformer.h"

namespace mt {
namespace models {

// A Model that is also a pipeline stage (the whole model by default) and a multiple-choice model
// (FailedPrecondition from MultipleChoice when built without that head).
class BertModel : public Model, public PipelineStage, public MultipleChoiceModel {
 public:
  // Declares every parameter in `store` (whose tp_size is the TP degree); does not allocate, so it
  // also serves to count the parameters of large configs. options.heads picks the task heads
  // (the encoder and the pooler are always there). InvalidArgument if the config is not a BERT
  // config (family kBert, num_token_types >= 1) or fails ValidateParallel(store->tp_size()).
  static absl::StatusOr<std::unique_ptr<BertModel>> Create(const ModelConfig& config,
                                                           nn::ParameterStore* store,
                                                           const ModelOptions& options = {});

  const ModelConfig& config() const override { return config_; }
  int64_t padded_vocab() const override { return config_.PaddedVocab(store_->tp_size()); }
  std::vector<std::string> loss_names() const override {
    if (!has_pretraining_heads()) return {"choice loss"};
    return {"lm loss", "sop loss"};
  }

  // The training objective of the model's heads. With pretraining heads (kPretraining, kAll): the
  // pretraining step (see Batch): tokens, token_types, padding_mask, labels (MLM: the original
  // token at masked positions, -100 elsewhere; at least one scored): i32 [B, T] with
  // T <= max_position_embeddings; sop_labels: i32 [B] in {0, 1}. parts = {mean MLM cross-entropy
  // over the scored positions, mean SOP cross-entropy over the sequences}; total = their sum.
  // Errors: InvalidArgument (shapes, dtypes, no scored label, a SOP label outside {0, 1}),
  // OutOfRange (a token, token type or MLM label outside its vocabulary). With only the
  // multiple-choice head: MultipleChoice's loss, parts = {it} ("choice loss"), scored = Q.
  absl::StatusOr<Losses> ForwardBackward(const nn::StepContext& sc, const Batch& batch,
                                         Backward backward, double loss_scale = 1.0) override;
  // models/flops.h's BertModelFlops: the MLM head counted at the `scored` positions (with only the
  // multiple-choice head: the layers, the pooler and the choice scorer on every row).
  double TrainingFlops(int64_t batch, int64_t seq_length, int64_t scored) const override;

  // Multiple-choice step (MultipleChoiceModel; RACE): tokens, token_types, padding_mask: i32
  // [Q * C, T], the C choices of question q in rows q * C .. q * C + C - 1; labels: i32 [Q] in
  // [0, C). In eval mode (sc.mode) no dropout. Errors: as ForwardBackward (InvalidArgument if
  // tokens' rows are not a multiple of Q, OutOfRange for a label outside [0, C));
  // FailedPrecondition without the multiple-choice head. A masked choice (batch.choices set):
  // labels i32 [Q * C, T] (at least one scored position per row), choices i32 [Q]; the MLM head
  // scores each row by the mean log-probability of its labelled tokens; FailedPrecondition without
  // the MLM head, Unimplemented for a pipeline stage or context parallelism.
  absl::StatusOr<MultipleChoiceResult> MultipleChoice(const nn::StepContext& sc, const Batch& batch,
                                                      Backward backward,
                                                      double loss_scale = 1.0) override;

  // Pipeline stages (ModelOptions::stage, pretraining heads only): the first stage embeds, the
  // last runs the final LayerNorm, the pooler and the MLM and SOP heads and holds a copy of the
  // word embedding for the tied decoder; every stage reads the batch's padding mask. See
  // models::PipelineStage.
  absl::StatusOr<Losses> StageForward(const nn::StepContext& sc, const Batch& batch,
                                      const TensorView& input, const TensorView& output) override;
  absl::Status StageBackward(const nn::StepContext& sc, const TensorView& output_grad,
                             const TensorView& input_grad, double loss_scale = 1.0) override;
  int tied_embedding_handle() const override { return options_.stage.whole() ? -1 : word_handle_; }
  Shape StageBoundaryShape(int64_t batch, int64_t seq_length) const override;

  Heads heads() const { return options_.heads; }
  ActivationBytes activation_bytes() const override {
    return {stack_->HeldActivationBytes(), stack_->peak_backward_extra_bytes()};
  }
  PipelineStage* pipeline_stage() override { return this; }
  MultipleChoiceModel* multiple_choice() override { return this; }
  const nn::TransformerStack& stack() const { return *stack_; }

 private:
  BertModel() = default;
  bool has_pretraining_heads() const { return options_.heads != Heads::kMultipleChoice; }
  bool has_multiple_choice_head() const { return options_.heads != Heads::kPretraining; }

  // Embeddings (the first stage; the others read `input`, StageBoundaryShape) -> stack -> (the
  // last stage, pre-norm: final LayerNorm; sequence parallel: gathered); leaves the output in
  // seq_: [B * T, H] on the last stage, StageBoundaryShape on the others.
  absl::Status EncoderForward(const nn::StepContext& sc, const Batch& batch,
                              const TensorView& input = TensorView());
  // dseq: the gradient of seq_, of its shape (overwritten as scratch). A stage without the input
  // writes the gradient of its input into input_grad (StageBoundaryShape).
  absl::Status EncoderBackward(const nn::StepContext& sc, const TensorView& dseq,
                               const TensorView& input_grad = TensorView());
  // InvalidArgument unless t is contiguous i32 of `shape`.
  static absl::Status CheckI32(const char* what, const TensorView& t, const Shape& shape);
  // InvalidArgument unless `right` (the right choices, named `what` in "BERT <readout>: <what>")
  // is i32 [Q], Q >= 1, dividing the rows of tokens [Q * choices, T].
  static absl::Status CheckChoiceRows(const char* readout, const char* what,
                                      const TensorView& right, const TensorView& tokens);
  // MultipleChoice with batch.choices: the masked-LM readout (bert_masked_choice.cc).
  absl::StatusOr<MultipleChoiceResult> MaskedChoice(const nn::StepContext& sc, const Batch& batch,
                                                    Backward backward, double loss_scale);
  // InvalidArgument for MLM or SOP labels of the wrong shape or dtype, or a SOP label outside
  // {0, 1} (read on the host).
  absl::Status CheckPretrainingLabels(const nn::StepContext& sc, const Batch& batch);
  // The pretraining heads' losses on seq_ (the labels checked and read on the host).
  absl::StatusOr<Losses> PretrainingLosses(const nn::StepContext& sc, const Batch& batch);
  // The heads' backward from loss_scale * d(total) into dseq [B * T, H] (zeroed here).
  absl::Status PretrainingHeadsBackward(const nn::StepContext& sc, double loss_scale,
                                        const TensorView& dseq);
  // InvalidArgument unless t is contiguous [B_, T_, H] in the compute dtype on ec's device.
  absl::Status CheckHidden(const ExecContext& ec, const TensorView& t, const char* what) const;
  // From dh2 [B * T, H], the gradient of the embeddings after their LayerNorm (post-norm) and
  // before the dropout, into the embedding tables' gradients.
  absl::Status EmbeddingBackward(const nn::StepContext& sc, const TensorView& dh2);
  // pooled_ [B, H] = tanh(dense(seq_[position 0 of each sequence])).
  absl::Status PoolerForward(const nn::StepContext& sc);
  // Accumulates the gradient of pooled_ (dpooled [B, H], overwritten) into dseq.
  absl::Status PoolerBackward(const nn::StepContext& sc, const TensorView& dpooled,
                              const TensorView& dseq);
  // (Re)allocates the encoder's buffers for [B, T] inputs on sc's device (context parallel: this
  // rank's chunk-major rows).
  absl::Status EnsureBuffers(const nn::StepContext& sc, int64_t B, int64_t T);
  // The micro-batch's samples and sequence length: B_, T_, or with context parallelism the whole
  // of which B_, T_ are this rank's chunks.
  int64_t WholeB() const { return options_.context_parallel > 1 ? B_ / 2 : B_; }
  int64_t WholeT() const {
    return options_.context_parallel > 1 ? 2 * options_.context_parallel * T_ : T_;
  }
  ops::DropoutArgs EmbeddingDropout(const nn::StepContext& sc) const;
  // InvalidArgument unless ec runs on the store's device.
  absl::Status CheckDevice(const ExecContext& ec) const;

  ModelConfig config_;
  ModelOptions options_;
  DType dtype_ = DType::kF32;  // The store's compute dtype.
  nn::VocabParallelEmbedding word_;
  nn::ReplicatedEmbedding position_, token_type_;
  nn::LayerNormModule embedding_ln_;  // Post-norm only.
  std::unique_ptr<nn::TransformerStack> stack_;
  nn::LayerNormModule final_ln_;              // Pre-norm only.
  std::unique_ptr<SequenceParallelEnds> sp_;  // With sequence parallelism.
  int word_handle_ = -1;                      // The word embedding's (first and last stage).
  int stack_handle_ = 0;                      // The first transformer layer's first handle.
  int after_stack_handle_ = 0;                // First handle declared after the transformer layers.
  nn::ReplicatedLinear pooler_;
  MlmHead mlm_;                // With pretraining heads.
  SopHead sop_;                // With pretraining heads.
  MultipleChoiceHead choice_;  // With the multiple-choice head.
  double layer_weights_ = 0;   // Weights in one layer's matrix products (FLOPs).
  nn::ParameterStore* store_ = nullptr;

  // Activations of the last forward. Buffers are reallocated only when B or T change.
  int64_t B_ = 0, T_ = 0;
  bool mlm_here_ = false;  // The MLM head ran (context parallel: this rank's chunks score some).
  ContextParallelBatch cp_batch_;                   // This CP rank's chunks of the micro-batch.
  bool has_forward_ = false;                        // A StageForward that StageBackward can follow.
  Losses stage_losses_;                             // The last stage's last StageForward.
  TensorView tokens_, token_types_, padding_mask_;  // On the store's device.
  // Host inputs uploaded to a GPU, and device labels downloaded to be read on the host.
  Tensor tokens_staging_, token_types_staging_, padding_mask_staging_, sop_labels_staging_,
      mc_labels_staging_;
  Tensor mlm_labels_host_staging_, sop_labels_host_staging_, choices_host_staging_;
  Tensor positions_;   // i32 [B * T]
  Tensor cls_rows_;    // i32 [B]: b * T, the rows of seq_ holding position 0.
  Tensor emb_sum_;     // [B * T, H] word + position + type (post-norm: the LayerNorm input)
  Tensor emb_part_;    // [B * T, H] scratch for one embedding term
  Tensor emb_;         // [B, T, H] the stack's input (after dropout)
  Tensor final_out_;   // [B * T, H] pre-norm: the final LayerNorm's output (sequence parallel:
                       // also post-norm, the gathered stack output)
  TensorView seq_;     // [B * T, H] the encoder output: final_out_ (pre-norm) or the stack's
                       // output buffer (post-norm)
  Tensor cls_;         // [B, H] seq_ at position 0
  Tensor pooled_pre_;  // [B, H] pooler dense output
  Tensor pooled_;      // [B, H] tanh
};

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_BERT_BERT_H_
