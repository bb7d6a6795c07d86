#include "models/gpt2/gpt2.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/reduce.h"
#include "core/status.h"
#include "models/context_parallel.h"
#include "models/flops.h"
#include "models/registry.h"
#include "nn/context_parallel.h"

namespace mt {
namespace models {

namespace {
constexpr int kEmbeddingDropoutLayer = 4095;  // A dropout "layer" index no transformer layer uses.
}  // namespace

absl::StatusOr<std::unique_ptr<GptModel>> GptModel::Create(const ModelConfig& config,
                                                           nn::ParameterStore* store,
                                                           const ModelOptions& options,
                                                           const DecoderSpec& spec) {
  RETURN_IF_ERROR(config.ValidateParallel(store->tp_size()));
  if (options.heads != Heads::kPretraining) {
    return absl::InvalidArgumentError(
        "GPT-2 has only the language-model head (Heads::kPretraining)");
  }
  const StageOptions& stage = options.stage;
  ASSIGN_OR_RETURN(const int layers, StageLayerCount(stage, config, "GPT-2"));
  std::unique_ptr<GptModel> m(new GptModel());
  m->config_ = config;
  m->options_ = options;
  m->store_ = store;
  m->dtype_ = store->compute_dtype();
  const bool untied = config.untie_embeddings_and_output_weights;
  if (stage.holds_input || (stage.holds_output && !untied)) {
    m->word_handle_ = store->size();
    ASSIGN_OR_RETURN(m->word_,
                     nn::VocabParallelEmbedding::Create(store, "embedding.word", config.vocab_size,
                                                        config.PaddedVocab(store->tp_size()),
                                                        config.hidden_size, config.init_std));
  }
  if (config.position_embeddings && stage.holds_input) {
    ASSIGN_OR_RETURN(m->position_, nn::ReplicatedEmbedding::Create(
                                       store, "embedding.position", config.max_position_embeddings,
                                       config.hidden_size, config.init_std));
  }
  nn::TransformerLayerConfig lc = config.LayerConfig(ops::CausalMask::kYes, options.recompute);
  lc.sequence_parallel = options.sequence_parallel;
  m->stack_handle_ = store->size();
  ASSIGN_OR_RETURN(m->stack_,
                   nn::TransformerStack::Create(store, "layers", layers,
                                                StageBlocks(spec.blocks(lc), stage.first_layer)));
  if (options.sequence_parallel && !m->stack_->sequence_parallel()) {
    return absl::InvalidArgumentError(
        "GPT: the blocks of this architecture do not run with sequence parallelism");
  }
  RETURN_IF_ERROR(CheckContextParallel("GPT", options.context_parallel, store->device()));
  if (options.context_parallel > 1 && !m->stack_->context_parallel()) {
    return absl::InvalidArgumentError(
        "GPT: the blocks of this architecture do not run with context parallelism");
  }
  m->layer_weights_ = LayerMatrixWeights(*store, absl::StrCat("layers.", stage.first_layer, "."));
  m->final_norm_handle_ = store->size();  // Its first parameter's handle (declaration order).
  if (!stage.holds_output) {
    // Sequence parallel stages pass slices of the sequence; the first one scatters into them.
    if (options.sequence_parallel) {
      m->sp_ = std::make_unique<SequenceParallelEnds>(store, nullptr, store->size(), store->size());
    }
    return m;
  }
  ASSIGN_OR_RETURN(m->final_norm_, spec.final_norm(store, spec.final_norm_name, lc));
  if (m->final_norm_ == nullptr) {
    return absl::InvalidArgumentError("GPT: the DecoderSpec's final_norm factory returned no norm");
  }
  if (untied) {  // After the final norm: HeadBackward's NotifyGradsReady covers it.
    ASSIGN_OR_RETURN(m->output_,
                     nn::VocabParallelEmbedding::Create(store, "output_layer", config.vocab_size,
                                                        config.PaddedVocab(store->tp_size()),
                                                        config.hidden_size, config.init_std));
  }
  if (options.sequence_parallel) {
    m->sp_ = std::make_unique<SequenceParallelEnds>(store, m->final_norm_.get(),
                                                    m->final_norm_handle_, store->size());
  }
  return m;
}

ops::DropoutArgs GptModel::EmbeddingDropout(const nn::StepContext& sc, int64_t T) const {
  return sc.Dropout(config_.hidden_dropout, kEmbeddingDropoutLayer, 0, T * config_.hidden_size);
}

absl::Status GptModel::CheckDevice(const ExecContext& ec) const {
  if (ec.device != store_->device()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPT-2: the step's ExecContext runs on ", ec.device.ToString(),
                     " but the parameter store lives on ", store_->device().ToString()));
  }
  return absl::OkStatus();
}

