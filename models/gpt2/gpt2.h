// GPT-2 language model with Megatron tensor parallelism: vocab-parallel word embedding + learned
// positions -> dropout -> N pre-norm TransformerLayers (causal) -> final LayerNorm -> logits from
// the word embedding (tied; or, with ModelConfig::untie_embeddings_and_output_weights, from an
// output layer of its own, "output_layer.weight", declared after the final norm) ->
// vocab-parallel cross-entropy. The same object serves TP = 1 (null
// communicator) and TP > 1; every rank of a TP group calls it with the same tokens. With
// ModelOptions::sequence_parallel the stack and the final LayerNorm run on this rank's slice of the
// sequence (models/sequence_parallel.h), gathered before the output layer.
//
// Mixed precision: the model computes in the store's compute dtype (nn::ParameterStore; f32, bf16
// or f16) with f32 master weights and f32 gradients. Activations, the residual stream included,
// are in the compute dtype; LayerNorm statistics, softmax and the loss are computed in f32; the
// logits are produced in f32 from the compute-dtype final hidden state and tied embedding (a GEMM
// with f32 output), so the vocab-parallel cross-entropy sees unrounded logits. With f16 the
// scaled loss gradient (loss_scale) can overflow when the logit gradients are rounded to f16:
// the gradients then hold inf/NaN and the optimizer skips the step.
//
// Devices: the model runs where its store lives (nn::ParameterStore's device); every StepContext
// must carry an ExecContext with that `device` (InvalidArgument otherwise), and all activations
// and scratch are allocated there. Inputs (tokens, labels) may be host tensors, as the data
// loaders produce them, or tensors already on that device: host inputs are uploaded into buffers
// the model keeps (reused while the shape stays), and the labels are read on the host (downloaded
// when given on the device) to count the scored ones. Logits' `full` may be on the host or on the
// device. The loss is returned as a host double.
//
// Incremental decoding (IncrementalDecoder: StartDecoding / DecodeStep, DecodeSlots): the stack's
// key/value caches (nn/attention.h) hold every earlier position; a step embeds only the new tokens
// (learned positions continuing from decode_length()) and computes the final LayerNorm and the
// logits of only the positions asked for. Blocks without a cache (nn::Layer's defaults) make
// StartDecoding report Unimplemented.
#ifndef MT_MODELS_GPT2_GPT2_H_
#define MT_MODELS_GPT2_GPT2_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "models/config.h"
#include "models/context_parallel.h"
#include "models/incremental_decoder.h"
#include "models/model.h"
#include "models/pipeline_stage.h"
#include "models/sequence_parallel.h"
#include "nn/context.h"
#include "nn/cross_entropy.h"
#include "nn/embedding.h"
#include "nn/layer.h"
#include "nn/norm.h"
#include "nn/parameter.h"
#include "nn/transformer.h"

namespace mt {
namespace models {

// What the architectures of the GPT family differ in (GPT-2 is the default): the blocks of the
// stack, built from the layer config the ModelConfig gives (ModelConfig::LayerConfig), and the
// norm after the last block. A variant package passes its own (docs/adding_a_model.md);
// absolute learned positions come from config.position_embeddings.
struct DecoderSpec {
  // GPT-2: nn::TransformerLayer with LayerNorm and a GeLU MLP (nn::LayerSpec{config}).
  std::function<nn::LayerFactory(const nn::TransformerLayerConfig& config)> blocks =
      [](const nn::TransformerLayerConfig& config) {
        return nn::TransformerLayers(nn::LayerSpec{config});
      };
  nn::NormFactory final_norm = nn::LayerNormFactory();
  std::string final_norm_name = "final_layernorm";  // Its parameters' prefix.
};

// A Model that is also a pipeline stage (the whole model by default) and an incremental decoder.
class GptModel : public Model, public PipelineStage, public IncrementalDecoder {
 public:
  // Declares every parameter in `store` (whose tp_size is the TP degree); does not allocate, so
  // it also serves to count the parameters of large configs. InvalidArgument for configs that
  // fail ValidateParallel(store->tp_size()) or ask for heads other than kPretraining.
  static absl::StatusOr<std::unique_ptr<GptModel>> Create(const ModelConfig& config,
                                                          nn::ParameterStore* store,
                                                          const ModelOptions& options = {},
                                                          const DecoderSpec& spec = {});

