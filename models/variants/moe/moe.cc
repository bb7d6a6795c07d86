// Registers the architecture "moe" and its configs "moe-tiny" (tests and quickstart-sized runs:
// 4 experts of width 172, top-2, so that a token's MLP work is modern-decoder-tiny's width 344)
// and "moe-8x124m" (GPT-2 small's shape with 8 SwiGLU experts of width 2048, top-2).
#include "models/variants/moe/moe.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "models/flops.h"
#include "models/registry.h"
#include "nn/transformer.h"

namespace mt {
namespace models {
namespace moe {
namespace {

RouterOptions RouterOptionsOf(const ModelConfig& c) {
  RouterOptions o;
  o.experts = c.num_experts;
  o.topk = c.moe_router_topk;
  o.aux_coeff = c.moe_aux_loss_coeff;
  o.z_coeff = c.moe_z_loss_coeff;
  o.capacity_factor = c.moe_expert_capacity_factor;
  return o;
}

// rotary_base: ModelConfig::rotary_base (Mixtral's rope_theta).
DecoderSpec MoeSpec(const RouterOptions& options, std::shared_ptr<MoeStats> stats,
                    comm::Communicator* ep, double rotary_base) {
  DecoderSpec spec;
  spec.blocks = [options, stats, ep, rotary_base](const nn::TransformerLayerConfig& config) {
    nn::LayerSpec layer{config};
    layer.config.rotary_base = rotary_base;
    layer.config.attention_bias = nn::Bias::kNo;
    layer.norm = nn::RmsNormFactory();
    layer.mlp = MoeMlpFactory(options, stats, ep);
    return nn::TransformerLayers(layer);
  };
  spec.final_norm = nn::RmsNormFactory();
  spec.final_norm_name = "final_norm";
  return spec;
}

absl::Status CheckSupported(const ModelConfig& config, const ModelOptions& options) {
  if (config.num_experts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe: num_experts must be >= 1 for the mixture-of-experts architecture, got ",
                     config.num_experts));
  }
  if (config.position_embeddings) {
    return absl::InvalidArgumentError(
        "moe: positions come from rotary embeddings; set position_embeddings false");
  }
  if (config.norm != nn::NormPosition::kPreNorm) {
    return absl::InvalidArgumentError("moe: the norms are pre-norm only");
  }
  const int ep = options.expert_parallel == nullptr ? 1 : options.expert_parallel->size();
  if (config.num_experts % ep != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe: num_experts ", config.num_experts,
                     " is not divisible by expert_model_parallel_size ", ep));
  }
  if (options.sequence_parallel) {
    return absl::InvalidArgumentError(
        "moe: sequence parallelism is not supported for the mixture of experts; drop "
        "--sequence_parallel");
  }
  if (options.context_parallel > 1) {
    return absl::InvalidArgumentError(
        "moe: context parallelism is not implemented for the mixture of experts (its router "
        "statistics are per sequence); use --context_parallel_size=1");
  }
  return absl::OkStatus();
}

}  // namespace

double ActiveLayerWeights(const ModelConfig& c) {
  const double h = static_cast<double>(c.hidden_size), f = static_cast<double>(c.ffn());
  return 4.0 * h * h + h * c.num_experts + c.moe_router_topk * 3.0 * h * f;
}

absl::StatusOr<std::unique_ptr<MoeModel>> MoeModel::Create(const ModelConfig& config,
                                                           nn::ParameterStore* store,
                                                           const ModelOptions& options) {
  RETURN_IF_ERROR(CheckSupported(config, options));
  std::unique_ptr<MoeModel> m(new MoeModel());
  m->stats_ = std::make_shared<MoeStats>();
  ASSIGN_OR_RETURN(m->inner_,
                   GptModel::Create(config, store, options,
                                    MoeSpec(RouterOptionsOf(config), m->stats_,
                                            options.expert_parallel, config.rotary_base)));
  m->active_layer_weights_ = ActiveLayerWeights(config);
  m->recompute_ = options.recompute == nn::Recompute::kYes;
  m->holds_output_ = options.stage.holds_output;
  m->layer_share_ = static_cast<double>(m->inner_->stack().num_layers()) / config.num_layers;
  return m;
}

