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
#include "nn/linear.h"

namespace mt {
namespace models {

namespace {
// Dropout "layer" index no transformer layer uses (as GptModel), with one site per use.
constexpr int kOutsideLayersDropout = 4095;
constexpr int kEmbeddingDropoutSite = 0;
constexpr int kMultipleChoiceDropoutSite = 1;

absl::Status CheckI32(const char* what, const TensorView& t, const Shape& shape) {
  if (t.dtype != DType::kI32 || t.shape != shape || !t.IsContiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("BERT: ", what, " ", t.DebugString(),
                                                   " must be contiguous i32 ",
                                                   ShapeToString(shape)));
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<std::unique_ptr<BertModel>> BertModel::Create(const ModelConfig& config,
                                                             nn::ParameterStore* store,
                                                             BertHeads heads,
                                                             nn::Recompute recompute) {
  if (config.family != Family::kBert) {
    return absl::InvalidArgumentError("BERT: the config's family is not kBert");
  }
  RETURN_IF_ERROR(config.ValidateParallel(store->tp_size()));
  std::unique_ptr<BertModel> m(new BertModel());
  m->config_ = config;
  m->heads_ = heads;
  m->store_ = store;
  m->dtype_ = store->compute_dtype();
  const int64_t H = config.hidden_size;
  const double init_std = config.init_std;
  const int64_t padded_vocab = config.PaddedVocab(store->tp_size());
  ASSIGN_OR_RETURN(m->word_, nn::VocabParallelEmbedding::Create(store, "embedding.word",
                                                                config.vocab_size, padded_vocab,
                                                                H, init_std));
  if (config.position_embeddings) {
    ASSIGN_OR_RETURN(m->position_, nn::ReplicatedEmbedding::Create(
                                       store, "embedding.position",
                                       config.max_position_embeddings, H, init_std));
  }
  ASSIGN_OR_RETURN(m->token_type_, nn::ReplicatedEmbedding::Create(
                                       store, "embedding.token_type", config.num_token_types, H,
                                       init_std));
  const bool post_norm = config.norm == nn::NormPosition::kPostNorm;
  if (post_norm) {
    ASSIGN_OR_RETURN(m->embedding_ln_, nn::LayerNormModule::Create(store, "embedding.layernorm", H,
                                                                   config.layernorm_eps));
  }
  nn::TransformerLayerConfig lc;
  lc.hidden = H;
  lc.heads = config.num_attention_heads;
  lc.ffn = config.ffn();
  lc.norm = config.norm;
  lc.causal = ops::CausalMask::kNo;
  lc.hidden_dropout = config.hidden_dropout;
  lc.attention_dropout = config.attention_dropout;
  lc.layernorm_eps = config.layernorm_eps;
  lc.init_std = init_std;
  lc.output_init_std = init_std / std::sqrt(2.0 * config.num_layers);
  lc.recompute = recompute;
  ASSIGN_OR_RETURN(m->stack_, nn::TransformerStack::Create(store, "layers", config.num_layers, lc));
  m->after_stack_handle_ = store->size();  // The final LayerNorm and the heads come after.
  if (!post_norm) {
    ASSIGN_OR_RETURN(m->final_ln_, nn::LayerNormModule::Create(store, "final_layernorm", H,
                                                               config.layernorm_eps));
  }
  ASSIGN_OR_RETURN(m->pooler_, nn::ReplicatedLinear::Create(store, "pooler.dense", H, H,
                                                            nn::Bias::kYes, init_std));
  if (m->has_pretraining_heads()) {
    ASSIGN_OR_RETURN(m->lm_dense_, nn::ReplicatedLinear::Create(store, "lm_head.dense", H, H,
                                                                nn::Bias::kYes, init_std));
    ASSIGN_OR_RETURN(m->lm_ln_, nn::LayerNormModule::Create(store, "lm_head.layernorm", H,
                                                            config.layernorm_eps));
    ASSIGN_OR_RETURN(m->lm_bias_, store->Add({"lm_head.bias", {padded_vocab}, /*split_dim=*/0,
                                              nn::Init::kZeros, 0.0, /*weight_decay=*/false}));
    ASSIGN_OR_RETURN(m->sop_head_, nn::ReplicatedLinear::Create(store, "sop_head", H, 2,
                                                                nn::Bias::kYes, init_std));
  }
  if (m->has_multiple_choice_head()) {
    ASSIGN_OR_RETURN(m->mc_head_, nn::ReplicatedLinear::Create(store, "multiple_choice_head", H, 1,
                                                               nn::Bias::kYes, init_std));
  }
  return m;
}

absl::Status BertModel::CheckDevice(const ExecContext& ec) const {
  if (ec.device == store_->device()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("BERT: the step's ExecContext runs on ",
                                                 ec.device.ToString(),
                                                 " but the parameter store lives on ",
                                                 store_->device().ToString()));
}

ops::DropoutArgs BertModel::EmbeddingDropout(const nn::StepContext& sc) const {
  ops::DropoutArgs d;
  d.p = sc.training() ? config_.hidden_dropout : 0.0f;
  d.seed = sc.dropout_seed;
  d.stream = sc.DropoutStream(kOutsideLayersDropout, kEmbeddingDropoutSite);
  d.key_base = sc.sample_offset * T_ * config_.hidden_size;
  return d;
}

ops::DropoutArgs BertModel::MultipleChoiceDropout(const nn::StepContext& sc) const {
  ops::DropoutArgs d;
  d.p = sc.training() ? config_.hidden_dropout : 0.0f;
  d.seed = sc.dropout_seed;
  d.stream = sc.DropoutStream(kOutsideLayersDropout, kMultipleChoiceDropoutSite);
  d.key_base = sc.sample_offset * config_.hidden_size;  // One pooled row per sequence.
  return d;
}

absl::Status BertModel::EncoderForward(const nn::StepContext& sc, const TensorView& tokens,
                                       const TensorView& token_types,
                                       const TensorView& padding_mask) {
  if (tokens.rank() != 2 || tokens.dtype != DType::kI32) {
    return absl::InvalidArgumentError(absl::StrCat("BERT: tokens ", tokens.DebugString(),
                                                   " must be i32 [B, T]"));
  }
  const int64_t B = tokens.dim(0), T = tokens.dim(1), H = config_.hidden_size, N = B * T;
  if (T > config_.max_position_embeddings || T < 1 || B < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BERT: tokens ", tokens.DebugString(), " need B >= 1 and a sequence length in [1, ",
        "max_position_embeddings = ", config_.max_position_embeddings, "]"));
  }
  RETURN_IF_ERROR(CheckI32("tokens", tokens, tokens.shape));
  RETURN_IF_ERROR(CheckI32("token_types", token_types, tokens.shape));
  RETURN_IF_ERROR(CheckI32("padding_mask", padding_mask, tokens.shape));
  const ExecContext& ec = *sc.exec;
  RETURN_IF_ERROR(CheckDevice(ec));
  if (B != B_ || T != T_ || emb_.device() != ec.device) {
    B_ = T_ = 0;  // Until every buffer is allocated.
    // Index tensors are built on the host and uploaded.
    Tensor positions = Tensor::Host({N}, DType::kI32);
    for (int64_t i = 0; i < N; ++i) positions.data_as<int32_t>()[i] = static_cast<int32_t>(i % T);
    ASSIGN_OR_RETURN(positions_, CopyToDevice(ec, positions.view()));
    Tensor cls_rows = Tensor::Host({B}, DType::kI32);
    for (int64_t b = 0; b < B; ++b) cls_rows.data_as<int32_t>()[b] = static_cast<int32_t>(b * T);
    ASSIGN_OR_RETURN(cls_rows_, CopyToDevice(ec, cls_rows.view()));
    ASSIGN_OR_RETURN(emb_sum_, Alloc(ec, {N, H}, dtype_));
    ASSIGN_OR_RETURN(emb_part_, Alloc(ec, {N, H}, dtype_));
    ASSIGN_OR_RETURN(emb_, Alloc(ec, {B, T, H}, dtype_));
    if (config_.norm == nn::NormPosition::kPreNorm) {
      ASSIGN_OR_RETURN(final_out_, Alloc(ec, {N, H}, dtype_));
    }
    ASSIGN_OR_RETURN(cls_, Alloc(ec, {B, H}, dtype_));
    ASSIGN_OR_RETURN(pooled_pre_, Alloc(ec, {B, H}, dtype_));
    ASSIGN_OR_RETURN(pooled_, Alloc(ec, {B, H}, dtype_));
    B_ = B;
    T_ = T;
  }
  ASSIGN_OR_RETURN(tokens_, OnDevice(ec, tokens, &tokens_staging_, "BERT: tokens"));
  ASSIGN_OR_RETURN(token_types_,
                   OnDevice(ec, token_types, &token_types_staging_, "BERT: token_types"));
  ASSIGN_OR_RETURN(padding_mask_,
                   OnDevice(ec, padding_mask, &padding_mask_staging_, "BERT: padding_mask"));

  const TensorView sum = emb_sum_.view(), part = emb_part_.view();
  RETURN_IF_ERROR(word_.Forward(sc, tokens_, sum));
  if (config_.position_embeddings) {
    RETURN_IF_ERROR(position_.Forward(sc, positions_.view(), part));
    RETURN_IF_ERROR(ops::Add(ec, sum, part, sum));
  }
  RETURN_IF_ERROR(token_type_.Forward(sc, token_types_, part));
  RETURN_IF_ERROR(ops::Add(ec, sum, part, sum));
  ASSIGN_OR_RETURN(TensorView emb2, emb_.view().Reshape({N, H}));
  if (config_.norm == nn::NormPosition::kPostNorm) {
    RETURN_IF_ERROR(embedding_ln_.Forward(sc, sum, emb2));
    RETURN_IF_ERROR(ops::Dropout(ec, emb2, EmbeddingDropout(sc), emb2));
  } else {
    RETURN_IF_ERROR(ops::Dropout(ec, sum, EmbeddingDropout(sc), emb2));
  }
  ASSIGN_OR_RETURN(TensorView h, stack_->Forward(sc, emb_.view(), &padding_mask_));
  ASSIGN_OR_RETURN(TensorView h2, h.Reshape({N, H}));
  if (config_.norm == nn::NormPosition::kPreNorm) {
    RETURN_IF_ERROR(final_ln_.Forward(sc, h2, final_out_.view()));
    seq_ = final_out_.view();
  } else {
    seq_ = h2;  // The stack's output buffer, valid until the next forward.
  }
  return absl::OkStatus();
}

absl::Status BertModel::EncoderBackward(const nn::StepContext& sc, const TensorView& dseq) {
  const int64_t N = B_ * T_, H = config_.hidden_size;
  const ExecContext& ec = *sc.exec;
  Tensor dh_pre_norm;
  TensorView dh2 = dseq;
  if (config_.norm == nn::NormPosition::kPreNorm) {
    ASSIGN_OR_RETURN(dh_pre_norm, Alloc(ec, {N, H}, dtype_));
    dh2 = dh_pre_norm.view();
    RETURN_IF_ERROR(final_ln_.Backward(sc, dseq, dh2));
  }
  // The heads' backward passes have run, and the final LayerNorm's: what follows the layers is
  // final.
  RETURN_IF_ERROR(sc.NotifyGradsReady(after_stack_handle_));
  ASSIGN_OR_RETURN(TensorView dh, dh2.Reshape({B_, T_, H}));
  RETURN_IF_ERROR(stack_->Backward(sc, dh, dh));
  RETURN_IF_ERROR(ops::DropoutBackward(ec, dh2, EmbeddingDropout(sc), dh2));
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

absl::StatusOr<BertPretrainingLosses> BertModel::ForwardBackward(
    const nn::StepContext& sc, const TensorView& tokens, const TensorView& token_types,
    const TensorView& padding_mask, const TensorView& mlm_labels, const TensorView& sop_labels,
    bool compute_grad, double loss_scale) {
  if (!has_pretraining_heads()) {
    return absl::FailedPreconditionError(
        "BERT: this model has no pretraining heads (created with BertHeads::kMultipleChoice)");
  }
  RETURN_IF_ERROR(CheckI32("mlm_labels", mlm_labels, tokens.shape));
  if (tokens.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("BERT: tokens ", tokens.DebugString(),
                                                   " must be i32 [B, T]"));
  }
  RETURN_IF_ERROR(CheckI32("sop_labels", sop_labels, {tokens.dim(0)}));
  RETURN_IF_ERROR(CheckDevice(*sc.exec));
  // Labels are read on the host (where the data loaders make them; downloaded otherwise).
  ASSIGN_OR_RETURN(TensorView sop_host,
                   OnHost(*sc.exec, sop_labels, &sop_labels_host_staging_, "BERT: sop_labels"));
  const int32_t* sop = sop_host.data_as<int32_t>();
  for (int64_t b = 0; b < sop_labels.numel(); ++b) {
    if (sop[b] != 0 && sop[b] != 1) {
      return absl::InvalidArgumentError(absl::StrCat("BERT: sop_labels[", b, "] = ", sop[b],
                                                     " must be 0 or 1"));
    }
  }
  RETURN_IF_ERROR(EncoderForward(sc, tokens, token_types, padding_mask));
  const int64_t B = B_, N = B_ * T_, H = config_.hidden_size;
  const ExecContext& ec = *sc.exec;

  // MLM head on the scored positions only (the head is per position, so the others cannot
  // influence the loss).
  ASSIGN_OR_RETURN(TensorView mlm_host,
                   OnHost(ec, mlm_labels, &mlm_labels_host_staging_, "BERT: mlm_labels"));
  const int32_t* lab = mlm_host.data_as<int32_t>();
  int64_t M = 0;
  for (int64_t i = 0; i < N; ++i) M += lab[i] != ops::kIgnoreIndex;
  if (M == 0) return absl::InvalidArgumentError("BERT: every MLM label is ignored (-100)");
  if (M != M_ || mlm_rows_.device() != ec.device) {
    M_ = 0;  // Until every buffer is allocated.
    ASSIGN_OR_RETURN(mlm_rows_, Alloc(ec, {M}, DType::kI32));
    ASSIGN_OR_RETURN(mlm_targets_, Alloc(ec, {M}, DType::kI32));
    ASSIGN_OR_RETURN(mlm_in_, Alloc(ec, {M, H}, dtype_));
    ASSIGN_OR_RETURN(mlm_dense_, Alloc(ec, {M, H}, dtype_));
    ASSIGN_OR_RETURN(mlm_gelu_, Alloc(ec, {M, H}, dtype_));
    ASSIGN_OR_RETURN(mlm_ln_, Alloc(ec, {M, H}, dtype_));
    ASSIGN_OR_RETURN(mlm_logits_, Alloc(ec, {M, word_.local_vocab()}, DType::kF32));
    ASSIGN_OR_RETURN(mlm_losses_, Alloc(ec, {M}, DType::kF32));
    M_ = M;
  }
  {
    // The scored rows and their targets, gathered on the host and uploaded.
    Tensor rows = Tensor::Host({M}, DType::kI32), targets = Tensor::Host({M}, DType::kI32);
    for (int64_t i = 0, m = 0; i < N; ++i) {
      if (lab[i] == ops::kIgnoreIndex) continue;
      rows.data_as<int32_t>()[m] = static_cast<int32_t>(i);
      targets.data_as<int32_t>()[m] = lab[i];
      ++m;
    }
    RETURN_IF_ERROR(CopyTensor(ec, rows.view(), mlm_rows_.view()));
    RETURN_IF_ERROR(CopyTensor(ec, targets.view(), mlm_targets_.view()));
  }
  RETURN_IF_ERROR(ops::Embedding(ec, mlm_rows_.view(), seq_, mlm_in_.view()));  // Gathers rows.
  RETURN_IF_ERROR(lm_dense_.Forward(sc, mlm_in_.view(), mlm_dense_.view()));
  RETURN_IF_ERROR(ops::Gelu(ec, mlm_dense_.view(), mlm_gelu_.view()));
  RETURN_IF_ERROR(lm_ln_.Forward(sc, mlm_gelu_.view(), mlm_ln_.view()));
  RETURN_IF_ERROR(word_.LogitsForward(sc, mlm_ln_.view(), mlm_logits_.view()));
  // The logits are f32 (nn::VocabParallelEmbedding::LogitsForward), so the output bias is added
  // as its f32 master value.
  RETURN_IF_ERROR(
      ops::BiasAdd(ec, mlm_logits_.view(), store_->value(lm_bias_), mlm_logits_.view()));
  const ops::VocabShard shard{word_.vocab_start(sc), config_.vocab_size};
  RETURN_IF_ERROR(mlm_loss_.Forward(sc, mlm_logits_.view(), mlm_targets_.view(), shard,
                                    mlm_losses_.view()));
  BertPretrainingLosses losses;
  ASSIGN_OR_RETURN(const double mlm_total, ops::Sum(ec, mlm_losses_.view()));
  losses.mlm = mlm_total / static_cast<double>(M);

  // Sentence-order prediction on the pooled [CLS] output.
  RETURN_IF_ERROR(PoolerForward(sc));
  if (sop_logits_.numel() != B * 2 || sop_logits_.device() != ec.device) {
    ASSIGN_OR_RETURN(sop_logits_, Alloc(ec, {B, 2}, dtype_));
    ASSIGN_OR_RETURN(sop_losses_, Alloc(ec, {B}, DType::kF32));
  }
  ASSIGN_OR_RETURN(const TensorView sop_dev,
                   OnDevice(ec, sop_labels, &sop_labels_staging_, "BERT: sop_labels"));
  RETURN_IF_ERROR(sop_head_.Forward(sc, pooled_.view(), sop_logits_.view()));
  RETURN_IF_ERROR(ops::CrossEntropy(ec, sop_logits_.view(), sop_dev, sop_losses_.view()));
  ASSIGN_OR_RETURN(const double sop_total, ops::Sum(ec, sop_losses_.view()));
  losses.sop = sop_total / static_cast<double>(B);
  losses.total = losses.mlm + losses.sop;
  if (!compute_grad) return losses;

  ASSIGN_OR_RETURN(Tensor dseq, AllocZeros(ec, {N, H}, dtype_));
  // MLM backward.
  {
    ASSIGN_OR_RETURN(Tensor dl, Alloc(ec, {M}, DType::kF32));
    RETURN_IF_ERROR(ops::Fill(ec, dl.view(), loss_scale / static_cast<double>(M)));
    RETURN_IF_ERROR(mlm_loss_.Backward(sc, dl.view(), mlm_logits_.view()));  // dlogits in place.
    RETURN_IF_ERROR(nn::AccumulateBiasGrad(sc, mlm_logits_.view(), store_->grad(lm_bias_),
                                           &lm_bias_scratch_));
    ASSIGN_OR_RETURN(Tensor d1, Alloc(ec, {M, H}, dtype_));
    ASSIGN_OR_RETURN(Tensor d2, Alloc(ec, {M, H}, dtype_));
    RETURN_IF_ERROR(word_.LogitsBackward(sc, mlm_ln_.view(), mlm_logits_.view(), d1.view()));
    RETURN_IF_ERROR(lm_ln_.Backward(sc, d1.view(), d2.view()));
    RETURN_IF_ERROR(ops::GeluBackward(ec, mlm_dense_.view(), d2.view(), d2.view()));
    RETURN_IF_ERROR(lm_dense_.Backward(sc, mlm_in_.view(), d2.view(), d1.view()));
    RETURN_IF_ERROR(ops::EmbeddingBackward(ec, mlm_rows_.view(), d1.view(), dseq.view()));
  }
  // SOP backward.
  {
    ASSIGN_OR_RETURN(Tensor dl, Alloc(ec, {B}, DType::kF32));
    RETURN_IF_ERROR(ops::Fill(ec, dl.view(), loss_scale / static_cast<double>(B)));
    RETURN_IF_ERROR(ops::CrossEntropyBackward(ec, sop_logits_.view(), sop_dev, dl.view(),
                                              sop_logits_.view()));
    ASSIGN_OR_RETURN(Tensor dpooled, Alloc(ec, {B, H}, dtype_));
    RETURN_IF_ERROR(sop_head_.Backward(sc, pooled_.view(), sop_logits_.view(), dpooled.view()));
    RETURN_IF_ERROR(PoolerBackward(sc, dpooled.view(), dseq.view()));
  }
  RETURN_IF_ERROR(EncoderBackward(sc, dseq.view()));
  return losses;
}

absl::StatusOr<MultipleChoiceResult> BertModel::MultipleChoiceForwardBackward(
    const nn::StepContext& sc, const TensorView& tokens, const TensorView& token_types,
    const TensorView& padding_mask, const TensorView& labels, bool compute_grad,
    double loss_scale) {
  if (!has_multiple_choice_head()) {
    return absl::FailedPreconditionError(
        "BERT: this model has no multiple-choice head (created with BertHeads::kPretraining)");
  }
  if (labels.rank() != 1 || labels.dtype != DType::kI32 || labels.numel() < 1 ||
      tokens.rank() != 2 || tokens.dim(0) % labels.numel() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BERT multiple choice: labels ", labels.DebugString(), " must be i32 [Q] with Q >= 1 ",
        "dividing the rows of tokens ", tokens.DebugString(), " ([Q * choices, T])"));
  }
  const int64_t Q = labels.numel(), C = tokens.dim(0) / Q;
  RETURN_IF_ERROR(EncoderForward(sc, tokens, token_types, padding_mask));
  const int64_t B = B_, N = B_ * T_, H = config_.hidden_size;
  const ExecContext& ec = *sc.exec;
  RETURN_IF_ERROR(PoolerForward(sc));
  if (mc_scores_.numel() != B || mc_losses_.numel() != Q || mc_scores_.device() != ec.device) {
    ASSIGN_OR_RETURN(mc_dropped_, Alloc(ec, {B, H}, dtype_));
    ASSIGN_OR_RETURN(mc_scores_, Alloc(ec, {B, 1}, dtype_));
    ASSIGN_OR_RETURN(mc_losses_, Alloc(ec, {Q}, DType::kF32));
  }
  ASSIGN_OR_RETURN(const TensorView labels_dev,
                   OnDevice(ec, labels, &mc_labels_staging_, "BERT multiple choice: labels"));
  RETURN_IF_ERROR(ops::Dropout(ec, pooled_.view(), MultipleChoiceDropout(sc), mc_dropped_.view()));
  RETURN_IF_ERROR(mc_head_.Forward(sc, mc_dropped_.view(), mc_scores_.view()));
  ASSIGN_OR_RETURN(TensorView scores, mc_scores_.view().Reshape({Q, C}));
  RETURN_IF_ERROR(ops::CrossEntropy(ec, scores, labels_dev, mc_losses_.view()));
  MultipleChoiceResult result;
  ASSIGN_OR_RETURN(const double total, ops::Sum(ec, mc_losses_.view()));
  result.loss = total / static_cast<double>(Q);
  // The predictions are read on the host.
  ASSIGN_OR_RETURN(Tensor scores32, Alloc(ec, mc_scores_.shape(), DType::kF32));
  RETURN_IF_ERROR(ops::Convert(ec, mc_scores_.view(), scores32.view()));
  ASSIGN_OR_RETURN(const Tensor scores_host, CopyToHost(ec, scores32.view()));
  const float* s = scores_host.data_as<float>();
  for (int64_t q = 0; q < Q; ++q) {
    int best = 0;
    for (int64_t c = 1; c < C; ++c) {
      if (s[q * C + c] > s[q * C + best]) best = static_cast<int>(c);
    }
    result.predictions.push_back(best);
  }
  if (!compute_grad) return result;

  ASSIGN_OR_RETURN(Tensor dl, Alloc(ec, {Q}, DType::kF32));
  RETURN_IF_ERROR(ops::Fill(ec, dl.view(), loss_scale / static_cast<double>(Q)));
  RETURN_IF_ERROR(ops::CrossEntropyBackward(ec, scores, labels_dev, dl.view(), scores));
  ASSIGN_OR_RETURN(Tensor dpooled, Alloc(ec, {B, H}, dtype_));
  RETURN_IF_ERROR(mc_head_.Backward(sc, mc_dropped_.view(), mc_scores_.view(), dpooled.view()));
  RETURN_IF_ERROR(ops::DropoutBackward(ec, dpooled.view(), MultipleChoiceDropout(sc),
                                       dpooled.view()));
  ASSIGN_OR_RETURN(Tensor dseq, AllocZeros(ec, {N, H}, dtype_));
  RETURN_IF_ERROR(PoolerBackward(sc, dpooled.view(), dseq.view()));
  RETURN_IF_ERROR(EncoderBackward(sc, dseq.view()));
  return result;
}

}  // namespace models
}  // namespace mt
