// A model variant as its own package: the modern decoder (as in LLaMA): RMSNorm before attention
// and the MLP and after the last layer, a SwiGLU MLP, rotary position embeddings on q and k
// instead of learned positions (base ModelConfig::rotary_base), and no biases in the attention
// projections; the output layer is tied to the word embedding unless
// ModelConfig::untie_embeddings_and_output_weights (as in Llama) says otherwise. This is the
// architecture the Hugging Face converter maps Llama and Mistral checkpoints to
// (checkpoint/hf_config.h). Everything here is
// composition: the blocks are nn::TransformerLayers with RMSNorm and SwiGLU factories, in the
// GPT-2 model's decoder (models/gpt2), so it trains, checkpoints, evaluates and runs under tensor
// parallelism like GPT-2, with the same two all-reduces per layer each way.
//
// Registers the architecture "modern-decoder" and the configs "modern-decoder-tiny" (for tests
// and quickstart-sized runs) and "modern-decoder-124m" (GPT-2 small's shape; the SwiGLU width 8h/3
// keeps GPT-2's MLP parameter count), and their Llama-style grouped-query attention versions
// "modern-decoder-gqa-tiny" (4 heads sharing 2 key/value heads) and "modern-decoder-gqa-124m"
// (12 heads, 4 key/value heads, as Llama 2 70B's 8:1 and Mistral's 4:1 share them).
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "models/config.h"
#include "models/gpt2/gpt2.h"
#include "models/registry.h"
#include "nn/transformer.h"

namespace mt {
namespace models {
namespace {

// rotary_base: ModelConfig::rotary_base (10000 unless a converted Llama says otherwise).
DecoderSpec ModernDecoderSpec(double rotary_base) {
  DecoderSpec spec;
  spec.blocks = [rotary_base](const nn::TransformerLayerConfig& config) {
    nn::LayerSpec layer{config};
    layer.config.rotary_base = rotary_base;
    layer.config.attention_bias = nn::Bias::kNo;
    layer.norm = nn::RmsNormFactory();
    layer.mlp = nn::SwiGluMlpFactory();
    return nn::TransformerLayers(layer);
  };
  spec.final_norm = nn::RmsNormFactory();
  spec.final_norm_name = "final_norm";
  return spec;
}

absl::StatusOr<std::unique_ptr<Model>> CreateModernDecoder(const ModelConfig& config,
                                                           nn::ParameterStore* store,
                                                           const ModelOptions& options) {
  if (config.position_embeddings) {
    return absl::InvalidArgumentError(
        "modern-decoder: positions come from rotary embeddings; set position_embeddings false");
  }
  if (config.norm != nn::NormPosition::kPreNorm) {
    return absl::InvalidArgumentError("modern-decoder: the norms are pre-norm only");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<GptModel> m,
                   GptModel::Create(config, store, options, ModernDecoderSpec(config.rotary_base)));
  return std::unique_ptr<Model>(std::move(m));
}

Architecture ModernDecoder() {
  Architecture a{"modern-decoder", Family::kGpt2,
                 "pre-norm RMSNorm, SwiGLU MLP, rotary positions, no attention biases "
                 "(models/variants/modern_decoder)",
                 CreateModernDecoder};
  a.has_rotary = true;
  return a;
}

ModelConfig ModernConfig(int layers, int64_t hidden, int heads, int64_t ffn) {
  ModelConfig c = ModelConfig::ForFamily(Family::kGpt2);
  c.architecture = "modern-decoder";
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.ffn_hidden_size = ffn;
  c.position_embeddings = false;
  c.max_position_embeddings = 1024;
  return c;
}

// `c` with grouped-query attention: `groups` key/value heads.
ModelConfig WithQueryGroups(ModelConfig c, int groups) {
  c.group_query_attention = true;
  c.num_query_groups = groups;
  return c;
}

std::vector<RegisteredModel> ModernDecoderModels() {
  ModelConfig tiny = ModernConfig(4, 128, 4, 344);
  tiny.max_position_embeddings = 256;
  const ModelConfig small = ModernConfig(12, 768, 12, 2048);
  return {
      {"modern-decoder-tiny", "A 4-layer modern decoder (RMSNorm, SwiGLU, rotary)", tiny},
      {"modern-decoder-124m", "GPT-2 small's shape as a modern decoder (SwiGLU width 2048)", small},
      {"modern-decoder-gqa-tiny",
       "modern-decoder-tiny with grouped-query attention: 2 key/value heads for 4 heads",
       WithQueryGroups(tiny, 2)},
      {"modern-decoder-gqa-124m",
       "modern-decoder-124m with grouped-query attention (Llama-style): 4 key/value heads "
       "for 12 heads",
       WithQueryGroups(small, 4)}};
}

MT_REGISTER_ARCHITECTURE(ModernDecoder);
MT_REGISTER_MODELS(ModernDecoderModels);

}  // namespace
}  // namespace models
}  // namespace mt