absl::Status GptModel::PrepareForward(const nn::StepContext& sc, const TensorView& tokens) {
  const ExecContext& ec = *sc.exec;
  if (tokens.rank() != 2 || tokens.dtype != DType::kI32) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPT-2: tokens ", tokens.DebugString(), " must be i32 [B, T]"));
  }
  const int64_t B = tokens.dim(0), T = tokens.dim(1), H = config_.hidden_size;
  // Context parallel: [2B, c] chunk-major, of sequences of 2 C c positions
  // (models/context_parallel.h).
  const int64_t whole_T = sc.cp_size() > 1 ? 2 * sc.cp_size() * T : T;
  if (whole_T > config_.max_position_embeddings || T < 1 || B < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPT-2: sequence length ", whole_T,
        " must be in [1, max_position_embeddings = ", config_.max_position_embeddings, "]"));
  }
  RETURN_IF_ERROR(CheckDevice(ec));
  const int cp_layout = sc.cp_size() * 65536 + sc.cp_rank();
  if (B == B_ && T == T_ && cp_layout == cp_layout_ && positions_.device() == ec.device) {
    return absl::OkStatus();
  }
  B_ = T_ = 0;  // Until every buffer is allocated.
  has_forward_ = false;
  const StageOptions& stage = options_.stage;
  if (stage.holds_input) {
    // Built here, uploaded.
    const Tensor positions = CpPositions(sc, sc.cp_size() > 1 ? B / 2 : B, T);
    ASSIGN_OR_RETURN(positions_, CopyToDevice(ec, positions.view()));
    ASSIGN_OR_RETURN(emb_, Alloc(ec, {B, T, H}, dtype_));
    ASSIGN_OR_RETURN(pos_emb_, Alloc(ec, {B * T, H}, dtype_));
  } else {
    ASSIGN_OR_RETURN(positions_, Alloc(ec, {0}, DType::kI32));  // Marks the buffers' device.
  }
  if (stage.holds_output) {
    ASSIGN_OR_RETURN(final_, Alloc(ec, {B * T, H}, dtype_));
    ASSIGN_OR_RETURN(logits_, Alloc(ec, {B * T, head().local_vocab()}, DType::kF32));
    ASSIGN_OR_RETURN(losses_, Alloc(ec, {B * T}, DType::kF32));
  }
  B_ = B;
  T_ = T;
  cp_layout_ = cp_layout;
  return absl::OkStatus();
}

Shape GptModel::StageBoundaryShape(int64_t batch, int64_t seq_length) const {
  return ContextParallelBoundaryShape(batch, seq_length, options_.context_parallel,
                                      sp_ != nullptr ? store_->tp_size() : 1, config_.hidden_size);
}

absl::Status GptModel::CheckHidden(const ExecContext& ec, const TensorView& t,
                                   const char* what) const {
  // StageBoundaryShape takes the whole micro-batch; with context parallelism B_, T_ are this
  // rank's chunk-major [2B, c].
  const int cp = options_.context_parallel;
  return CheckStageBoundary("GPT-2", ec, t, dtype_, cp > 1 ? B_ / 2 : B_, cp > 1 ? T_ * 2 * cp : T_,
                            what);
}

