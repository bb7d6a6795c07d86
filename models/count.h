// Parameter counts of a model config, computed by declaring the real model's parameters (no
// memory is allocated), so the count is exactly what training would hold.
#ifndef MT_MODELS_COUNT_H_
#define MT_MODELS_COUNT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "models/config.h"

namespace mt {
namespace models {

struct ParameterCount {
  int64_t total = 0;     // In the serial model, including the vocabulary padding for tp.
  int64_t per_rank = 0;  // Held by one TP rank (replicated parameters counted on every rank).
  int64_t padded_vocab = 0;
  // Used for one token: total less, in each layer, the experts a token is not routed to
  // (num_experts - moe_router_topk of them, at their size: the parameters of a model with experts
  // named "layers.<l>.mlp.experts.<e>.*"); total for a model without experts.
  int64_t active = 0;
};

// Builds the model through the registry (every architecture the binary links). InvalidArgument if
// the config is invalid for `tp`; NotFound for an unregistered architecture.
absl::StatusOr<ParameterCount> CountParameters(const ModelConfig& config, int tp);

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_COUNT_H_
