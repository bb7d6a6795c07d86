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
  int64_t expert = 0;  // Parameters of one expert.
  for (int i = 0; i < store.size(); ++i) {
    const nn::ParamSpec& spec = store.spec(i);
    if (spec.name.rfind("layers.0.mlp.experts.0.", 0) == 0)
      expert += NumElements(spec.global_shape);
  }
  c.active = c.total - static_cast<int64_t>(config.num_layers) *
                           (config.num_experts - config.moe_router_topk) * expert;
  if (config.num_experts == 0) c.active = c.total;
  return c;
}

}  // namespace models
}  // namespace mt