  const ModelConfig& config() const override { return config_; }
  int64_t padded_vocab() const override { return config_.PaddedVocab(store_->tp_size()); }
  std::vector<std::string> loss_names() const override { return {"lm loss"}; }

  // batch.tokens, batch.labels: contiguous i32 [B, T] with T <= max_position_embeddings; a label
  // of ops::kIgnoreIndex is not scored. parts = {mean cross-entropy (nats) over the scored
  // labels}; InvalidArgument when every label is ignored. FailedPrecondition on a pipeline stage
  // that is not the whole model (StageForward/StageBackward).
  absl::StatusOr<Losses> ForwardBackward(const nn::StepContext& sc, const Batch& batch,
                                         Backward backward, double loss_scale = 1.0) override;
  // Pipeline stages (PipelineStage; ModelOptions::stage): the first stage holds the word (tied)
  // and position embeddings, the last the final norm and a copy of the word embedding for the
  // logits.
  absl::StatusOr<Losses> StageForward(const nn::StepContext& sc, const Batch& batch,
                                      const TensorView& input, const TensorView& output) override;
  absl::Status StageBackward(const nn::StepContext& sc, const TensorView& output_grad,
                             const TensorView& input_grad, double loss_scale = 1.0) override;
  int tied_embedding_handle() const override;
  Shape StageBoundaryShape(int64_t batch, int64_t seq_length) const override;
  // Megatron's formula (models/flops.h) for this stage's layers (and the logits on the stage that
  // holds the output); `scored` does not matter (every position's logits are computed).
  double TrainingFlops(int64_t batch, int64_t seq_length, int64_t scored) const override;
  // Full logits [B * T, padded_vocab] (gathered across TP ranks) for generation.
  absl::Status Logits(const nn::StepContext& sc, const TensorView& tokens,
                      const TensorView& full) override;

  // Incremental decoding (IncrementalDecoder): see the file comment.
  absl::Status StartDecoding(const nn::StepContext& sc, int64_t batch, int64_t max_length) override;
  absl::Status DecodeStep(const nn::StepContext& sc, const TensorView& tokens,
                          const TensorView& logits) override;
  int64_t decode_length() const override { return stack_->decode_length(); }
  void StopDecoding() override;
  absl::Status DecodeSlots(const nn::StepContext& sc, absl::Span<const SlotTokens> spans,
                           const TensorView& logits) override;
  absl::Status ResetSlot(int64_t slot) override { return stack_->ResetSlot(slot); }
  int64_t slot_length(int64_t slot) const override {
    return stack_->decode_batch() == 0 ? 0 : stack_->slot_length(slot);
  }

  ActivationBytes activation_bytes() const override {
    return {stack_->HeldActivationBytes(), stack_->peak_backward_extra_bytes()};
  }
  IncrementalDecoder* incremental_decoder() override { return this; }
  PipelineStage* pipeline_stage() override { return this; }
  const nn::TransformerStack& stack() const { return *stack_; }

 private:
  // Buffers of one decoding step of n positions per sequence, R of which get logits.
  struct DecodeBuffers {
    int64_t rows = 0, out_rows = 0;  // N (B * n), R.
    Tensor tokens_staging;           // Host tokens uploaded to a GPU.
    Tensor positions;                // i32 [N]
    Tensor emb, pos_emb;             // [N, H] compute dtype
    Tensor last_index;               // i32 [R]: the row of each sequence's last new position
    Tensor last, final;              // [R, H] compute dtype
    Tensor logits;                   // [R, V_pad / tp] f32
  };

