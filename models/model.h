// The model interface: a small core every architecture implements, and capabilities a consumer
// asks for. Every consumer of a model (the trainer and the pretraining job, the evaluation
// harnesses, generation, the benchmarks, //models:describe) holds a models::Model made by
// models::CreateModel (registry.h) from a ModelConfig whose `architecture` names a registered
// factory, and a nn::ParameterStore the model declares its parameters in.
//
//   nn::ParameterStore store(tp_rank, tp_size, DType::kBF16, device);
//   ASSIGN_OR_RETURN(std::unique_ptr<Model> model, CreateModel(config, &store, options));
//   RETURN_IF_ERROR(store.Allocate(seed));
//   ASSIGN_OR_RETURN(Losses l, model->ForwardBackward(sc, batch, Backward::kYes, loss_scale));
//
// The core (Model): the config and padded vocabulary, ForwardBackward with named losses, the
// training FLOPs, the activation memory, and Logits (language models). What only some
// architectures can do is a capability, an interface of its own that Model's accessor returns, or
// null when the model's class lacks it:
//
//   accessor               interface                                     implemented by
//   incremental_decoder()  IncrementalDecoder (incremental_decoder.h)    GPT family
//   pipeline_stage()       PipelineStage (pipeline_stage.h)              GPT family, BERT
//   multiple_choice()      MultipleChoiceModel (multiple_choice.h)       BERT
//
//   ASSIGN_OR_RETURN(PipelineStage* stage, PipelineStageOf(*model));  // Unimplemented if none.
//
// A capability belongs to the class, not to how the object was built: a BERT built without the
// multiple-choice head still has the capability, and its MultipleChoice reports
// FailedPrecondition; a GPT model built as the whole model is a pipeline stage holding every
// layer.
//
// A model runs where its store lives: every StepContext must carry an ExecContext on the store's
// device (InvalidArgument otherwise). Inputs may be host tensors, as the data loaders make them,
// or tensors already on that device (uploaded into buffers the model keeps while shapes stay).
// The same object serves TP = 1 (null sc.tp) and TP > 1; every rank of a tensor-parallel group
// calls it with the same inputs. Gradients are ACCUMULATED into the store (the trainer zeroes
// them per iteration) and reported final, parameter by parameter, to sc.grads_ready.
//
// Implementations: models/gpt2 (GptModel), models/bert (BertModel), and the variant packages
// under models/variants/, which build GptModels (docs/adding_a_model.md).
#ifndef MT_MODELS_MODEL_H_
#define MT_MODELS_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "models/config.h"
#include "nn/context.h"
#include "nn/parameter.h"
#include "nn/transformer.h"

namespace mt {
namespace models {

// One micro-batch of model inputs: contiguous i32 views on the host or the model's device. Which
// fields a model reads depends on its family (the others stay empty):
//   GPT family:       tokens, labels.
//   BERT pretraining: tokens, token_types, padding_mask, labels (MLM), sop_labels.
//   multiple choice:  tokens, token_types, padding_mask [Q * C, T]; labels [Q] (the right choice).
//   masked choice:    tokens, token_types, padding_mask [Q * C, T] with each option's word pieces
//                     replaced by [MASK]; labels [Q * C, T] (those pieces at their positions);
//                     choices [Q] (the right choice).
struct Batch {
  TensorView tokens;        // [B, T], B >= 1, 1 <= T <= max_position_embeddings
  TensorView labels;        // [B, T] targets (GPT: the next token; BERT: the original token at
                            // masked positions), ops::kIgnoreIndex (-100) where not scored
  TensorView token_types;   // [B, T] in [0, num_token_types)
  TensorView padding_mask;  // [B, T] 0 at padded positions (never attended to), nonzero elsewhere
  TensorView sop_labels;    // [B] in {0, 1}: sentence order swapped
  TensorView choices;       // [Q] masked choice: the right choice (empty otherwise)
};

// The batches of each kind from their views.
inline Batch LanguageModelBatch(const TensorView& tokens, const TensorView& labels) {
  Batch b;
  b.tokens = tokens;
  b.labels = labels;
  return b;
}
inline Batch BertBatch(const TensorView& tokens, const TensorView& token_types,
                       const TensorView& padding_mask, const TensorView& mlm_labels,
                       const TensorView& sop_labels) {
  Batch b;
  b.tokens = tokens;
  b.token_types = token_types;
  b.padding_mask = padding_mask;
  b.labels = mlm_labels;
  b.sop_labels = sop_labels;
  return b;
}
inline Batch MultipleChoiceBatch(const TensorView& tokens, const TensorView& token_types,
                                 const TensorView& padding_mask, const TensorView& labels) {
  return BertBatch(tokens, token_types, padding_mask, labels, TensorView());
}
inline Batch MaskedChoiceBatch(const TensorView& tokens, const TensorView& token_types,
                               const TensorView& padding_mask, const TensorView& mlm_labels,
                               const TensorView& choices) {
  Batch b = BertBatch(tokens, token_types, padding_mask, mlm_labels, TensorView());
  b.choices = choices;
  return b;
}

// What a forward pass reports.
struct Losses {
  double total = 0;  // The loss backward differentiates (the sum of the parts that are losses).
  // Named by Model::loss_names(), in order; a model may end them with metrics that are not losses
  // (the mixture of experts' per-expert loads), logged with them.
  std::vector<double> parts;
  int64_t scored = 0;  // Targets scored by the language-model loss (labels != -100).
};

enum class Backward { kNo, kYes };

// Which task heads a model declares (the BERT family; GPT models have one language-model head).
enum class Heads {
  kPretraining,     // GPT: the tied LM head. BERT: MLM + sentence-order prediction.
  kMultipleChoice,  // BERT: RACE's multiple-choice head only.
  kAll,             // BERT: both (fine-tune a pretrained checkpoint in one store).
};

// The part of the model a pipeline stage builds (comm::PipelineSplit says which): transformer
// layers [first_layer, first_layer + num_layers), the input embedding on the first stage, the final
// norm, output layer and loss on the last. The default is the whole model. Parameters keep the
// whole model's names ("layers.<global index>...") and initial values, and dropout masks their
// global layer indices, so the stages together compute exactly what the whole model does. A tied
// word embedding is declared on both the first and the last stage
// (PipelineStage::tied_embedding_handle()).
struct StageOptions {
  int first_layer = 0;
  int num_layers = 0;  // 0: every layer from first_layer on.
  bool holds_input = true;
  bool holds_output = true;
  bool whole() const { return first_layer == 0 && num_layers == 0 && holds_input && holds_output; }
};

struct ModelOptions {
  // Activation recomputation of every layer: kYes (full) or kSelective (the attention core).
  nn::Recompute recompute = nn::Recompute::kNo;
  Heads heads = Heads::kPretraining;
  // Sequence parallelism (models/sequence_parallel.h; needs TP > 1 and a sequence length divisible
  // by TP): the stack's residual stream, norms and dropouts on this rank's slice of the sequence.
  // GPT-2 and BERT (and variants whose blocks support it) implement it; others refuse it.
  bool sequence_parallel = false;
  // Context parallelism (models/context_parallel.h): the ranks of StepContext::cp each take the
  // whole micro-batch and run their two chunks of every sequence, attention as a ring. Every step
  // must then carry a CP group of this size. GPT-2, BERT and the variants whose blocks honour it
  // implement it; others refuse it.
  int context_parallel = 1;
  StageOptions stage;  // Pipeline parallelism: which part of the model to build.
  // Expert parallelism (architectures with experts, ModelConfig::num_experts): the group of
  // ranks that split each layer's experts among them and exchange tokens (null or one rank: every
  // expert runs on every rank). Not owned; it must outlive the model. Others ignore it.
  comm::Communicator* expert_parallel = nullptr;
};

class IncrementalDecoder;   // incremental_decoder.h
class PipelineStage;        // pipeline_stage.h
class MultipleChoiceModel;  // multiple_choice.h

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;
  // The vocabulary padded for the store's TP degree (columns at or past config().vocab_size are
  // padding: masked out of every softmax).
  virtual int64_t padded_vocab() const = 0;

