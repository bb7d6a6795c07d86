#include "models/config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/fields.h"
#include "core/fields_json.h"
#include "core/status.h"
#include "nlohmann/json.hpp"
#include "nn/embedding.h"

namespace mt {
namespace models {

absl::Status ModelConfig::Validate() const {
  auto positive = [](const char* name, int64_t v) -> absl::Status {
    if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(name, " must be positive, got ", v));
    return absl::OkStatus();
  };
  for (auto [name, v] : {std::pair<const char*, int64_t>{"num_layers", num_layers},
                         {"hidden_size", hidden_size},
                         {"num_attention_heads", num_attention_heads},
                         {"vocab_size", vocab_size},
                         {"make_vocab_size_divisible_by", make_vocab_size_divisible_by},
                         {"max_position_embeddings", max_position_embeddings}}) {
    absl::Status s = positive(name, v);
    if (!s.ok()) return s;
  }
  if (hidden_size % num_attention_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("hidden_size ", hidden_size,
                                                   " is not divisible by num_attention_heads ",
                                                   num_attention_heads));
  }
  if (group_query_attention &&
      (num_query_groups < 1 || num_attention_heads % num_query_groups != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_query_groups ", num_query_groups, " does not divide num_attention_heads ",
                     num_attention_heads,
                     "; grouped-query attention needs a divisor of the heads (1: multi-query)"));
  }
  if (ffn_hidden_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ffn_hidden_size must be >= 0 (0: 4 x hidden_size), got ", ffn_hidden_size));
  }
  if (family == Family::kBert && untie_embeddings_and_output_weights) {
    return absl::InvalidArgumentError(
        "untie_embeddings_and_output_weights: BERT's output layer is tied to the word embedding");
  }
  if (!(rotary_base > 0 && std::isfinite(rotary_base))) {
    return absl::InvalidArgumentError(
        absl::StrCat("rotary_base must be finite and > 0, got ", rotary_base));
  }
  if (family == Family::kBert && num_token_types < 1) {
    return absl::InvalidArgumentError("BERT needs num_token_types >= 1");
  }
  for (float p : {hidden_dropout, attention_dropout}) {
    if (!(p >= 0 && p < 1)) {
      return absl::InvalidArgumentError(absl::StrCat("dropout must be in [0, 1), got ", p));
    }
  }
  return ValidateExperts();
}

absl::Status ModelConfig::ValidateExperts() const {
  if (num_experts < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_experts must be >= 0 (0: dense), got ", num_experts));
  }
  if (num_experts == 0) return absl::OkStatus();
  if (moe_router_topk < 1 || moe_router_topk > num_experts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_router_topk ", moe_router_topk, " must be in [1, num_experts = ", num_experts, "]"));
  }
  for (auto [name, v] : {std::pair<const char*, double>{"moe_aux_loss_coeff", moe_aux_loss_coeff},
                         {"moe_z_loss_coeff", moe_z_loss_coeff},
                         {"moe_expert_capacity_factor", moe_expert_capacity_factor}}) {
    if (!(v >= 0 && std::isfinite(v))) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be finite and >= 0, got ", v));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelConfig::ValidateParallel(int tp) const {
  absl::Status s = Validate();
  if (!s.ok()) return s;
  if (tp < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("tensor_model_parallel_size ", tp, " must be >= 1"));
  if (num_attention_heads % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_attention_heads ", num_attention_heads,
                     " is not divisible by tensor_model_parallel_size ", tp,
                     "; choose a tensor-parallel size that divides the number of heads"));
  }
  if (query_groups() % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_query_groups ", query_groups(), " is not divisible by tensor_model_parallel_size ", tp,
        "; each tensor-parallel rank holds whole key/value groups"));
  }
  if (ffn() % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ffn_hidden_size ", ffn(), " is not divisible by tensor_model_parallel_size ", tp));
  }
  return absl::OkStatus();
}

int64_t ModelConfig::PaddedVocab(int tp) const {
  return nn::PaddedVocabSize(vocab_size, make_vocab_size_divisible_by, tp);
}

const char* FamilyArchitecture(Family family) { return family == Family::kGpt2 ? "gpt2" : "bert"; }

ModelConfig ModelConfig::ForFamily(Family family) {
  ModelConfig c;
  c.family = family;
  if (family == Family::kBert) {
    c.vocab_size = 30522;
    c.num_token_types = 2;
  }
  return c;
}

ModelConfig ModelConfig::Sized(Family family, int layers, int64_t hidden, int heads, int64_t vocab,
                               int64_t positions) {
  ModelConfig c = ForFamily(family);
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.vocab_size = vocab;
  c.max_position_embeddings = positions;
  return c;
}

nn::TransformerLayerConfig ModelConfig::LayerConfig(ops::CausalMask causal,
                                                    nn::Recompute recompute) const {
  nn::TransformerLayerConfig lc;
  lc.hidden = hidden_size;
  lc.heads = num_attention_heads;
  lc.num_query_groups = query_groups();
  lc.ffn = ffn();
  lc.norm = norm;
  lc.causal = causal;
  lc.hidden_dropout = hidden_dropout;
  lc.attention_dropout = attention_dropout;
  lc.layernorm_eps = layernorm_eps;
  lc.gelu = gelu;
  lc.init_std = init_std;
  lc.output_init_std = init_std / std::sqrt(2.0 * num_layers);
  lc.recompute = recompute;
  return lc;
}

std::string ModelConfig::ArchitectureName() const {
  return architecture.empty() ? FamilyArchitecture(family) : architecture;
}

namespace {
// The config as stored and printed: ffn resolved, the standard architecture left implicit.
ModelConfig Canonical(const ModelConfig& c) {
  ModelConfig out = c;
  out.ffn_hidden_size = c.ffn();
  if (!c.group_query_attention) out.num_query_groups = ModelConfig().num_query_groups;
  if (c.ArchitectureName() == FamilyArchitecture(c.family)) out.architecture.clear();
  return out;
}
}  // namespace

std::string ModelConfig::DebugString() const {
  ModelConfig c = Canonical(*this);
  c.architecture = ArchitectureName();
  return FieldsToText(c);
}

std::string ModelConfig::ToJson() const {
  nlohmann::json j = FieldsToJson(Canonical(*this));
  if (gelu == ops::GeluForm::kTanh) j.erase("gelu");
  if (num_experts == 0) {
    for (const char* key : {"num_experts", "moe_router_topk", "moe_aux_loss_coeff",
                            "moe_z_loss_coeff", "moe_expert_capacity_factor"}) {
      j.erase(key);
    }
  }
  if (!untie_embeddings_and_output_weights) j.erase("untie_embeddings_and_output_weights");
  if (rotary_base == ModelConfig().rotary_base) j.erase("rotary_base");
  if (!group_query_attention) {
    j.erase("group_query_attention");
    j.erase("num_query_groups");
  }
  return j.dump();
}

absl::StatusOr<ModelConfig> ModelConfig::FromJson(const std::string& json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat("model config is not valid JSON: ", json));
  }
  // Two passes: the family first, whose defaults fill the keys the JSON lacks.
  ModelConfig c;
  absl::Status s = FieldsFromJson(j, &c);
  if (s.ok()) {
    c = ForFamily(c.family);
    s = FieldsFromJson(j, &c);
  }
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("model config: ", s.message()));
  return c;
}

}  // namespace models
}  // namespace mt