absl::StatusOr<TensorView> GptModel::RunLayers(const nn::StepContext& sc, const TensorView& tokens,
                                               const TensorView& input) {
  const ExecContext& ec = *sc.exec;
  RETURN_IF_ERROR(CheckStepContextParallel("GPT-2", sc, options_.context_parallel));
  RETURN_IF_ERROR(PrepareForward(sc, tokens));
  has_forward_ = true;
  if (!options_.stage.holds_input) {
    RETURN_IF_ERROR(CheckHidden(ec, input, "input"));
    return stack_->Forward(sc, input, /*padding_mask=*/nullptr);
  }
  const int64_t B = B_, T = T_, H = config_.hidden_size;
  ASSIGN_OR_RETURN(tokens_, OnDevice(ec, tokens, &tokens_staging_, "GPT-2: tokens"));
  ASSIGN_OR_RETURN(TensorView emb2, emb_.view().Reshape({B * T, H}));
  RETURN_IF_ERROR(word_.Forward(sc, tokens_, emb2));
  if (config_.position_embeddings) {
    RETURN_IF_ERROR(position_.Forward(sc, positions_.view(), pos_emb_.view()));
    RETURN_IF_ERROR(ops::Add(ec, emb2, pos_emb_.view(), emb2));
  }
  if (sp_ != nullptr) {
    // Sequence parallel: the stack on this rank's slice of the sequence.
    ASSIGN_OR_RETURN(TensorView x, sp_->Enter(sc, emb_.view(), EmbeddingDropout(sc, WholeT())));
    return stack_->Forward(sc, x, /*padding_mask=*/nullptr);
  }
  RETURN_IF_ERROR(CpDropout(sc, emb2, EmbeddingDropout(sc, WholeT()), T_, H, false, emb2));
  return stack_->Forward(sc, emb_.view(), /*padding_mask=*/nullptr);
}

absl::Status GptModel::FinalNorm(const nn::StepContext& sc, const TensorView& h) {
  if (sp_ != nullptr) return sp_->Exit(sc, h, final_.view());  // Gathered from the slices.
  ASSIGN_OR_RETURN(TensorView h2, h.Reshape({B_ * T_, config_.hidden_size}));
  return final_norm_->Forward(sc, h2, final_.view());
}

absl::Status GptModel::Forward(const nn::StepContext& sc, const TensorView& tokens) {
  if (!options_.stage.whole()) {
    return absl::FailedPreconditionError(
        "GPT-2: this model is one pipeline stage; run it with StageForward/StageBackward");
  }
  ASSIGN_OR_RETURN(TensorView h, RunLayers(sc, tokens, TensorView()));
  RETURN_IF_ERROR(FinalNorm(sc, h));
  return head().LogitsForward(sc, final_.view(), logits_.view());
}

absl::StatusOr<Losses> GptModel::Loss(const nn::StepContext& sc, const TensorView& labels,
                                      const TensorView& whole_labels) {
  const int64_t N = B_ * T_;
  const ExecContext& ec = *sc.exec;
  ASSIGN_OR_RETURN(TensorView labels_dev, OnDevice(ec, labels, &labels_staging_, "GPT-2: labels"));
  ASSIGN_OR_RETURN(TensorView labels1, labels_dev.Reshape({N}));
  const ops::VocabShard shard{head().vocab_start(sc), config_.vocab_size};
  RETURN_IF_ERROR(loss_.Forward(sc, logits_.view(), labels1, shard, losses_.view()));
  // The labels are counted on the host (they usually come from there); with context parallelism
  // those of the whole micro-batch, so that each rank's share is of the whole batch's mean.
  ASSIGN_OR_RETURN(TensorView labels_host,
                   OnHost(ec, whole_labels, &labels_host_staging_, "GPT-2: labels"));
  int64_t count = 0;
  const int32_t* lab = labels_host.data_as<int32_t>();
  for (int64_t i = 0; i < whole_labels.numel(); ++i) count += lab[i] != ops::kIgnoreIndex;
  if (count == 0) return absl::InvalidArgumentError("GPT-2: every label is ignored");
  scored_ = count;
  ASSIGN_OR_RETURN(double local_total, ops::Sum(ec, losses_.view()));
  ASSIGN_OR_RETURN(const double total, CpSum(sc, local_total));
  const double loss = total / static_cast<double>(count);
  return Losses{loss, {loss}, count};
}

