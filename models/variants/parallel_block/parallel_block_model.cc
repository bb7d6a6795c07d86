// A model variant as its own package: GPT-2 with parallel attention + MLP blocks
// (parallel_block.h): one tensor-parallel all-reduce per layer each way instead of two, what the
// paper's readers trade layer structure for at large TP degrees. Everything else is GPT-2's
// decoder (models/gpt2): learned positions, the final LayerNorm, the tied output layer.
//
// Registers the architecture "gpt-parallel-block" and the configs "gpt-parallel-tiny" (for tests
// and quickstart-sized runs) and "gpt-parallel-1.2b" (the paper's 1.2B shape with parallel
// blocks).
#include <memory>
#include <vector>

#include "core/status.h"
#include "models/config.h"
#include "models/gpt2/gpt2.h"
#include "models/registry.h"
#include "models/variants/parallel_block/parallel_block.h"

namespace mt {
namespace models {
namespace {

absl::StatusOr<std::unique_ptr<Model>> CreateParallelBlockGpt(const ModelConfig& config,
                                                              nn::ParameterStore* store,
                                                              const ModelOptions& options) {
  DecoderSpec spec;
  spec.blocks = ParallelBlock::Factory;
  ASSIGN_OR_RETURN(std::unique_ptr<GptModel> m, GptModel::Create(config, store, options, spec));
  return std::unique_ptr<Model>(std::move(m));
}

Architecture ParallelBlockGpt() {
  return {"gpt-parallel-block", Family::kGpt2,
          "GPT-2 with parallel attention + MLP blocks: one TP all-reduce per layer each way "
          "(models/variants/parallel_block)",
          CreateParallelBlockGpt};
}

ModelConfig ParallelConfig(int layers, int64_t hidden, int heads) {
  ModelConfig c = ModelConfig::ForFamily(Family::kGpt2);
  c.architecture = "gpt-parallel-block";
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  return c;
}

std::vector<RegisteredModel> ParallelBlockModels() {
  ModelConfig tiny = ParallelConfig(4, 128, 4);
  tiny.max_position_embeddings = 256;
  return {{"gpt-parallel-tiny", "A 4-layer GPT-2 with parallel attention + MLP blocks", tiny},
          {"gpt-parallel-1.2b", "The paper's 1.2B shape with parallel blocks",
           ParallelConfig(40, 1536, 16)}};
}

MT_REGISTER_ARCHITECTURE(ParallelBlockGpt);
MT_REGISTER_MODELS(ParallelBlockModels);

}  // namespace
}  // namespace models
}  // namespace mt