  GptModel() = default;
  // InvalidArgument unless ec runs on the store's device.
  absl::Status CheckDevice(const ExecContext& ec) const;
  // InvalidArgument for tokens that are not i32 [B, T] with 1 <= T <= max_position_embeddings;
  // (re)allocates the activation buffers for [B, T].
  // With context parallelism tokens are this rank's chunks ([2B, c], models/context_parallel.h).
  absl::Status PrepareForward(const nn::StepContext& sc, const TensorView& tokens);
  // The embeddings (first stage) or `input` (the others) through this stage's layers: returns the
  // stack's output [B, T, H].
  absl::StatusOr<TensorView> RunLayers(const nn::StepContext& sc, const TensorView& tokens,
                                       const TensorView& input);
  // The whole model up to the logits (logits_).
  absl::Status Forward(const nn::StepContext& sc, const TensorView& tokens);
  // The loss of logits_ against `labels` (this rank's, chunk-major with context parallelism),
  // normalised by the count of scored `whole_labels` (the whole micro-batch's; into scored_) and
  // summed over the CP group.
  absl::StatusOr<Losses> Loss(const nn::StepContext& sc, const TensorView& labels,
                              const TensorView& whole_labels);
  // The backward of Loss and of the head: d(scaled loss)/d(stack output) into dh, [B, T, H]
  // ([B, T / tp, H], this rank's slice, with sequence parallelism).
  absl::Status HeadBackward(const nn::StepContext& sc, double loss_scale, const TensorView& dh);
  // The final norm of the stack's output h into final_ (gathered from the sequence slices with
  // sequence parallelism).
  absl::Status FinalNorm(const nn::StepContext& sc, const TensorView& h);
  // InvalidArgument unless t is [B_, T_, H] in the compute dtype on ec's device.
  absl::Status CheckHidden(const ExecContext& ec, const TensorView& t, const char* what) const;
  // Gathers this rank's logits shard [N, V_pad / tp] into full [N, V_pad] (host or device).
  absl::Status GatherInto(const nn::StepContext& sc, const TensorView& shard,
                          const TensorView& full);
  absl::Status EnsureDecodeBuffers(const ExecContext& ec, int64_t rows, int64_t out_rows);
  // A decoding step's work on checked arguments: tokens i32 [N] (host or device), the packed rows
  // of `spans` at host `positions` [N]; the logits of the rows `last` names (null: every row).
  absl::Status Decode(const nn::StepContext& sc, const TensorView& tokens,
                      const std::vector<int32_t>& positions, absl::Span<const nn::DecodeSpan> spans,
                      const std::vector<int32_t>* last, const TensorView& logits);
  ops::DropoutArgs EmbeddingDropout(const nn::StepContext& sc, int64_t T) const;
  // The whole sequence's length: T_, or with context parallelism the 2 C chunks of T_.
  int64_t WholeT() const {
    return options_.context_parallel > 1 ? 2 * options_.context_parallel * T_ : T_;
  }
  // What the logits come from: output_ when untied, else word_.
  nn::VocabParallelEmbedding& head() {
    return config_.untie_embeddings_and_output_weights ? output_ : word_;
  }

  ModelConfig config_;
  ModelOptions options_;
  nn::ParameterStore* store_ = nullptr;
  DType dtype_ = DType::kF32;  // The store's compute dtype.
  nn::VocabParallelEmbedding word_;
  // With config.untie_embeddings_and_output_weights: the output layer, on the stage that holds
  // the output (head() is it, else the word embedding).
  nn::VocabParallelEmbedding output_;
  nn::ReplicatedEmbedding position_;
  std::unique_ptr<nn::TransformerStack> stack_;
  std::unique_ptr<nn::Norm> final_norm_;
  std::unique_ptr<SequenceParallelEnds> sp_;  // With sequence parallelism.
  int final_norm_handle_ = 0;  // Parameters from here on are final after final_norm_'s Backward.
  int word_handle_ = -1;       // The word embedding's handle, -1 on a stage without it.
  int stack_handle_ = 0;       // The first layer's first parameter.
  bool has_forward_ = false;   // A forward ran since the buffers were (re)made.
  double layer_weights_ = 0;   // Weights in one block's matrix products (FLOPs).
  nn::VocabParallelCrossEntropy loss_;
  // Activations of the last Forward.
  int64_t B_ = 0, T_ = 0;
  int64_t scored_ = 0;             // Labels the last Loss scored.
  int cp_layout_ = -1;             // The CP size and rank positions_ was built for.
  ContextParallelBatch cp_batch_;  // This CP rank's chunks of the micro-batch.
  TensorView tokens_;              // On the store's device: the caller's tokens or tokens_staging_.
  Tensor tokens_staging_, labels_staging_;  // Host inputs uploaded to a GPU.
  Tensor labels_host_staging_;              // Device labels downloaded to be counted.
  Tensor positions_;                        // i32 [B * T]
  Tensor emb_;                              // [B, T, H] compute dtype
  Tensor pos_emb_;                          // [B * T, H] compute dtype
  Tensor final_;                            // [B * T, H] compute dtype, after the final LayerNorm
  Tensor logits_;                           // [B * T, V_pad / tp] f32
  Tensor losses_;                           // [B * T] f32
  DecodeBuffers decode_;
};

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_GPT2_GPT2_H_