namespace {
absl::Status CheckLabels(const Batch& batch) {
  if (batch.labels.shape != batch.tokens.shape || batch.labels.dtype != DType::kI32) {
    return absl::InvalidArgumentError(absl::StrCat("GPT-2: labels ", batch.labels.DebugString(),
                                                   " must be i32 with the shape of the tokens ",
                                                   batch.tokens.DebugString()));
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<Losses> GptModel::ForwardBackward(const nn::StepContext& sc, const Batch& batch,
                                                 Backward backward, double loss_scale) {
  RETURN_IF_ERROR(CheckLabels(batch));
  Losses losses;
  {
    nn::TimerScope timed(sc.timers, "forward-compute");
    ASSIGN_OR_RETURN(const Batch local, cp_batch_.Cut(*sc.exec, sc, batch));
    RETURN_IF_ERROR(Forward(sc, local.tokens));
    ASSIGN_OR_RETURN(losses, Loss(sc, local.labels, batch.labels));
  }
  if (backward == Backward::kNo) return losses;
  nn::TimerScope timed(sc.timers, "backward-compute");
  RETURN_IF_ERROR(StageBackward(sc, TensorView(), TensorView(), loss_scale));
  return losses;
}

absl::StatusOr<Losses> GptModel::StageForward(const nn::StepContext& sc, const Batch& batch,
                                              const TensorView& input, const TensorView& output) {
  if (options_.stage.holds_output) RETURN_IF_ERROR(CheckLabels(batch));
  ASSIGN_OR_RETURN(const Batch local, cp_batch_.Cut(*sc.exec, sc, batch));
  ASSIGN_OR_RETURN(TensorView h, RunLayers(sc, local.tokens, input));
  if (!options_.stage.holds_output) {
    RETURN_IF_ERROR(CheckHidden(*sc.exec, output, "output"));
    RETURN_IF_ERROR(CopyTensor(*sc.exec, h, output));
    return Losses();
  }
  RETURN_IF_ERROR(FinalNorm(sc, h));
  RETURN_IF_ERROR(head().LogitsForward(sc, final_.view(), logits_.view()));
  return Loss(sc, local.labels, batch.labels);
}

absl::Status GptModel::HeadBackward(const nn::StepContext& sc, double loss_scale,
                                    const TensorView& dh) {
  const ExecContext& ec = *sc.exec;
  const int64_t N = B_ * T_, H = config_.hidden_size;
  ASSIGN_OR_RETURN(Tensor dlosses, Alloc(ec, {N}, DType::kF32));
  RETURN_IF_ERROR(ops::Fill(ec, dlosses.view(), loss_scale / static_cast<double>(scored_)));
  RETURN_IF_ERROR(loss_.Backward(sc, dlosses.view(), logits_.view()));  // dlogits in place.
  ASSIGN_OR_RETURN(Tensor dfinal, Alloc(ec, {N, H}, dtype_));
  RETURN_IF_ERROR(head().LogitsBackward(sc, final_.view(), logits_.view(), dfinal.view()));
  if (sp_ != nullptr) {
    RETURN_IF_ERROR(sp_->ExitBackward(sc, dfinal.view(), dh));  // dh: this rank's slice.
  } else {
    ASSIGN_OR_RETURN(TensorView dh2, dh.Reshape({N, H}));
    RETURN_IF_ERROR(final_norm_->Backward(sc, dfinal.view(), dh2));
  }
  return sc.NotifyGradsReady(final_norm_handle_);
}

absl::Status GptModel::StageBackward(const nn::StepContext& sc, const TensorView& output_grad,
                                     const TensorView& input_grad, double loss_scale) {
  if (!has_forward_) return absl::FailedPreconditionError("GPT-2: StageBackward before a forward");
  const ExecContext& ec = *sc.exec;
  const int64_t N = B_ * T_, H = config_.hidden_size;
  const StageOptions& stage = options_.stage;
  if (!stage.holds_output) RETURN_IF_ERROR(CheckHidden(ec, output_grad, "output gradient"));
  if (!stage.holds_input) RETURN_IF_ERROR(CheckHidden(ec, input_grad, "input gradient"));
  // The stack's output gradient: [B, T / tp, H] with sequence parallelism, else [B, T, H].
  const int64_t T_local = sp_ != nullptr ? T_ / sc.tp_size() : T_;
  ASSIGN_OR_RETURN(Tensor dh, Alloc(ec, {B_, T_local, H}, dtype_));
  if (stage.holds_output) {
    RETURN_IF_ERROR(HeadBackward(sc, loss_scale, dh.view()));
  } else {
    RETURN_IF_ERROR(CopyTensor(ec, output_grad, dh.view()));
  }
  RETURN_IF_ERROR(stack_->Backward(sc, dh.view(), dh.view()));
  if (!stage.holds_input) {
    RETURN_IF_ERROR(CopyTensor(ec, dh.view(), input_grad));
    return sc.NotifyGradsReady(stack_handle_);
  }
  Tensor gathered;  // With sequence parallelism: the whole sequence's embedding gradient.
  TensorView dh2;
  if (sp_ != nullptr) {
    ASSIGN_OR_RETURN(gathered, Alloc(ec, {N, H}, dtype_));
    dh2 = gathered.view();
    RETURN_IF_ERROR(sp_->EnterBackward(sc, dh.view(), EmbeddingDropout(sc, WholeT()), dh2));
  } else {
    ASSIGN_OR_RETURN(dh2, dh.view().Reshape({N, H}));
    RETURN_IF_ERROR(CpDropout(sc, dh2, EmbeddingDropout(sc, WholeT()), T_, H, true, dh2));
  }
  RETURN_IF_ERROR(word_.Backward(sc, tokens_, dh2));
  if (config_.position_embeddings) RETURN_IF_ERROR(position_.Backward(sc, positions_.view(), dh2));
  return sc.NotifyGradsReady(0);
}

int GptModel::tied_embedding_handle() const {
  if (options_.stage.whole() || config_.untie_embeddings_and_output_weights) return -1;
  return word_handle_;
}

double GptModel::TrainingFlops(int64_t batch, int64_t seq_length, int64_t scored) const {
  (void)scored;
  return DecoderFlops(batch, seq_length, stack_->num_layers(), config_.hidden_size,
                      options_.stage.holds_output ? padded_vocab() : 0, layer_weights_,
                      options_.recompute == nn::Recompute::kYes);
}

absl::Status GptModel::Logits(const nn::StepContext& sc, const TensorView& tokens,
                              const TensorView& full) {
  if (sc.cp_size() > 1) {
    return absl::UnimplementedError("GPT-2: Logits with context parallelism (run it with CP = 1)");
  }
  RETURN_IF_ERROR(Forward(sc, tokens));
  return GatherInto(sc, logits_.view(), full);
}

absl::Status GptModel::GatherInto(const nn::StepContext& sc, const TensorView& shard,
                                  const TensorView& full) {
  const ExecContext& ec = *sc.exec;
  if (full.device == ec.device) return nn::GatherLogits(sc, shard, full);
  // A host `full` with a GPU context: gather on the device, then download.
  ASSIGN_OR_RETURN(Tensor gathered, Alloc(ec, full.shape, full.dtype));
  RETURN_IF_ERROR(nn::GatherLogits(sc, shard, gathered.view()));
  return CopyTensor(ec, gathered.view(), full);
}

// ---------------------------------------------------------------- incremental decoding

absl::Status GptModel::StartDecoding(const nn::StepContext& sc, int64_t batch, int64_t max_length) {
  StopDecoding();
  RETURN_IF_ERROR(CheckDevice(*sc.exec));
  if (!options_.stage.whole()) {
    return absl::FailedPreconditionError("GPT-2: a pipeline stage cannot decode (generation)");
  }
  if (batch < 1 || max_length < 1 || max_length > config_.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPT-2: cannot decode ", batch, " sequences of up to ", max_length,
                     " positions (need batch >= 1 and 1 <= length <= max_position_embeddings = ",
                     config_.max_position_embeddings, ")"));
  }
  nn::StepContext eval = sc;
  eval.mode = nn::Mode::kEval;
  return stack_->StartDecoding(eval, batch, max_length);
}

void GptModel::StopDecoding() {
  stack_->StopDecoding();
  decode_ = DecodeBuffers();
}

absl::Status GptModel::DecodeStep(const nn::StepContext& sc, const TensorView& tokens,
                                  const TensorView& logits) {
  const int64_t B = stack_->decode_batch(), Vp = padded_vocab();
  if (B == 0) return absl::FailedPreconditionError("GPT-2: DecodeStep before StartDecoding");
  if (tokens.rank() != 2 || tokens.dtype != DType::kI32 || tokens.dim(0) != B ||
      tokens.dim(1) < 1) {
    return absl::InvalidArgumentError(absl::StrCat("GPT-2: decoding tokens ", tokens.DebugString(),
                                                   " must be i32 [", B, ", n >= 1]"));
  }
  const int64_t n = tokens.dim(1);
  if (stack_->decode_length() + n > stack_->decode_max_length()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPT-2: ", n, " more positions after ", stack_->decode_length(),
        " exceed the decoding length ", stack_->decode_max_length(), " given to StartDecoding"));
  }
  const bool every = logits.shape == Shape{B * n, Vp};
  if (logits.dtype != DType::kF32 || !(every || logits.shape == Shape{B, Vp})) {
    return absl::InvalidArgumentError(absl::StrCat("GPT-2: decoding logits ", logits.DebugString(),
                                                   " must be f32 [", B, ", ", Vp, "] or [", B * n,
                                                   ", ", Vp, "]"));
  }
  RETURN_IF_ERROR(CheckDevice(*sc.exec));
  nn::StepContext eval = sc;
  eval.mode = nn::Mode::kEval;
  std::vector<int32_t> positions(B * n), last;
  std::vector<nn::DecodeSpan> spans;
  for (int64_t b = 0; b < B; ++b) {
    spans.push_back(nn::DecodeSpan{b, n});
    last.push_back(static_cast<int32_t>(b * n + n - 1));
    for (int64_t i = 0; i < n; ++i) {
      positions[b * n + i] = static_cast<int32_t>(stack_->decode_length() + i);
    }
  }
  ASSIGN_OR_RETURN(TensorView flat, tokens.Reshape({B * n}));
  absl::Status s = Decode(eval, flat, positions, spans, every || n == 1 ? nullptr : &last, logits);
  if (!s.ok()) StopDecoding();
  return s;
}

