#include "train/gpt_task.h"

#include "core/status.h"
#include "train/flops.h"

namespace mt {
namespace train {

absl::StatusOr<std::optional<MicroBatchResult>> GptTask::TrainMicroBatch(
    const nn::StepContext& sc, float loss_scale) {
  std::optional<data::MicroBatch> mb = train_->Next();
  if (!mb) return std::nullopt;
  ASSIGN_OR_RETURN(double loss, model_->ForwardBackward(sc, mb->inputs.view(), mb->labels.view(),
                                                        /*compute_grad=*/true, loss_scale));
  const models::ModelConfig& c = model_->config();
  MicroBatchResult r;
  r.losses.total = loss;
  r.losses.parts = {loss};
  r.model_flops = ModelFlopsPerIteration(mb->inputs.shape()[0], mb->inputs.shape()[1],
                                         c.num_layers, c.hidden_size, model_->padded_vocab(),
                                         recompute_);
  return r;
}

absl::Status GptTask::StartValidation() {
  if (!make_valid_) return absl::FailedPreconditionError("no validation data");
  ASSIGN_OR_RETURN(valid_, make_valid_());
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Losses>> GptTask::ValidMicroBatch(const nn::StepContext& sc) {
  if (valid_ == nullptr) return absl::FailedPreconditionError("StartValidation was not called");
  std::optional<data::MicroBatch> mb = valid_->Next();
  if (!mb) return std::nullopt;
  ASSIGN_OR_RETURN(double loss, model_->ForwardBackward(sc, mb->inputs.view(), mb->labels.view(),
                                                        /*compute_grad=*/false));
  return Losses{loss, {loss}};
}

}  // namespace train
}  // namespace mt
