// Model configurations: one typed struct for the GPT-2 and BERT families, validated against a
// tensor-parallel degree.
#ifndef MT_MODELS_CONFIG_H_
#define MT_MODELS_CONFIG_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nn/transformer.h"

namespace mt {
namespace models {

enum class Family { kGpt2, kBert };
inline constexpr std::pair<absl::string_view, Family> kFamilyNames[] = {{"gpt2", Family::kGpt2},
                                                                        {"bert", Family::kBert}};
inline constexpr std::pair<absl::string_view, nn::NormPosition> kNormNames[] = {
    {"pre", nn::NormPosition::kPreNorm}, {"post", nn::NormPosition::kPostNorm}};
inline constexpr std::pair<absl::string_view, ops::GeluForm> kGeluNames[] = {
    {"tanh", ops::GeluForm::kTanh}, {"erf", ops::GeluForm::kErf}};

// The standard architecture of each family: "gpt2" or "bert".
const char* FamilyArchitecture(Family family);

// The settings of a model. Defaults are those of the pretraining drivers' flags; a family's
// standard vocabulary and token types come from ForFamily.
struct ModelConfig {
  Family family = Family::kGpt2;
  // The registered architecture (models/registry.h) that builds the model; empty: the family's
  // standard one (FamilyArchitecture). Variant packages register their own.
  std::string architecture;
  int num_layers = 4;
  int64_t hidden_size = 128;
  int num_attention_heads = 4;
  // Grouped-query attention (Megatron's --group_query_attention --num_query_groups): K/V heads
  // shared by groups of query heads. Without it every head has its own (num_query_groups unused).
  bool group_query_attention = false;
  int num_query_groups = 1;
  int64_t ffn_hidden_size = 0;                 // 0: 4 * hidden_size.
  int64_t vocab_size = 50257;                  // Real vocabulary (GPT-2 BPE: 50,257; BERT: 30,522).
  int64_t make_vocab_size_divisible_by = 128;  // Padded to a multiple of this times TP.
  int64_t max_position_embeddings = 1024;
  bool position_embeddings = true;  // Learned absolute positions.
  int num_token_types = 0;          // BERT: 2.
  nn::NormPosition norm = nn::NormPosition::kPreNorm;
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
  float layernorm_eps = 1e-5f;
  // The GeLU of the MLPs and of BERT's MLM head: tanh (GPT-2, Megatron) or erf (the published
  // BERT).
  ops::GeluForm gelu = ops::GeluForm::kTanh;
  double init_std = 0.02;  // N(0, 0.02); output projections / sqrt(2 * layers).
  // GPT family: a separate output layer "output_layer.weight" [V_padded, H] (split on the
  // vocabulary like the word embedding) instead of logits from the word embedding (Megatron's
  // --untie_embeddings_and_output_weights; Llama's tie_word_embeddings false). BERT refuses it.
  bool untie_embeddings_and_output_weights = false;
  // Base of the rotary position embeddings, theta_i = rotary_base^(-2i / D), in architectures
  // that have them (models/variants/modern_decoder; Llama's rope_theta); others ignore it.
  double rotary_base = 10000.0;
  // Mixture of experts (an architecture that has experts, e.g. models/variants/moe; others refuse
  // num_experts > 0): each layer's MLP is num_experts SwiGLU experts of width ffn_hidden_size, a
  // linear router choosing moe_router_topk of them per token, the load-balancing loss
  // moe_aux_loss_coeff * E * sum_e f_e P_e and the router z-loss moe_z_loss_coeff * mean(lse^2)
  // added to the objective; dropless when moe_expert_capacity_factor is 0, else each expert keeps
  // at most ceil(factor * tokens * topk / E) of the tokens routed to it (the most probable).
  int num_experts = 0;
  int moe_router_topk = 2;
  double moe_aux_loss_coeff = 0.0;
  double moe_z_loss_coeff = 0.0;
  double moe_expert_capacity_factor = 0.0;