  // Log names of Losses::parts, in order ("lm loss", then e.g. "sop loss"); the first is a
  // language-model loss whose exp is reported as the perplexity.
  virtual std::vector<std::string> loss_names() const = 0;
  // How many leading Losses::parts come from the pipeline stage holding the output alone (all of
  // them by default). Each stage reports the parts after them for its own layers (the mixture of
  // experts' auxiliary losses and expert loads) and adds its auxiliary losses to Losses::total;
  // the trainer sums those over the stages.
  virtual int output_stage_parts() const { return static_cast<int>(loss_names().size()); }

  // The pretraining objective on one micro-batch (sc.mode selects dropout). With Backward::kYes,
  // ACCUMULATES loss_scale * d(total)/d(parameters) into the store's gradients.
  // InvalidArgument for inputs of the wrong shape, dtype or device, or with nothing scored;
  // OutOfRange for an id outside its vocabulary; FailedPrecondition if the model was created
  // without the heads this needs.
  virtual absl::StatusOr<Losses> ForwardBackward(const nn::StepContext& sc, const Batch& batch,
                                                 Backward backward, double loss_scale = 1.0) = 0;

  // Model FLOPs of one ForwardBackward with Backward::kYes (forward, backward and, with
  // recomputation, the recomputed forward) on `batch` samples of `seq_length` tokens with `scored`
  // scored targets in all, for the whole model (not this rank's shard), as Megatron counts them
  // (models/flops.h).
  virtual double TrainingFlops(int64_t batch, int64_t seq_length, int64_t scored) const = 0;

  // Bytes of activations the transformer layers hold between forward and backward (after the last
  // forward), and the largest transient extra during the last backward (a recomputed layer): what
  // activation checkpointing trades.
  struct ActivationBytes {
    int64_t held = 0;
    int64_t backward_extra = 0;
  };
  virtual ActivationBytes activation_bytes() const = 0;

  // Language models: the logits of every position, full [B * T, padded_vocab] f32 (gathered
  // across the TP ranks, identical on each), on the host or the model's device; eval mode. What
  // the evaluation harnesses score and generation recomputes. The default reports Unimplemented,
  // for models without a language-model head over all positions (BERT).
  virtual absl::Status Logits(const nn::StepContext& sc, const TensorView& tokens,
                              const TensorView& full);

  // ---- Capabilities (see the file comment): the interface, or null when the model's class has
  // none. Owned by the model (the implementations return the model itself).
  virtual IncrementalDecoder* incremental_decoder() { return nullptr; }
  virtual PipelineStage* pipeline_stage() { return nullptr; }
  virtual MultipleChoiceModel* multiple_choice() { return nullptr; }
};

// Weights in the matrix products of the layer whose parameters are named "<layer_prefix>*" (its
// 2-D parameters, global shapes): the per-layer count models/flops.h takes, whatever the layer's
// structure (12 h^2 for GPT-2's layer; 4 h^2 + 3 h f with a SwiGLU MLP of width f).
double LayerMatrixWeights(const nn::ParameterStore& store, const std::string& layer_prefix);

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_MODEL_H_
