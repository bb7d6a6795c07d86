#include "train/bert_task.h"

#include "core/ops/cross_entropy.h"
#include "core/status.h"
#include "train/flops.h"

namespace mt {
namespace train {

namespace {

absl::StatusOr<Losses> Run(models::BertModel* model, const nn::StepContext& sc,
                           const data::BertMicroBatch& mb, bool compute_grad, float loss_scale) {
  ASSIGN_OR_RETURN(models::BertPretrainingLosses l,
                   model->ForwardBackward(sc, mb.tokens.view(), mb.token_types.view(),
                                          mb.padding_mask.view(), mb.mlm_labels.view(),
                                          mb.sop_labels.view(), compute_grad, loss_scale));
  return Losses{l.total, {l.mlm, l.sop}};
}

}  // namespace

absl::StatusOr<std::optional<MicroBatchResult>> BertTask::TrainMicroBatch(
    const nn::StepContext& sc, float loss_scale) {
  std::optional<data::BertMicroBatch> mb = train_->Next();
  if (!mb) return std::nullopt;
  MicroBatchResult r;
  ASSIGN_OR_RETURN(r.losses, Run(model_, sc, *mb, /*compute_grad=*/true, loss_scale));
  // The loader's labels are host tensors.
  const int32_t* labels = mb->mlm_labels.data_as<int32_t>();
  int64_t masked = 0;
  for (int64_t i = 0; i < mb->mlm_labels.numel(); ++i) masked += labels[i] != ops::kIgnoreIndex;
  const models::ModelConfig& c = model_->config();
  r.model_flops = BertModelFlops(mb->tokens.shape()[0], mb->tokens.shape()[1], masked,
                                 c.num_layers, c.hidden_size, model_->padded_vocab(), recompute_);
  return r;
}

absl::Status BertTask::StartValidation() {
  if (!make_valid_) return absl::FailedPreconditionError("no validation data");
  ASSIGN_OR_RETURN(valid_, make_valid_());
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Losses>> BertTask::ValidMicroBatch(const nn::StepContext& sc) {
  if (valid_ == nullptr) return absl::FailedPreconditionError("StartValidation was not called");
  std::optional<data::BertMicroBatch> mb = valid_->Next();
  if (!mb) return std::nullopt;
  ASSIGN_OR_RETURN(Losses l, Run(model_, sc, *mb, /*compute_grad=*/false, 1.0f));
  return l;
}

}  // namespace train
}  // namespace mt