  // Every field, declared once (core/fields.h): the printed description, the checkpoint JSON
  // and the drivers' flags walk this list.
  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("family", &self.family, "Model family.", kFamilyNames);
    v("architecture", &self.architecture,
      "Registered architecture building the model (empty: the family's standard one).");
    v("num_layers", &self.num_layers, "Transformer layers.");
    v("hidden_size", &self.hidden_size, "Hidden size.");
    v("num_attention_heads", &self.num_attention_heads, "Attention heads.");
    v("group_query_attention", &self.group_query_attention,
      "Grouped-query attention: key/value heads shared by groups of query heads.");
    v("num_query_groups", &self.num_query_groups,
      "Key/value heads with --group_query_attention (divides the heads; 1: multi-query).");
    v("ffn_hidden_size", &self.ffn_hidden_size, "MLP width (0: 4 x hidden_size).");
    v("vocab_size", &self.vocab_size, "Vocabulary size (before padding).");
    v("make_vocab_size_divisible_by", &self.make_vocab_size_divisible_by,
      "Pad the vocabulary to a multiple of this x TP.");
    v("max_position_embeddings", &self.max_position_embeddings,
      "Longest sequence (learned positions).");
    v("position_embeddings", &self.position_embeddings, "Learned absolute position embeddings.");
    v("num_token_types", &self.num_token_types, "Token types (segments; BERT).");
    v("norm", &self.norm, "Norm position: pre or post.", kNormNames);
    v("hidden_dropout", &self.hidden_dropout, "Dropout on the residual stream.");
    v("attention_dropout", &self.attention_dropout, "Dropout on attention probabilities.");
    v("layernorm_eps", &self.layernorm_eps, "Epsilon of the norms.");
    v("gelu", &self.gelu, "GeLU form: tanh (approximation) or erf (exact).", kGeluNames);
    v("init_std", &self.init_std, "Std of the normal initialisation.");
    v("untie_embeddings_and_output_weights", &self.untie_embeddings_and_output_weights,
      "GPT family: an output layer of its own instead of the word embedding's transpose.");
    v("rotary_base", &self.rotary_base,
      "Base of the rotary position embeddings (architectures that have them; Llama's "
      "rope_theta).");
    v("num_experts", &self.num_experts, "Experts per MoE layer (0: a dense model).");
    v("moe_router_topk", &self.moe_router_topk, "Experts each token is routed to.");
    v("moe_aux_loss_coeff", &self.moe_aux_loss_coeff,
      "Coefficient of the load-balancing loss E * sum_e f_e P_e.");
    v("moe_z_loss_coeff", &self.moe_z_loss_coeff,
      "Coefficient of the router z-loss mean(logsumexp(logits)^2).");
    v("moe_expert_capacity_factor", &self.moe_expert_capacity_factor,
      "Expert capacity as a factor of the even share tokens * topk / E (0: dropless).");
  }

  // The defaults with a family's standard vocabulary and token types (GPT-2 BPE; BERT WordPiece
  // with 2 token types).
  static ModelConfig ForFamily(Family family);
  // ForFamily(family) with this shape: `layers` layers of `hidden` with `heads` heads, a real
  // vocabulary of `vocab` tokens and `positions` positions.
  static ModelConfig Sized(Family family, int layers, int64_t hidden, int heads, int64_t vocab,
                           int64_t positions);

  int64_t ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  // Key/value heads: num_query_groups with grouped-query attention, else num_attention_heads.
  int query_groups() const {
    return group_query_attention ? num_query_groups : num_attention_heads;
  }
  // The transformer layers' settings (nn/transformer.h): sizes, norm position, dropouts, eps and
  // the initialisation (output projections scaled by 1 / sqrt(2 * layers)).
  nn::TransformerLayerConfig LayerConfig(ops::CausalMask causal, nn::Recompute recompute) const;
  // InvalidArgument naming the problem: non-positive sizes, hidden not divisible by heads, ...
  absl::Status Validate() const;
  // The mixture-of-experts fields alone (part of Validate): num_experts >= 0 and, with experts,
  // 1 <= moe_router_topk <= num_experts and finite non-negative coefficients and capacity.
  absl::Status ValidateExperts() const;
  // Validate() plus the TP constraints: heads, query groups and ffn divisible by tp, tp >= 1.
  absl::Status ValidateParallel(int tp) const;
  int64_t PaddedVocab(int tp) const;
  // architecture, or the family's standard one when it is empty.
  std::string ArchitectureName() const;
  // Multi-line "key: value" description of every field (ffn_hidden_size resolved).
  std::string DebugString() const;
  // Every field as a JSON object (stored in checkpoints and compared on load; ffn_hidden_size
  // resolved). "architecture" is written only when it is not the family's standard one, "gelu"
  // only when it is not tanh, the moe_* fields only with experts, and the query groups only with
  // grouped-query attention, untie_embeddings_and_output_weights only when true and rotary_base
  // only when it is not 10000, so that checkpoints of the standard GPT-2 and BERT read the same
  // with or without them.
  std::string ToJson() const;
  // The inverse of ToJson (missing keys keep the family's defaults, ForFamily). InvalidArgument
  // naming the key for malformed JSON, a value of the wrong type, or an unknown family or norm.
  static absl::StatusOr<ModelConfig> FromJson(const std::string& json);
};

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_CONFIG_H_
