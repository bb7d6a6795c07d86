#include "models/bert/bert.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/reduce.h"
#include "core/ops/tanh.h"
#include "core/status.h"
#include "models/context_parallel.h"
#include "models/flops.h"
#include "models/registry.h"
#include "nn/linear.h"

namespace mt {
namespace models {

namespace {
// Dropout "layer" index no transformer layer uses (as GptModel), with one site per use (the
// multiple-choice head's is site 1, bert_heads.cc).
constexpr int kOutsideLayersDropout = 4095;
constexpr int kEmbeddingDropoutSite = 0;

// Context parallelism: on the CPU, for the pretraining heads.
absl::Status CheckBertContextParallel(const ModelOptions& options, const Device& device) {
  RETURN_IF_ERROR(CheckContextParallel("BERT", options.context_parallel, device));
  if (options.context_parallel > 1 && options.heads != Heads::kPretraining) {
    return absl::UnimplementedError(
        "BERT: context parallelism is implemented for the pretraining heads; fine-tune with "
        "--context_parallel_size=1");
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status BertModel::CheckI32(const char* what, const TensorView& t, const Shape& shape) {
  if (t.dtype != DType::kI32 || t.shape != shape || !t.IsContiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BERT: ", what, " ", t.DebugString(), " must be contiguous i32 ", ShapeToString(shape)));
  }
  return absl::OkStatus();
}

absl::Status BertModel::CheckChoiceRows(const char* readout, const char* what,
                                        const TensorView& right, const TensorView& tokens) {
  if (right.rank() != 1 || right.dtype != DType::kI32 || right.numel() < 1 || tokens.rank() != 2 ||
      tokens.dim(0) % right.numel() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BERT ", readout, ": ", what, " ", right.DebugString(), " must be i32 [Q] with Q >= 1 ",
        "dividing the rows of tokens ", tokens.DebugString(), " ([Q * choices, T])"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BertModel>> BertModel::Create(const ModelConfig& config,
                                                             nn::ParameterStore* store,
                                                             const ModelOptions& options) {
  if (config.family != Family::kBert) {
    return absl::InvalidArgumentError("BERT: the config's family is not kBert");
  }
  RETURN_IF_ERROR(config.ValidateParallel(store->tp_size()));
  RETURN_IF_ERROR(CheckBertContextParallel(options, store->device()));
  const StageOptions& stage = options.stage;
  if (!stage.whole() && options.heads != Heads::kPretraining) {
    return absl::UnimplementedError(
        "BERT: pipeline stages are implemented for the pretraining heads");
  }
  ASSIGN_OR_RETURN(const int layers, StageLayerCount(stage, config, "BERT"));
  std::unique_ptr<BertModel> m(new BertModel());
  m->config_ = config;
  m->options_ = options;
  m->store_ = store;
  m->dtype_ = store->compute_dtype();
  const int64_t H = config.hidden_size;
  const double init_std = config.init_std;
  const int64_t padded_vocab = config.PaddedVocab(store->tp_size());
  // The word embedding: on the first stage, and on the last for the MLM head's tied decoder.
  if (stage.holds_input || stage.holds_output) {
    m->word_handle_ = store->size();
    ASSIGN_OR_RETURN(m->word_,
                     nn::VocabParallelEmbedding::Create(store, "embedding.word", config.vocab_size,
                                                        padded_vocab, H, init_std));
  }
  const bool post_norm = config.norm == nn::NormPosition::kPostNorm;
  if (stage.holds_input) {
    if (config.position_embeddings) {
      ASSIGN_OR_RETURN(m->position_, nn::ReplicatedEmbedding::Create(store, "embedding.position",
                                                                     config.max_position_embeddings,
                                                                     H, init_std));
    }
    ASSIGN_OR_RETURN(m->token_type_,
                     nn::ReplicatedEmbedding::Create(store, "embedding.token_type",
                                                     config.num_token_types, H, init_std));
    if (post_norm) {
      ASSIGN_OR_RETURN(m->embedding_ln_, nn::LayerNormModule::Create(store, "embedding.layernorm",
                                                                     H, config.layernorm_eps));
    }
  }
  nn::TransformerLayerConfig lc = config.LayerConfig(ops::CausalMask::kNo, options.recompute);
  lc.sequence_parallel = options.sequence_parallel;
  m->stack_handle_ = store->size();
  ASSIGN_OR_RETURN(m->stack_,
                   nn::TransformerStack::Create(
                       store, "layers", layers,
                       StageBlocks(nn::TransformerLayers(nn::LayerSpec{lc}), stage.first_layer)));
  m->layer_weights_ = LayerMatrixWeights(*store, absl::StrCat("layers.", stage.first_layer, "."));
  m->after_stack_handle_ = store->size();  // The final LayerNorm and the heads come after.
  if (!stage.holds_output) {
    // Sequence parallel stages pass slices of the sequence; the first one scatters into them.
    if (options.sequence_parallel) {
      m->sp_ = std::make_unique<SequenceParallelEnds>(store, nullptr, store->size(), store->size());
    }
    return m;
  }
  if (!post_norm) {
    ASSIGN_OR_RETURN(m->final_ln_, nn::LayerNormModule::Create(store, "final_layernorm", H,
                                                               config.layernorm_eps));
  }
  if (options.sequence_parallel) {
    m->sp_ = std::make_unique<SequenceParallelEnds>(store, post_norm ? nullptr : &m->final_ln_,
                                                    m->after_stack_handle_, store->size());
  }
  ASSIGN_OR_RETURN(m->pooler_, nn::ReplicatedLinear::Create(store, "pooler.dense", H, H,
                                                            nn::Bias::kYes, init_std));
  if (m->has_pretraining_heads()) {
    ASSIGN_OR_RETURN(m->mlm_, MlmHead::Create(store, config, padded_vocab));
    ASSIGN_OR_RETURN(m->sop_, SopHead::Create(store, config));
  }
  if (m->has_multiple_choice_head()) {
    ASSIGN_OR_RETURN(m->choice_, MultipleChoiceHead::Create(store, config));
  }
  return m;
}

absl::Status BertModel::CheckDevice(const ExecContext& ec) const {
  if (ec.device == store_->device()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("BERT: the step's ExecContext runs on ", ec.device.ToString(),
                   " but the parameter store lives on ", store_->device().ToString()));
}

ops::DropoutArgs BertModel::EmbeddingDropout(const nn::StepContext& sc) const {
  return sc.Dropout(config_.hidden_dropout, kOutsideLayersDropout, kEmbeddingDropoutSite,
                    WholeT() * config_.hidden_size);
}

absl::Status BertModel::EnsureBuffers(const nn::StepContext& sc, int64_t B, int64_t T) {
  const ExecContext& ec = *sc.exec;
  if (B == B_ && T == T_ && positions_.device() == ec.device) return absl::OkStatus();
  const int64_t H = config_.hidden_size, N = B * T;
  B_ = T_ = 0;  // Until every buffer is allocated.
  has_forward_ = false;
  const StageOptions& stage = options_.stage;
  const int64_t samples = options_.context_parallel > 1 ? B / 2 : B;
  // Index tensors are built on the host and uploaded (context parallel: this rank's chunks).
  const Tensor positions = CpPositions(sc, samples, T);
  ASSIGN_OR_RETURN(positions_, CopyToDevice(ec, positions.view()));
  if (stage.holds_input) {
    ASSIGN_OR_RETURN(emb_sum_, Alloc(ec, {N, H}, dtype_));
    ASSIGN_OR_RETURN(emb_part_, Alloc(ec, {N, H}, dtype_));
    ASSIGN_OR_RETURN(emb_, Alloc(ec, {B, T, H}, dtype_));
  }
  if (stage.holds_output) {
    // Position 0 of each sample (context parallel: CP rank 0's first half, chunk 0).
    Tensor cls_rows = Tensor::Host({samples}, DType::kI32);
    for (int64_t b = 0; b < samples; ++b) {
      cls_rows.data_as<int32_t>()[b] = static_cast<int32_t>(b * T);
    }
    ASSIGN_OR_RETURN(cls_rows_, CopyToDevice(ec, cls_rows.view()));
    if (config_.norm == nn::NormPosition::kPreNorm || sp_ != nullptr) {
      ASSIGN_OR_RETURN(final_out_, Alloc(ec, {N, H}, dtype_));
    }
    ASSIGN_OR_RETURN(cls_, Alloc(ec, {samples, H}, dtype_));
    ASSIGN_OR_RETURN(pooled_pre_, Alloc(ec, {samples, H}, dtype_));
    ASSIGN_OR_RETURN(pooled_, Alloc(ec, {samples, H}, dtype_));
  }
  B_ = B;
  T_ = T;
  return absl::OkStatus();
}

Shape BertModel::StageBoundaryShape(int64_t batch, int64_t seq_length) const {
  return ContextParallelBoundaryShape(batch, seq_length, options_.context_parallel,
                                      sp_ != nullptr ? store_->tp_size() : 1, config_.hidden_size);
}

absl::Status BertModel::CheckHidden(const ExecContext& ec, const TensorView& t,
                                    const char* what) const {
  return CheckStageBoundary("BERT", ec, t, dtype_, WholeB(), WholeT(), what);
}

absl::Status BertModel::EncoderForward(const nn::StepContext& sc, const Batch& batch,
                                       const TensorView& input) {
  const TensorView& tokens = batch.tokens;
  if (tokens.rank() != 2 || tokens.dtype != DType::kI32) {
    return absl::InvalidArgumentError(
        absl::StrCat("BERT: tokens ", tokens.DebugString(), " must be i32 [B, T]"));
  }
  const int64_t B = tokens.dim(0), T = tokens.dim(1), H = config_.hidden_size, N = B * T;
  // Context parallel: this rank's chunks [2 B', c] of sequences of 2 C c positions, and the
  // padding mask of all of them ([2 C B', c], models/context_parallel.h).
  const int cp = options_.context_parallel;
  const int64_t whole_T = cp > 1 ? 2 * cp * T : T;
  if (whole_T > config_.max_position_embeddings || T < 1 || B < 1 || (cp > 1 && B % 2 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BERT: tokens ", tokens.DebugString(), " need B >= 1 and a sequence length in [1, ",
        "max_position_embeddings = ", config_.max_position_embeddings, "]"));
  }
  RETURN_IF_ERROR(CheckI32("tokens", tokens, tokens.shape));
  RETURN_IF_ERROR(CheckI32("token_types", batch.token_types, tokens.shape));
  RETURN_IF_ERROR(CheckI32("padding_mask", batch.padding_mask, {cp > 1 ? cp * B : B, T}));
  const ExecContext& ec = *sc.exec;
  RETURN_IF_ERROR(CheckDevice(ec));
  RETURN_IF_ERROR(EnsureBuffers(sc, B, T));
  ASSIGN_OR_RETURN(padding_mask_,
                   OnDevice(ec, batch.padding_mask, &padding_mask_staging_, "BERT: padding_mask"));
  const StageOptions& stage = options_.stage;
  TensorView x;  // The stack's input: [B, T, H], or this rank's slice [B, T / tp, H] (SP).
  if (!stage.holds_input) {
    RETURN_IF_ERROR(CheckHidden(ec, input, "input"));
    x = input;
  } else {
    ASSIGN_OR_RETURN(tokens_, OnDevice(ec, tokens, &tokens_staging_, "BERT: tokens"));
    ASSIGN_OR_RETURN(token_types_,
                     OnDevice(ec, batch.token_types, &token_types_staging_, "BERT: token_types"));
    const TensorView sum = emb_sum_.view(), part = emb_part_.view();
    RETURN_IF_ERROR(word_.Forward(sc, tokens_, sum));
    if (config_.position_embeddings) {
      RETURN_IF_ERROR(position_.Forward(sc, positions_.view(), part));
      RETURN_IF_ERROR(ops::Add(ec, sum, part, sum));
    }
    RETURN_IF_ERROR(token_type_.Forward(sc, token_types_, part));
    RETURN_IF_ERROR(ops::Add(ec, sum, part, sum));
    ASSIGN_OR_RETURN(TensorView emb2, emb_.view().Reshape({N, H}));
    TensorView before_dropout = sum;
    if (config_.norm == nn::NormPosition::kPostNorm) {
      RETURN_IF_ERROR(embedding_ln_.Forward(sc, sum, emb2));
      before_dropout = emb2;
    }
    if (sp_ != nullptr) {
      // Sequence parallel: the stack (and the final LayerNorm) on this rank's slice.
      ASSIGN_OR_RETURN(TensorView emb3, before_dropout.Reshape({B, T, H}));
      ASSIGN_OR_RETURN(x, sp_->Enter(sc, emb3, EmbeddingDropout(sc)));
    } else {
      RETURN_IF_ERROR(CpDropout(sc, before_dropout, EmbeddingDropout(sc), T, H, false, emb2));
      x = emb_.view();
    }
  }
  ASSIGN_OR_RETURN(TensorView h, stack_->Forward(sc, x, &padding_mask_));
  if (!stage.holds_output) {
    seq_ = h;  // The stack's output buffer (StageBoundaryShape), valid until the next forward.
    return absl::OkStatus();
  }
  if (sp_ != nullptr) {
    RETURN_IF_ERROR(sp_->Exit(sc, h, final_out_.view()));  // Gathered from the slices.
    seq_ = final_out_.view();
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(TensorView h2, h.Reshape({N, H}));
  if (config_.norm == nn::NormPosition::kPreNorm) {
    RETURN_IF_ERROR(final_ln_.Forward(sc, h2, final_out_.view()));
    seq_ = final_out_.view();
  } else {
    seq_ = h2;  // The stack's output buffer, valid until the next forward.
  }
  return absl::OkStatus();
}

absl::Status BertModel::EncoderBackward(const nn::StepContext& sc, const TensorView& dseq,
                                        const TensorView& input_grad) {
  const int64_t N = B_ * T_, H = config_.hidden_size;
  const ExecContext& ec = *sc.exec;
  const StageOptions& stage = options_.stage;
  // The stack's output gradient: [B, T, H], or this rank's slice [B, T / tp, H] (SP).
  Tensor dh_buffer;
  TensorView dh;
  if (!stage.holds_output) {
    dh = dseq;  // The next stage's input gradient (StageBoundaryShape).
  } else {
    if (sp_ != nullptr) {
      ASSIGN_OR_RETURN(dh_buffer, Alloc(ec, StageBoundaryShape(WholeB(), WholeT()), dtype_));
      RETURN_IF_ERROR(sp_->ExitBackward(sc, dseq, dh_buffer.view()));
      dh = dh_buffer.view();
    } else if (config_.norm == nn::NormPosition::kPreNorm) {
      ASSIGN_OR_RETURN(dh_buffer, Alloc(ec, {B_, T_, H}, dtype_));
      ASSIGN_OR_RETURN(TensorView dh2, dh_buffer.view().Reshape({N, H}));
      RETURN_IF_ERROR(final_ln_.Backward(sc, dseq, dh2));
      dh = dh_buffer.view();
    } else {
      ASSIGN_OR_RETURN(dh, dseq.Reshape({B_, T_, H}));
    }
    // The heads' backward passes have run, and the final LayerNorm's: what follows the layers is
    // final.
    RETURN_IF_ERROR(sc.NotifyGradsReady(after_stack_handle_));
  }
  RETURN_IF_ERROR(stack_->Backward(sc, dh, dh));
  if (!stage.holds_input) {
    RETURN_IF_ERROR(CopyTensor(ec, dh, input_grad));
    return sc.NotifyGradsReady(stack_handle_);
  }
  if (sp_ != nullptr) {
    // The whole sequence's embedding gradient: into dseq where it is that size (free now).
    Tensor demb_buffer;
    TensorView demb = dseq;
    if (!stage.holds_output) {
      ASSIGN_OR_RETURN(demb_buffer, Alloc(ec, {N, H}, dtype_));
      demb = demb_buffer.view();
    }
    RETURN_IF_ERROR(sp_->EnterBackward(sc, dh, EmbeddingDropout(sc), demb));
    return EmbeddingBackward(sc, demb);
  }
  ASSIGN_OR_RETURN(TensorView dh2, dh.Reshape({N, H}));
  RETURN_IF_ERROR(CpDropout(sc, dh2, EmbeddingDropout(sc), T_, H, true, dh2));
  return EmbeddingBackward(sc, dh2);
}

absl::Status BertModel::EmbeddingBackward(const nn::StepContext& sc, const TensorView& dh2) {
  TensorView dsum = dh2;
  if (config_.norm == nn::NormPosition::kPostNorm) {
    dsum = emb_part_.view();  // Free after the forward: scratch for the LayerNorm's input grad.
    RETURN_IF_ERROR(embedding_ln_.Backward(sc, dh2, dsum));
  }
  RETURN_IF_ERROR(word_.Backward(sc, tokens_, dsum));
  if (config_.position_embeddings) RETURN_IF_ERROR(position_.Backward(sc, positions_.view(), dsum));
  RETURN_IF_ERROR(token_type_.Backward(sc, token_types_, dsum));
  return sc.NotifyGradsReady(0);
}

absl::Status BertModel::PoolerForward(const nn::StepContext& sc) {
  const ExecContext& ec = *sc.exec;
  RETURN_IF_ERROR(ops::Embedding(ec, cls_rows_.view(), seq_, cls_.view()));  // Gathers rows.
  RETURN_IF_ERROR(pooler_.Forward(sc, cls_.view(), pooled_pre_.view()));
  return ops::Tanh(ec, pooled_pre_.view(), pooled_.view());
}

absl::Status BertModel::PoolerBackward(const nn::StepContext& sc, const TensorView& dpooled,
                                       const TensorView& dseq) {
  const ExecContext& ec = *sc.exec;
  RETURN_IF_ERROR(ops::TanhBackward(ec, pooled_.view(), dpooled, dpooled));
  ASSIGN_OR_RETURN(Tensor dcls, Alloc(ec, cls_.shape(), dtype_));
  RETURN_IF_ERROR(pooler_.Backward(sc, cls_.view(), dpooled, dcls.view()));
  // Scatter-adds the [CLS] rows' gradient into dseq.
  return ops::EmbeddingBackward(ec, cls_rows_.view(), dcls.view(), dseq);
}

absl::Status BertModel::CheckPretrainingLabels(const nn::StepContext& sc, const Batch& batch) {
  const TensorView& tokens = batch.tokens;
  RETURN_IF_ERROR(CheckI32("mlm_labels", batch.labels, tokens.shape));
  if (tokens.rank() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("BERT: tokens ", tokens.DebugString(), " must be i32 [B, T]"));
  }
  RETURN_IF_ERROR(CheckI32("sop_labels", batch.sop_labels, {tokens.dim(0)}));
  const ExecContext& ec = *sc.exec;
  RETURN_IF_ERROR(CheckDevice(ec));
  // Labels are read on the host (where the data loaders make them; downloaded otherwise).
  ASSIGN_OR_RETURN(TensorView sop_host,
                   OnHost(ec, batch.sop_labels, &sop_labels_host_staging_, "BERT: sop_labels"));
  const int32_t* sop = sop_host.data_as<int32_t>();
  for (int64_t b = 0; b < sop_host.numel(); ++b) {
    if (sop[b] != 0 && sop[b] != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("BERT: sop_labels[", b, "] = ", sop[b], " must be 0 or 1"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Losses> BertModel::PretrainingLosses(const nn::StepContext& sc, const Batch& batch) {
  const ExecContext& ec = *sc.exec;
  const int64_t B = WholeB(), N = B_ * T_;
  ASSIGN_OR_RETURN(TensorView mlm_host,
                   OnHost(ec, batch.labels, &mlm_labels_host_staging_, "BERT: mlm_labels"));
  ASSIGN_OR_RETURN(TensorView mlm_flat, mlm_host.Reshape({N}));
  // Context parallel: a rank's chunks may hold no scored position, and only CP rank 0 holds the
  // [CLS] positions; the sums (and the count) are over the CP group.
  int64_t scored_here = 0;
  for (int64_t i = 0; i < N; ++i)
    scored_here += mlm_flat.data_as<int32_t>()[i] != ops::kIgnoreIndex;
  mlm_here_ = scored_here > 0 || sc.cp_size() == 1;
  double mlm_local = 0, sop_local = 0;
  Losses losses;
  if (mlm_here_) {
    ASSIGN_OR_RETURN(mlm_local, mlm_.Forward(sc, word_, seq_, mlm_flat, &losses.scored));
  }
  if (sc.cp_rank() == 0) {
    RETURN_IF_ERROR(PoolerForward(sc));
    ASSIGN_OR_RETURN(const TensorView sop_dev,
                     OnDevice(ec, batch.sop_labels, &sop_labels_staging_, "BERT: sop_labels"));
    ASSIGN_OR_RETURN(sop_local, sop_.Forward(sc, pooled_.view(), sop_dev));
  }
  ASSIGN_OR_RETURN(const std::vector<double> sums,
                   CpSum(sc, {mlm_local, static_cast<double>(losses.scored), sop_local}));
  const double mlm_total = sums[0], scored = sums[1], sop_total = sums[2];
  if (scored == 0) return absl::InvalidArgumentError("BERT: every MLM label is ignored (-100)");
  losses.scored = static_cast<int64_t>(scored);
  const double mlm = mlm_total / scored;
  const double sop_loss = sop_total / static_cast<double>(B);
  losses.total = mlm + sop_loss;
  losses.parts = {mlm, sop_loss};
  stage_losses_ = losses;
  return losses;
}

absl::Status BertModel::PretrainingHeadsBackward(const nn::StepContext& sc, double loss_scale,
                                                 const TensorView& dseq) {
  const ExecContext& ec = *sc.exec;
  RETURN_IF_ERROR(ops::Fill(ec, dseq, 0.0));
  if (mlm_here_) {
    RETURN_IF_ERROR(
        mlm_.Backward(sc, word_, loss_scale / static_cast<double>(stage_losses_.scored), dseq));
  }
  if (sc.cp_rank() != 0) return absl::OkStatus();  // The [CLS] rows are CP rank 0's.
  ASSIGN_OR_RETURN(Tensor dpooled, Alloc(ec, {WholeB(), config_.hidden_size}, dtype_));
  RETURN_IF_ERROR(sop_.Backward(sc, loss_scale / static_cast<double>(WholeB()), dpooled.view()));
  return PoolerBackward(sc, dpooled.view(), dseq);
}

absl::StatusOr<Losses> BertModel::ForwardBackward(const nn::StepContext& sc, const Batch& batch,
                                                  Backward backward, double loss_scale) {
  if (!has_pretraining_heads()) {
    // The multiple-choice model's objective: its choice loss (fine-tuning runs the trainer).
    ASSIGN_OR_RETURN(MultipleChoiceResult r, MultipleChoice(sc, batch, backward, loss_scale));
    return Losses{r.loss, {r.loss}, batch.labels.numel()};
  }
  if (!options_.stage.whole()) {
    return absl::FailedPreconditionError(
        "BERT: this model is one pipeline stage; run it with StageForward/StageBackward");
  }
  RETURN_IF_ERROR(CheckPretrainingLabels(sc, batch));
  Losses losses;
  {
    nn::TimerScope timed(sc.timers, "forward-compute");
    RETURN_IF_ERROR(CheckStepContextParallel("BERT", sc, options_.context_parallel));
    ASSIGN_OR_RETURN(const Batch local, cp_batch_.Cut(*sc.exec, sc, batch));
    RETURN_IF_ERROR(EncoderForward(sc, local));
    ASSIGN_OR_RETURN(losses, PretrainingLosses(sc, local));
  }
  if (backward == Backward::kNo) return losses;
  nn::TimerScope timed(sc.timers, "backward-compute");
  ASSIGN_OR_RETURN(Tensor dseq, Alloc(*sc.exec, {B_ * T_, config_.hidden_size}, dtype_));
  RETURN_IF_ERROR(PretrainingHeadsBackward(sc, loss_scale, dseq.view()));
  RETURN_IF_ERROR(EncoderBackward(sc, dseq.view()));
  return losses;
}

absl::StatusOr<Losses> BertModel::StageForward(const nn::StepContext& sc, const Batch& batch,
                                               const TensorView& input, const TensorView& output) {
  if (!has_pretraining_heads()) {
    return absl::UnimplementedError("BERT: pipeline stages need the pretraining heads");
  }
  has_forward_ = false;
  const StageOptions& stage = options_.stage;
  if (stage.holds_output) RETURN_IF_ERROR(CheckPretrainingLabels(sc, batch));
  RETURN_IF_ERROR(CheckStepContextParallel("BERT", sc, options_.context_parallel));
  ASSIGN_OR_RETURN(const Batch local, cp_batch_.Cut(*sc.exec, sc, batch));
  RETURN_IF_ERROR(EncoderForward(sc, local, input));
  if (!stage.holds_output) {
    RETURN_IF_ERROR(CheckHidden(*sc.exec, output, "output"));
    RETURN_IF_ERROR(CopyTensor(*sc.exec, seq_, output));
    has_forward_ = true;
    return Losses();
  }
  ASSIGN_OR_RETURN(Losses losses, PretrainingLosses(sc, local));
  has_forward_ = true;
  return losses;
}

absl::Status BertModel::StageBackward(const nn::StepContext& sc, const TensorView& output_grad,
                                      const TensorView& input_grad, double loss_scale) {
  if (!has_forward_) return absl::FailedPreconditionError("BERT: StageBackward before a forward");
  const ExecContext& ec = *sc.exec;
  const StageOptions& stage = options_.stage;
  if (!stage.holds_output) RETURN_IF_ERROR(CheckHidden(ec, output_grad, "output gradient"));
  if (!stage.holds_input) RETURN_IF_ERROR(CheckHidden(ec, input_grad, "input gradient"));
  Tensor dseq;  // The gradient of seq_: [B * T, H] on the last stage, else StageBoundaryShape.
  if (stage.holds_output) {
    ASSIGN_OR_RETURN(dseq, Alloc(ec, {B_ * T_, config_.hidden_size}, dtype_));
    RETURN_IF_ERROR(PretrainingHeadsBackward(sc, loss_scale, dseq.view()));
  } else {
    ASSIGN_OR_RETURN(dseq, Alloc(ec, StageBoundaryShape(WholeB(), WholeT()), dtype_));
    RETURN_IF_ERROR(CopyTensor(ec, output_grad, dseq.view()));
  }
  return EncoderBackward(sc, dseq.view(), input_grad);
}

double BertModel::TrainingFlops(int64_t batch, int64_t seq_length, int64_t scored) const {
  const bool recompute = options_.recompute == nn::Recompute::kYes;
  if (!has_pretraining_heads()) {
    // The layers, then the pooler (h x h) and the choice scorer (h x 1) on every row.
    const double B = batch, h = config_.hidden_size;
    return LayerFlops(batch, seq_length, config_.num_layers, config_.hidden_size, layer_weights_,
                      recompute) +
           6.0 * B * (h * h + h);
  }
  // A pipeline stage: its layers, and the heads on the last.
  if (!options_.stage.holds_output) {
    return LayerFlops(batch, seq_length, stack_->num_layers(), config_.hidden_size, layer_weights_,
                      recompute);
  }
  return BertModelFlops(batch, seq_length, scored, stack_->num_layers(), config_.hidden_size,
                        padded_vocab(), layer_weights_, recompute);
}

absl::StatusOr<MultipleChoiceResult> BertModel::MultipleChoice(const nn::StepContext& sc,
                                                               const Batch& batch,
                                                               Backward backward,
                                                               double loss_scale) {
  if (batch.choices.data != nullptr) return MaskedChoice(sc, batch, backward, loss_scale);
  if (!has_multiple_choice_head()) {
    return absl::FailedPreconditionError(
        "BERT: this model has no multiple-choice head (created with Heads::kPretraining)");
  }
  const TensorView& tokens = batch.tokens;
  const TensorView& labels = batch.labels;
  RETURN_IF_ERROR(CheckChoiceRows("multiple choice", "labels", labels, tokens));
  RETURN_IF_ERROR(EncoderForward(sc, batch));
  const int64_t B = B_, N = B_ * T_, H = config_.hidden_size, Q = labels.numel();
  const ExecContext& ec = *sc.exec;
  RETURN_IF_ERROR(PoolerForward(sc));
  ASSIGN_OR_RETURN(const TensorView labels_dev,
                   OnDevice(ec, labels, &mc_labels_staging_, "BERT multiple choice: labels"));
  MultipleChoiceResult result;
  ASSIGN_OR_RETURN(const double total,
                   choice_.Forward(sc, pooled_.view(), labels_dev, &result.predictions));
  result.loss = total / static_cast<double>(Q);
  if (backward == Backward::kNo) return result;

  ASSIGN_OR_RETURN(Tensor dpooled, Alloc(ec, {B, H}, dtype_));
  RETURN_IF_ERROR(choice_.Backward(sc, loss_scale / static_cast<double>(Q), dpooled.view()));
  ASSIGN_OR_RETURN(Tensor dseq, AllocZeros(ec, {N, H}, dtype_));
  RETURN_IF_ERROR(PoolerBackward(sc, dpooled.view(), dseq.view()));
  RETURN_IF_ERROR(EncoderBackward(sc, dseq.view()));
  return result;
}

namespace {

Architecture BertArchitecture() {
  return {"bert", Family::kBert,
          "BERT: learned positions and token types, pre- or post-norm LayerNorm layers with a "
          "GeLU MLP, pooler, MLM + SOP or multiple-choice heads",
          [](const ModelConfig& config, nn::ParameterStore* store,
             const ModelOptions& options) -> absl::StatusOr<std::unique_ptr<Model>> {
            ASSIGN_OR_RETURN(std::unique_ptr<BertModel> m,
                             BertModel::Create(config, store, options));
            return std::unique_ptr<Model>(std::move(m));
          }};
}

MT_REGISTER_ARCHITECTURE(BertArchitecture);

}  // namespace

}  // namespace models
}  // namespace mt