absl::Status GptModel::DecodeSlots(const nn::StepContext& sc, absl::Span<const SlotTokens> spans,
                                   const TensorView& logits) {
  const int64_t S = stack_->decode_batch(), Vp = padded_vocab();
  if (S == 0) return absl::FailedPreconditionError("GPT-2: DecodeSlots before StartDecoding");
  std::vector<nn::DecodeSpan> rows;
  std::vector<int32_t> ids, positions, last;
  std::vector<bool> seen(S, false);
  for (const SlotTokens& t : spans) {
    const int64_t n = static_cast<int64_t>(t.tokens.size());
    if (t.slot < 0 || t.slot >= S || seen[t.slot] || n < 1 ||
        stack_->slot_length(t.slot) + n > stack_->decode_max_length()) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPT-2: slot ", t.slot, " with ", n, " tokens: need a slot in [0, ", S,
                       ") given once and 1 to ", stack_->decode_max_length(), " positions in all"));
    }
    seen[t.slot] = true;
    for (int64_t i = 0; i < n; ++i) {
      if (t.tokens[i] < 0 || t.tokens[i] >= Vp) {
        return absl::OutOfRangeError(
            absl::StrCat("GPT-2: token ", t.tokens[i], " outside [0, ", Vp, ")"));
      }
      ids.push_back(t.tokens[i]);
      positions.push_back(static_cast<int32_t>(stack_->slot_length(t.slot) + i));
    }
    rows.push_back(nn::DecodeSpan{t.slot, n});
    last.push_back(static_cast<int32_t>(ids.size() - 1));
  }
  const int64_t N = static_cast<int64_t>(ids.size()), R = static_cast<int64_t>(spans.size());
  const bool every = logits.shape == Shape{N, Vp};
  if (R == 0 || logits.dtype != DType::kF32 || !(every || logits.shape == Shape{R, Vp})) {
    return absl::InvalidArgumentError(absl::StrCat("GPT-2: slotted logits ", logits.DebugString(),
                                                   " must be f32 [", R, ", ", Vp, "] or [", N, ", ",
                                                   Vp, "], with >= 1 span"));
  }
  RETURN_IF_ERROR(CheckDevice(*sc.exec));
  nn::StepContext eval = sc;
  eval.mode = nn::Mode::kEval;
  const TensorView tokens(ids.data(), {N}, DType::kI32, Device::Cpu());
  absl::Status s = Decode(eval, tokens, positions, rows, every || N == R ? nullptr : &last, logits);
  if (!s.ok()) StopDecoding();
  return s;
}

