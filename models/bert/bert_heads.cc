#include "models/bert/bert_heads.h"

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/reduce.h"
#include "core/status.h"
#include "nn/linear.h"

namespace mt {
namespace models {

namespace {
// Dropout "layer" index no transformer layer uses (bert.cc's embedding dropout is site 0).
constexpr int kOutsideLayersDropout = 4095;
constexpr int kMultipleChoiceDropoutSite = 1;
}  // namespace

// ---------------------------------------------------------------- MlmHead

absl::StatusOr<MlmHead> MlmHead::Create(nn::ParameterStore* store, const ModelConfig& config,
                                        int64_t padded_vocab) {
  MlmHead h;
  h.store_ = store;
  h.vocab_size_ = config.vocab_size;
  h.gelu_form_ = config.gelu;
  const int64_t H = config.hidden_size;
  ASSIGN_OR_RETURN(h.dense_, nn::ReplicatedLinear::Create(store, "lm_head.dense", H, H,
                                                          nn::Bias::kYes, config.init_std));
  ASSIGN_OR_RETURN(
      h.ln_, nn::LayerNormModule::Create(store, "lm_head.layernorm", H, config.layernorm_eps));
  ASSIGN_OR_RETURN(h.bias_, store->Add({"lm_head.bias",
                                        {padded_vocab},
                                        /*split_dim=*/0,
                                        nn::Init::kZeros,
                                        0.0,
                                        /*weight_decay=*/false,
                                        /*vocab_padded=*/true,
                                        /*f32_compute=*/true}));
  return h;
}

absl::StatusOr<double> MlmHead::Forward(const nn::StepContext& sc, nn::VocabParallelEmbedding& word,
                                        const TensorView& seq, const TensorView& labels_host,
                                        int64_t* scored) {
  const ExecContext& ec = *sc.exec;
  const int64_t N = seq.dim(0), H = seq.dim(1);
  const DType dtype = seq.dtype;
  const int32_t* lab = labels_host.data_as<int32_t>();
  int64_t M = 0;
  for (int64_t i = 0; i < N; ++i) M += lab[i] != ops::kIgnoreIndex;
  if (M == 0) return absl::InvalidArgumentError("BERT: every MLM label is ignored (-100)");
  if (M != M_ || rows_.device() != ec.device || in_.dtype() != dtype) {
    M_ = 0;  // Until every buffer is allocated.
    ASSIGN_OR_RETURN(rows_, Alloc(ec, {M}, DType::kI32));
    ASSIGN_OR_RETURN(targets_, Alloc(ec, {M}, DType::kI32));
    for (Tensor* t : {&in_, &dense_out_, &gelu_, &ln_out_}) {
      ASSIGN_OR_RETURN(*t, Alloc(ec, {M, H}, dtype));
    }
    ASSIGN_OR_RETURN(logits_, Alloc(ec, {M, word.local_vocab()}, DType::kF32));
    ASSIGN_OR_RETURN(losses_, Alloc(ec, {M}, DType::kF32));
    M_ = M;
  }
  // The scored rows and their targets, gathered on the host and uploaded. The head is per
  // position, so the other positions cannot influence the loss.
  Tensor rows = Tensor::Host({M}, DType::kI32), targets = Tensor::Host({M}, DType::kI32);
  for (int64_t i = 0, m = 0; i < N; ++i) {
    if (lab[i] == ops::kIgnoreIndex) continue;
    rows.data_as<int32_t>()[m] = static_cast<int32_t>(i);
    targets.data_as<int32_t>()[m] = lab[i];
    ++m;
  }
  RETURN_IF_ERROR(CopyTensor(ec, rows.view(), rows_.view()));
  RETURN_IF_ERROR(CopyTensor(ec, targets.view(), targets_.view()));
  RETURN_IF_ERROR(ops::Embedding(ec, rows_.view(), seq, in_.view()));  // Gathers rows.
  RETURN_IF_ERROR(dense_.Forward(sc, in_.view(), dense_out_.view()));
  RETURN_IF_ERROR(ops::Gelu(ec, dense_out_.view(), gelu_.view(), gelu_form_));
  RETURN_IF_ERROR(ln_.Forward(sc, gelu_.view(), ln_out_.view()));
  RETURN_IF_ERROR(word.LogitsForward(sc, ln_out_.view(), logits_.view()));
  // The logits are f32 (nn::VocabParallelEmbedding::LogitsForward), so the output bias is added
  // as its f32 master value.
  RETURN_IF_ERROR(ops::BiasAdd(ec, logits_.view(), store_->value(bias_), logits_.view()));
  const ops::VocabShard shard{word.vocab_start(sc), vocab_size_};
  RETURN_IF_ERROR(loss_.Forward(sc, logits_.view(), targets_.view(), shard, losses_.view()));
  *scored = M;
  return ops::Sum(ec, losses_.view());
}

absl::Status MlmHead::Backward(const nn::StepContext& sc, nn::VocabParallelEmbedding& word,
                               double scale, const TensorView& dseq) {
  ASSIGN_OR_RETURN(Tensor dl, Alloc(*sc.exec, {M_}, DType::kF32));
  RETURN_IF_ERROR(ops::Fill(*sc.exec, dl.view(), scale));
  return BackwardWeighted(sc, word, dl.view(), dseq);
}

absl::Status MlmHead::BackwardWeighted(const nn::StepContext& sc, nn::VocabParallelEmbedding& word,
                                       const TensorView& dlosses, const TensorView& dseq) {
  const ExecContext& ec = *sc.exec;
  const int64_t M = M_, H = in_.shape()[1];
  RETURN_IF_ERROR(loss_.Backward(sc, dlosses, logits_.view()));  // dlogits in place.
  RETURN_IF_ERROR(nn::AccumulateBiasGrad(sc, logits_.view(), store_->grad(bias_), &bias_scratch_));
  ASSIGN_OR_RETURN(Tensor d1, Alloc(ec, {M, H}, in_.dtype()));
  ASSIGN_OR_RETURN(Tensor d2, Alloc(ec, {M, H}, in_.dtype()));
  RETURN_IF_ERROR(word.LogitsBackward(sc, ln_out_.view(), logits_.view(), d1.view()));
  RETURN_IF_ERROR(ln_.Backward(sc, d1.view(), d2.view()));
  RETURN_IF_ERROR(ops::GeluBackward(ec, dense_out_.view(), d2.view(), d2.view(), gelu_form_));
  RETURN_IF_ERROR(dense_.Backward(sc, in_.view(), d2.view(), d1.view()));
  return ops::EmbeddingBackward(ec, rows_.view(), d1.view(), dseq);  // Scatter-adds the rows.
}

// ---------------------------------------------------------------- SopHead

absl::StatusOr<SopHead> SopHead::Create(nn::ParameterStore* store, const ModelConfig& config) {
  SopHead h;
  h.dtype_ = store->compute_dtype();
  ASSIGN_OR_RETURN(h.linear_, nn::ReplicatedLinear::Create(store, "sop_head", config.hidden_size, 2,
                                                           nn::Bias::kYes, config.init_std));
  return h;
}

absl::StatusOr<double> SopHead::Forward(const nn::StepContext& sc, const TensorView& pooled,
                                        const TensorView& labels) {
  const ExecContext& ec = *sc.exec;
  const int64_t B = pooled.dim(0);
  if (logits_.numel() != B * 2 || logits_.device() != ec.device) {
    ASSIGN_OR_RETURN(logits_, Alloc(ec, {B, 2}, dtype_));
    ASSIGN_OR_RETURN(losses_, Alloc(ec, {B}, DType::kF32));
  }
  pooled_ = pooled;
  labels_ = labels;
  RETURN_IF_ERROR(linear_.Forward(sc, pooled, logits_.view()));
  RETURN_IF_ERROR(ops::CrossEntropy(ec, logits_.view(), labels, losses_.view()));
  return ops::Sum(ec, losses_.view());
}

absl::Status SopHead::Backward(const nn::StepContext& sc, double scale, const TensorView& dpooled) {
  const ExecContext& ec = *sc.exec;
  ASSIGN_OR_RETURN(Tensor dl, Alloc(ec, losses_.shape(), DType::kF32));
  RETURN_IF_ERROR(ops::Fill(ec, dl.view(), scale));
  RETURN_IF_ERROR(
      ops::CrossEntropyBackward(ec, logits_.view(), labels_, dl.view(), logits_.view()));
  return linear_.Backward(sc, pooled_, logits_.view(), dpooled);
}

// ---------------------------------------------------------------- MultipleChoiceHead

absl::StatusOr<MultipleChoiceHead> MultipleChoiceHead::Create(nn::ParameterStore* store,
                                                              const ModelConfig& config) {
  MultipleChoiceHead h;
  h.dtype_ = store->compute_dtype();
  h.dropout_ = config.hidden_dropout;
  h.hidden_ = config.hidden_size;
  ASSIGN_OR_RETURN(
      h.linear_, nn::ReplicatedLinear::Create(store, "multiple_choice_head", config.hidden_size, 1,
                                              nn::Bias::kYes, config.init_std));
  return h;
}

ops::DropoutArgs MultipleChoiceHead::Dropout(const nn::StepContext& sc) const {
  // One pooled row per sequence.
  return sc.Dropout(dropout_, kOutsideLayersDropout, kMultipleChoiceDropoutSite, hidden_);
}

absl::StatusOr<double> MultipleChoiceHead::Forward(const nn::StepContext& sc,
                                                   const TensorView& pooled,
                                                   const TensorView& labels,
                                                   std::vector<int>* predictions) {
  const ExecContext& ec = *sc.exec;
  const int64_t B = pooled.dim(0), Q = labels.numel(), C = B / Q;
  if (scores_.numel() != B || losses_.numel() != Q || scores_.device() != ec.device) {
    ASSIGN_OR_RETURN(dropped_, Alloc(ec, {B, hidden_}, dtype_));
    ASSIGN_OR_RETURN(scores_, Alloc(ec, {B, 1}, dtype_));
    ASSIGN_OR_RETURN(losses_, Alloc(ec, {Q}, DType::kF32));
  }
  Q_ = Q;
  C_ = C;
  labels_ = labels;
  RETURN_IF_ERROR(ops::Dropout(ec, pooled, Dropout(sc), dropped_.view()));
  RETURN_IF_ERROR(linear_.Forward(sc, dropped_.view(), scores_.view()));
  ASSIGN_OR_RETURN(TensorView scores, scores_.view().Reshape({Q, C}));
  RETURN_IF_ERROR(ops::CrossEntropy(ec, scores, labels, losses_.view()));
  // The predictions are read on the host.
  ASSIGN_OR_RETURN(Tensor scores32, Alloc(ec, scores_.shape(), DType::kF32));
  RETURN_IF_ERROR(ops::Convert(ec, scores_.view(), scores32.view()));
  ASSIGN_OR_RETURN(const Tensor scores_host, CopyToHost(ec, scores32.view()));
  const float* s = scores_host.data_as<float>();
  predictions->clear();
  for (int64_t q = 0; q < Q; ++q) {
    int best = 0;
    for (int64_t c = 1; c < C; ++c) {
      if (s[q * C + c] > s[q * C + best]) best = static_cast<int>(c);
    }
    predictions->push_back(best);
  }
  return ops::Sum(ec, losses_.view());
}

absl::Status MultipleChoiceHead::Backward(const nn::StepContext& sc, double scale,
                                          const TensorView& dpooled) {
  const ExecContext& ec = *sc.exec;
  ASSIGN_OR_RETURN(Tensor dl, Alloc(ec, {Q_}, DType::kF32));
  RETURN_IF_ERROR(ops::Fill(ec, dl.view(), scale));
  ASSIGN_OR_RETURN(TensorView scores, scores_.view().Reshape({Q_, C_}));
  RETURN_IF_ERROR(ops::CrossEntropyBackward(ec, scores, labels_, dl.view(), scores));
  RETURN_IF_ERROR(linear_.Backward(sc, dropped_.view(), scores_.view(), dpooled));
  return ops::DropoutBackward(ec, dpooled, Dropout(sc), dpooled);
}

}  // namespace models
}  // namespace mt
