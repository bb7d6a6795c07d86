// A model variant as its own package: GPT-2 without learned position embeddings (order enters only
// through the causal mask), registered under "gpt2-tiny-nopos".
#include <vector>

#include "models/config.h"
#include "models/registry.h"

namespace mt {
namespace models {
namespace {

std::vector<RegisteredModel> NoPositionModels() {
  ModelConfig c;
  c.family = Family::kGpt2;
  c.num_layers = 4;
  c.hidden_size = 128;
  c.num_attention_heads = 4;
  c.vocab_size = 50257;
  c.max_position_embeddings = 256;
  c.position_embeddings = false;
  return {{"gpt2-tiny-nopos", "gpt2-tiny without position embeddings (variant package)", c}};
}

MT_REGISTER_MODELS(NoPositionModels);

}  // namespace
}  // namespace models
}  // namespace mt