absl::Status GptModel::EnsureDecodeBuffers(const ExecContext& ec, int64_t rows, int64_t out_rows) {
  DecodeBuffers& d = decode_;
  const int64_t H = config_.hidden_size;
  if (d.rows == rows && d.out_rows == out_rows) return absl::OkStatus();
  d.rows = d.out_rows = 0;  // Until every buffer is allocated.
  ASSIGN_OR_RETURN(d.positions, Alloc(ec, {rows}, DType::kI32));
  ASSIGN_OR_RETURN(d.emb, Alloc(ec, {rows, H}, dtype_));
  ASSIGN_OR_RETURN(d.pos_emb, Alloc(ec, {rows, H}, dtype_));
  ASSIGN_OR_RETURN(d.last_index, Alloc(ec, {out_rows}, DType::kI32));
  ASSIGN_OR_RETURN(d.last, Alloc(ec, {out_rows, H}, dtype_));
  ASSIGN_OR_RETURN(d.final, Alloc(ec, {out_rows, H}, dtype_));
  ASSIGN_OR_RETURN(d.logits, Alloc(ec, {out_rows, head().local_vocab()}, DType::kF32));
  d.rows = rows;
  d.out_rows = out_rows;
  return absl::OkStatus();
}

absl::Status GptModel::Decode(const nn::StepContext& sc, const TensorView& tokens,
                              const std::vector<int32_t>& positions,
                              absl::Span<const nn::DecodeSpan> spans,
                              const std::vector<int32_t>* last, const TensorView& logits) {
  const ExecContext& ec = *sc.exec;
  const int64_t N = tokens.numel();
  const int64_t R = last == nullptr ? N : static_cast<int64_t>(last->size());
  RETURN_IF_ERROR(EnsureDecodeBuffers(ec, N, R));
  DecodeBuffers& d = decode_;
  ASSIGN_OR_RETURN(TensorView ids, OnDevice(ec, tokens, &d.tokens_staging, "GPT-2: tokens"));
  RETURN_IF_ERROR(word_.Forward(sc, ids, d.emb.view()));
  if (config_.position_embeddings) {
    const TensorView host(const_cast<int32_t*>(positions.data()), {N}, DType::kI32, Device::Cpu());
    RETURN_IF_ERROR(CopyTensor(ec, host, d.positions.view()));
    RETURN_IF_ERROR(position_.Forward(sc, d.positions.view(), d.pos_emb.view()));
    RETURN_IF_ERROR(ops::Add(ec, d.emb.view(), d.pos_emb.view(), d.emb.view()));
  }
  ASSIGN_OR_RETURN(TensorView rows, stack_->DecodeSlots(sc, d.emb.view(), spans));
  if (last != nullptr) {
    // Each sequence's last new position, gathered as an embedding lookup.
    const TensorView host(const_cast<int32_t*>(last->data()), {R}, DType::kI32, Device::Cpu());
    RETURN_IF_ERROR(CopyTensor(ec, host, d.last_index.view()));
    RETURN_IF_ERROR(ops::Embedding(ec, d.last_index.view(), rows, d.last.view()));
    rows = d.last.view();
  }
  RETURN_IF_ERROR(final_norm_->Forward(sc, rows, d.final.view()));
  RETURN_IF_ERROR(head().LogitsForward(sc, d.final.view(), d.logits.view()));
  return GatherInto(sc, d.logits.view(), logits);
}

namespace {

Architecture Gpt2Architecture() {
  return {"gpt2", Family::kGpt2,
          "GPT-2: learned positions, pre-norm LayerNorm layers with a GeLU MLP, tied output layer",
          [](const ModelConfig& config, nn::ParameterStore* store,
             const ModelOptions& options) -> absl::StatusOr<std::unique_ptr<Model>> {
            ASSIGN_OR_RETURN(std::unique_ptr<GptModel> m, GptModel::Create(config, store, options));
            return std::unique_ptr<Model>(std::move(m));
          }};
}

MT_REGISTER_ARCHITECTURE(Gpt2Architecture);

}  // namespace

}  // namespace models
}  // namespace mt