std::vector<std::string> MoeModel::loss_names() const {
  std::vector<std::string> names = {"lm loss", "moe aux loss"};
  if (config().moe_z_loss_coeff > 0) names.push_back("moe z loss");
  for (int e = 0; e < config().num_experts; ++e) names.push_back(absl::StrCat("moe load ", e));
  return names;
}

absl::StatusOr<Losses> MoeModel::ForwardBackward(const nn::StepContext& sc, const Batch& batch,
                                                 Backward backward, double loss_scale) {
  stats_->loss_scale = loss_scale;
  ASSIGN_OR_RETURN(Losses l, inner_->ForwardBackward(sc, batch, backward, loss_scale));
  return WithAuxiliary(std::move(l));
}

Losses MoeModel::WithAuxiliary(Losses l) const {
  const double aux = stats_->aux_loss(), z = stats_->z_loss();
  l.parts.push_back(aux);
  if (config().moe_z_loss_coeff > 0) l.parts.push_back(z);
  l.total += aux + z;
  for (double load : stats_->Loads()) l.parts.push_back(load * layer_share_);
  return l;
}

absl::StatusOr<Losses> MoeModel::StageForward(const nn::StepContext& sc, const Batch& batch,
                                              const TensorView& input, const TensorView& output) {
  ASSIGN_OR_RETURN(Losses l, inner_->StageForward(sc, batch, input, output));
  if (!holds_output_) l.parts = {0.0};  // No language-model loss here.
  return WithAuxiliary(std::move(l));
}

absl::Status MoeModel::StageBackward(const nn::StepContext& sc, const TensorView& output_grad,
                                     const TensorView& input_grad, double loss_scale) {
  stats_->loss_scale = loss_scale;
  return inner_->StageBackward(sc, output_grad, input_grad, loss_scale);
}

double MoeModel::TrainingFlops(int64_t batch, int64_t seq_length, int64_t scored) const {
  (void)scored;
  return DecoderFlops(batch, seq_length, inner_->stack().num_layers(), config().hidden_size,
                      holds_output_ ? padded_vocab() : 0, active_layer_weights_, recompute_);
}

namespace {

absl::StatusOr<std::unique_ptr<Model>> CreateMoe(const ModelConfig& config,
                                                 nn::ParameterStore* store,
                                                 const ModelOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<MoeModel> m, MoeModel::Create(config, store, options));
  return std::unique_ptr<Model>(std::move(m));
}

Architecture Moe() {
  Architecture a{"moe", Family::kGpt2,
                 "mixture of SwiGLU experts with a top-k router in modern-decoder blocks "
                 "(models/variants/moe)",
                 CreateMoe};
  a.has_experts = true;
  a.has_rotary = true;
  return a;
}

ModelConfig MoeConfig(int layers, int64_t hidden, int heads, int64_t ffn, int experts) {
  ModelConfig c = ModelConfig::ForFamily(Family::kGpt2);
  c.architecture = "moe";
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.ffn_hidden_size = ffn;
  c.position_embeddings = false;
  c.max_position_embeddings = 1024;
  c.num_experts = experts;
  c.moe_router_topk = 2;
  c.moe_aux_loss_coeff = 0.01;
  return c;
}

std::vector<RegisteredModel> MoeModels() {
  ModelConfig tiny = MoeConfig(4, 128, 4, 172, 4);
  tiny.max_position_embeddings = 256;
  return {
      {"moe-tiny", "A 4-layer mixture of 4 SwiGLU experts (top-2) in modern-decoder blocks", tiny},
      {"moe-8x124m", "GPT-2 small's shape with 8 SwiGLU experts of width 2048, top-2",
       MoeConfig(12, 768, 12, 2048, 8)}};
}

MT_REGISTER_ARCHITECTURE(Moe);
MT_REGISTER_MODELS(MoeModels);

}  // namespace
}  // namespace moe
}  // namespace models
}  // namespace mt
