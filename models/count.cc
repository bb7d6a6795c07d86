#include "models/count.h"

#include "core/status.h"
#include "models/registry.h"
#include "nn/parameter.h"

namespace mt {
namespace models {

absl::StatusOr<ParameterCount> CountParameters(const ModelConfig& config, int tp) {
  RETURN_IF_ERROR(config.ValidateParallel(tp));
  nn::ParameterStore store(/*tp_rank=*/0, tp);
  // The pretraining heads (BERT: MLM + SOP), as the paper counts BERT.
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, CreateModel(config, &store));
  ParameterCount c;
  c.total = store.NumGlobalElements();
  c.per_rank = store.NumLocalElements();
  c.padded_vocab = model->padded_vocab();
  return c;
}

}  // namespace models
}  // namespace mt
