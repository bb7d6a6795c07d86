#include "models/count.h"

#include "core/status.h"
#include "models/bert/bert.h"
#include "models/gpt2/gpt2.h"
#include "nn/parameter.h"

namespace mt {
namespace models {

absl::StatusOr<ParameterCount> CountParameters(const ModelConfig& config, int tp) {
  RETURN_IF_ERROR(config.ValidateParallel(tp));
  nn::ParameterStore store(/*tp_rank=*/0, tp);
  switch (config.family) {
    case Family::kGpt2: {
      ASSIGN_OR_RETURN(auto model, GptModel::Create(config, &store));
      (void)model;
      break;
    }
    case Family::kBert: {
      // Pretraining heads (MLM + SOP), as the paper counts BERT.
      ASSIGN_OR_RETURN(auto model, BertModel::Create(config, &store));
      (void)model;
      break;
    }
  }
  ParameterCount c;
  c.total = store.NumGlobalElements();
  c.per_rank = store.NumLocalElements();
  c.padded_vocab = config.PaddedVocab(tp);
  return c;
}

}  // namespace models
}  // namespace mt
