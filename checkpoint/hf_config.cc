#include "checkpoint/hf_config.h"

#include <cstdint>
#include <cstdio>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace checkpoint {
namespace {

using Json = nlohmann::json;

// Keys of either family that do not change the forward math: names, token ids, generation and
// fine-tuning settings, bookkeeping.
const std::set<std::string>& NeutralKeys() {
  static const auto* keys = new std::set<std::string>{
      "_name_or_path",
      "architectures",
      "model_type",
      "transformers_version",
      "torch_dtype",
      "use_cache",
      "bos_token_id",
      "eos_token_id",
      "pad_token_id",
      "n_ctx",
      "embd_pdrop",
      "summary_activation",
      "summary_first_dropout",
      "summary_proj_to_labels",
      "summary_type",
      "summary_use_proj",
      "task_specific_params",
      "output_past",
      "reorder_and_upcast_attn",
      "gradient_checkpointing",
      "classifier_dropout",
      "chunk_size_feed_forward",
      "id2label",
      "label2id",
      "problem_type",
      "output_attentions",
      "output_hidden_states",
      "return_dict",
      "prefix",
      "pretraining_tp",
  };
  return *keys;
}

// Reads keys of one config.json, remembering which it consumed, so that the rest can be checked
// against NeutralKeys(). Errors name the file and the key.
class KeyReader {
 public:
  KeyReader(const std::string& path, const Json& j) : path_(path), j_(j) {}

  absl::Status Error(const std::string& key, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", key, ": ", what));
  }
  absl::Status Unsupported(const std::string& key, const std::string& what) const {
    return absl::UnimplementedError(absl::StrCat(path_, ": ", key, ": ", what));
  }
  const Json* Find(const std::string& key) {
    used_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  // A required integer in [1, max].
  template <typename T>
  absl::Status Positive(const std::string& key, T* out,
                        int64_t max = std::numeric_limits<int32_t>::max()) {
    const Json* v = Find(key);
    if (v == nullptr) return Error(key, "missing (a positive integer)");
    if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > max) {
      return Error(key, absl::StrCat("must be an integer in [1, ", max, "], got ", v->dump()));
    }
    *out = static_cast<T>(v->get<int64_t>());
    return absl::OkStatus();
  }
  // An optional number in [lo, hi); *out keeps its value when absent.
  template <typename T>
  absl::Status Number(const std::string& key, T* out, double lo, double hi) {
    const Json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number() || !(v->get<double>() >= lo && v->get<double>() < hi)) {
      return Error(key, absl::StrCat("must be a number in [", lo, ", ", hi, "), got ", v->dump()));
    }
    *out = static_cast<T>(v->get<double>());
    return absl::OkStatus();
  }
  // An optional token id (-1 when absent or null).
  absl::Status TokenId(const std::string& key, int64_t* out) {
    const Json* v = Find(key);
    *out = -1;
    if (v == nullptr || v->is_null()) return absl::OkStatus();
    if (!v->is_number_integer() || v->get<int64_t>() < 0) {
      return Error(key, absl::StrCat("must be a non-negative integer, got ", v->dump()));
    }
    *out = v->get<int64_t>();
    return absl::OkStatus();
  }
  // An optional switch that this stack supports only at `value`.
  absl::Status Switch(const std::string& key, bool value) {
    const Json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_boolean()) return Error(key, absl::StrCat("must be a boolean, got ", v->dump()));
    if (v->get<bool>() != value) {
      return Unsupported(key, absl::StrCat(v->dump(), " is not supported (only ",
                                           value ? "true" : "false", ", as published)"));
    }
    return absl::OkStatus();
  }
  // An optional string that must be one of `allowed`.
  absl::Status Choice(const std::string& key, const std::set<std::string>& allowed) {
    const Json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_string() || allowed.count(v->get<std::string>()) == 0) {
      return Unsupported(key, absl::StrCat(v->dump(), " is not supported (supported: ",
                                           absl::StrJoin(allowed, ", "), ")"));
    }
    return absl::OkStatus();
  }
  // The activation: GeLU, "gelu" the exact erf form, the others the tanh approximation.
  absl::Status Activation(const std::string& key, ops::GeluForm* form) {
    const Json* v = Find(key);
    if (v == nullptr) return Error(key, "missing (the MLP activation)");
    const std::string name = v->is_string() ? v->get<std::string>() : v->dump();
    if (name == "gelu") {
      *form = ops::GeluForm::kErf;
      return absl::OkStatus();
    }
    if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") {
      *form = ops::GeluForm::kTanh;
      return absl::OkStatus();
    }
    return Unsupported(key, absl::StrCat("unknown activation '", name,
                                         "' (supported: gelu, gelu_new, gelu_pytorch_tanh, "
                                         "gelu_fast)"));
  }
  // Every key is consumed or neutral.
  absl::Status CheckUnknown() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (used_.count(it.key()) == 0 && NeutralKeys().count(it.key()) == 0) {
        return Unsupported(it.key(), "unknown config field; this converter cannot honour it");
      }
    }
    return absl::OkStatus();
  }

 private:
  const std::string& path_;
  const Json& j_;
  std::set<std::string> used_;
};

absl::Status ParseGpt2(KeyReader& r, models::ModelConfig* c) {
  *c = models::ModelConfig::ForFamily(models::Family::kGpt2);
  c->norm = nn::NormPosition::kPreNorm;
  RETURN_IF_ERROR(r.Positive("n_layer", &c->num_layers));
  RETURN_IF_ERROR(r.Positive("n_embd", &c->hidden_size));
  RETURN_IF_ERROR(r.Positive("n_head", &c->num_attention_heads));
  RETURN_IF_ERROR(r.Positive("n_positions", &c->max_position_embeddings));
  RETURN_IF_ERROR(r.Positive("vocab_size", &c->vocab_size));
  const Json* inner = r.Find("n_inner");
  c->ffn_hidden_size = 0;
  if (inner != nullptr && !inner->is_null()) {
    if (!inner->is_number_integer() || inner->get<int64_t>() < 1) {
      return r.Error("n_inner",
                     absl::StrCat("must be null or a positive integer, got ", inner->dump()));
    }
    c->ffn_hidden_size = inner->get<int64_t>();
  }
  RETURN_IF_ERROR(r.Activation("activation_function", &c->gelu));
  RETURN_IF_ERROR(r.Number("layer_norm_epsilon", &c->layernorm_eps, 0.0, 1.0));
  RETURN_IF_ERROR(r.Number("attn_pdrop", &c->attention_dropout, 0.0, 1.0));
  RETURN_IF_ERROR(r.Number("resid_pdrop", &c->hidden_dropout, 0.0, 1.0));
  RETURN_IF_ERROR(r.Number("initializer_range", &c->init_std, 0.0, 1e9));
  RETURN_IF_ERROR(r.Switch("scale_attn_weights", true));
  RETURN_IF_ERROR(r.Switch("scale_attn_by_inverse_layer_idx", false));
  RETURN_IF_ERROR(r.Switch("add_cross_attention", false));
  return r.Switch("tie_word_embeddings", true);
}

absl::Status ParseBert(KeyReader& r, models::ModelConfig* c) {
  *c = models::ModelConfig::ForFamily(models::Family::kBert);
  c->norm = nn::NormPosition::kPostNorm;
  c->layernorm_eps = 1e-12f;
  RETURN_IF_ERROR(r.Positive("num_hidden_layers", &c->num_layers));
  RETURN_IF_ERROR(r.Positive("hidden_size", &c->hidden_size));
  RETURN_IF_ERROR(r.Positive("num_attention_heads", &c->num_attention_heads));
  RETURN_IF_ERROR(r.Positive("intermediate_size", &c->ffn_hidden_size));
  RETURN_IF_ERROR(r.Positive("max_position_embeddings", &c->max_position_embeddings));
  RETURN_IF_ERROR(r.Positive("type_vocab_size", &c->num_token_types));
  RETURN_IF_ERROR(r.Positive("vocab_size", &c->vocab_size));
  RETURN_IF_ERROR(r.Activation("hidden_act", &c->gelu));
  RETURN_IF_ERROR(r.Number("layer_norm_eps", &c->layernorm_eps, 0.0, 1.0));
  RETURN_IF_ERROR(r.Number("hidden_dropout_prob", &c->hidden_dropout, 0.0, 1.0));
  RETURN_IF_ERROR(r.Number("attention_probs_dropout_prob", &c->attention_dropout, 0.0, 1.0));
  RETURN_IF_ERROR(r.Number("initializer_range", &c->init_std, 0.0, 1e9));
  RETURN_IF_ERROR(r.Choice("position_embedding_type", {"absolute"}));
  RETURN_IF_ERROR(r.Switch("is_decoder", false));
  RETURN_IF_ERROR(r.Switch("add_cross_attention", false));
  return r.Switch("tie_word_embeddings", true);
}

// Llama and Mistral (LlamaForCausalLM, MistralForCausalLM): the modern decoder.
absl::Status ParseLlama(KeyReader& r, models::ModelConfig* c) {
  *c = models::ModelConfig::ForFamily(models::Family::kGpt2);
  c->architecture = kLlamaArchitecture;
  c->position_embeddings = false;
  c->hidden_dropout = 0.0f;
  c->attention_dropout = 0.0f;
  c->layernorm_eps = 1e-6f;
  RETURN_IF_ERROR(r.Positive("num_hidden_layers", &c->num_layers));
  RETURN_IF_ERROR(r.Positive("hidden_size", &c->hidden_size));
  RETURN_IF_ERROR(r.Positive("num_attention_heads", &c->num_attention_heads));
  RETURN_IF_ERROR(r.Positive("intermediate_size", &c->ffn_hidden_size));
  RETURN_IF_ERROR(r.Positive("max_position_embeddings", &c->max_position_embeddings));
  RETURN_IF_ERROR(r.Positive("vocab_size", &c->vocab_size));
  c->num_query_groups = c->num_attention_heads;
  if (r.Find("num_key_value_heads") != nullptr) {
    RETURN_IF_ERROR(r.Positive("num_key_value_heads", &c->num_query_groups));
  }
  c->group_query_attention = c->num_query_groups != c->num_attention_heads;
  const Json* head_dim = r.Find("head_dim");
  if (head_dim != nullptr && !head_dim->is_null() &&
      (!head_dim->is_number_integer() ||
       head_dim->get<int64_t>() * c->num_attention_heads != c->hidden_size)) {
    return r.Unsupported("head_dim", absl::StrCat(head_dim->dump(),
                                                  " is not supported (only "
                                                  "hidden_size / num_attention_heads)"));
  }
  RETURN_IF_ERROR(r.Choice("hidden_act", {"silu"}));
  RETURN_IF_ERROR(r.Number("rms_norm_eps", &c->layernorm_eps, 0.0, 1.0));
  RETURN_IF_ERROR(r.Number("rope_theta", &c->rotary_base, 1e-300, 1e300));
  RETURN_IF_ERROR(r.Number("attention_dropout", &c->attention_dropout, 0.0, 1.0));
  RETURN_IF_ERROR(r.Number("initializer_range", &c->init_std, 0.0, 1e9));
  RETURN_IF_ERROR(r.Switch("attention_bias", false));
  RETURN_IF_ERROR(r.Switch("mlp_bias", false));
  const Json* scaling = r.Find("rope_scaling");
  if (scaling != nullptr && !scaling->is_null()) {
    return r.Unsupported("rope_scaling", absl::StrCat(scaling->dump(),
                                                      " is not supported (only "
                                                      "null: plain rotary embeddings)"));
  }
  const Json* tp = r.Find("pretraining_tp");
  if (tp != nullptr && *tp != 1) {
    return r.Unsupported("pretraining_tp", absl::StrCat(tp->dump(), " is not supported (only 1)"));
  }
  const Json* window = r.Find("sliding_window");
  if (window != nullptr && !window->is_null() &&
      !(window->is_number_integer() && window->get<int64_t>() >= c->max_position_embeddings)) {
    return r.Unsupported("sliding_window",
                         absl::StrCat(window->dump(),
                                      " is not supported (only null or at least "
                                      "max_position_embeddings: attention over every position)"));
  }
  const Json* tie = r.Find("tie_word_embeddings");
  if (tie != nullptr && !tie->is_boolean()) {
    return r.Error("tie_word_embeddings", absl::StrCat("must be a boolean, got ", tie->dump()));
  }
  // Hugging Face's LlamaConfig defaults to untied.
  c->untie_embeddings_and_output_weights = tie == nullptr || !tie->get<bool>();
  return absl::OkStatus();
}

// Mixtral's experts (MixtralForCausalLM: Llama's keys plus these): the mixture-of-experts
// architecture, dropless, routed as Mixtral routes (softmax over every expert, top-k,
// renormalised over the chosen: models/variants/moe/routing.h). Hugging Face adds the
// load-balancing loss only with output_router_logits, as router_aux_loss_coef * E * sum_e
// (routed_e / N) P_e, k times ours (which divides by the N k slots): moe_aux_loss_coeff is
// router_aux_loss_coef * k then, else 0.
absl::Status ParseMixtralExperts(KeyReader& r, models::ModelConfig* c) {
  c->architecture = kMixtralArchitecture;
  RETURN_IF_ERROR(r.Positive("num_local_experts", &c->num_experts));
  RETURN_IF_ERROR(r.Positive("num_experts_per_tok", &c->moe_router_topk));
  if (c->moe_router_topk > c->num_experts) {
    return r.Error("num_experts_per_tok", absl::StrCat(c->moe_router_topk, " exceeds the ",
                                                       c->num_experts, " num_local_experts"));
  }
  double jitter = 0, coef = 0;
  RETURN_IF_ERROR(r.Number("router_jitter_noise", &jitter, 0.0, 1e9));
  if (jitter != 0) {
    return r.Unsupported("router_jitter_noise",
                         absl::StrCat(jitter, " is not supported (only 0: no noise)"));
  }
  RETURN_IF_ERROR(r.Number("router_aux_loss_coef", &coef, 0.0, 1e9));
  const Json* logits = r.Find("output_router_logits");
  if (logits != nullptr && !logits->is_boolean()) {
    return r.Error("output_router_logits", absl::StrCat("must be a boolean, got ", logits->dump()));
  }
  const bool aux = logits != nullptr && logits->get<bool>();
  c->moe_aux_loss_coeff = aux ? coef * c->moe_router_topk : 0.0;
  c->moe_expert_capacity_factor = 0.0;
  c->moe_z_loss_coeff = 0.0;
  return absl::OkStatus();
}

// "gpt2" or "bert", from model_type or, without it, from the keys.
absl::StatusOr<std::string> ModelType(KeyReader& r, const Json& j) {
  const Json* type = r.Find("model_type");
  if (type != nullptr) {
    if (type->is_string() && (*type == "gpt2" || *type == "bert" || *type == "llama" ||
                              *type == "mistral" || *type == "mixtral")) {
      return type->get<std::string>();
    }
    return r.Unsupported("model_type", absl::StrCat(type->dump(),
                                                    " is not supported (supported: gpt2, bert, "
                                                    "llama, mistral, mixtral)"));
  }
  if (j.contains("n_embd")) return std::string("gpt2");
  if (j.contains("hidden_size")) return std::string("bert");
  return r.Error("model_type", "missing, and neither n_embd (GPT-2) nor hidden_size (BERT) given");
}

// eps as written in a config: the float's value to 7 significant digits (1e-12, not
// 9.999999960041972e-13).
double ShortestEps(float eps) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", static_cast<double>(eps));
  return std::strtod(buf, nullptr);
}

void PutTokenIds(const HfConfig& config, Json* j) {
  for (auto [key, id] : {std::pair<const char*, int64_t>{"bos_token_id", config.bos_token_id},
                         {"eos_token_id", config.eos_token_id},
                         {"pad_token_id", config.pad_token_id}}) {
    if (id >= 0) (*j)[key] = id;
  }
}

}  // namespace

absl::StatusOr<HfConfig> ParseHfConfig(const std::string& path, const std::string& text) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  KeyReader r(path, j);
  HfConfig out;
  ASSIGN_OR_RETURN(const std::string type, ModelType(r, j));
  out.model_type = type;
  if (type == "llama" || type == "mistral" || type == "mixtral") {
    RETURN_IF_ERROR(ParseLlama(r, &out.model));
    if (type == "mixtral") RETURN_IF_ERROR(ParseMixtralExperts(r, &out.model));
  } else {
    RETURN_IF_ERROR(type == "gpt2" ? ParseGpt2(r, &out.model) : ParseBert(r, &out.model));
  }
  RETURN_IF_ERROR(r.TokenId("bos_token_id", &out.bos_token_id));
  RETURN_IF_ERROR(r.TokenId("eos_token_id", &out.eos_token_id));
  RETURN_IF_ERROR(r.TokenId("pad_token_id", &out.pad_token_id));
  RETURN_IF_ERROR(r.CheckUnknown());
  absl::Status valid = out.model.Validate();
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", valid.message()));
  }
  return out;
}

namespace {

// LlamaForCausalLM / MistralForCausalLM (config.model_type "mistral") of a modern decoder,
// MixtralForCausalLM of a mixture of experts.
absl::StatusOr<Json> LlamaJson(const HfConfig& config) {
  const models::ModelConfig& c = config.model;
  auto refuse = [](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": Hugging Face's Llama cannot express this model"));
  };
  if (c.position_embeddings) return refuse("position_embeddings true");
  if (c.norm != nn::NormPosition::kPreNorm) return refuse("norm post");
  const bool mixtral = c.ArchitectureName() == kMixtralArchitecture;
  if (mixtral && (c.moe_expert_capacity_factor != 0 || c.moe_z_loss_coeff != 0)) {
    return refuse("an expert capacity or a router z-loss");
  }
  const bool mistral = !mixtral && config.model_type == "mistral";
  const char* type = mixtral ? "mixtral" : mistral ? "mistral" : "llama";
  Json j = {{"architectures",
             {mixtral   ? "MixtralForCausalLM"
              : mistral ? "MistralForCausalLM"
                        : "LlamaForCausalLM"}},
            {"model_type", type},
            {"num_hidden_layers", c.num_layers},
            {"hidden_size", c.hidden_size},
            {"num_attention_heads", c.num_attention_heads},
            {"num_key_value_heads", c.query_groups()},
            {"intermediate_size", c.ffn()},
            {"max_position_embeddings", c.max_position_embeddings},
            {"vocab_size", c.vocab_size},
            {"hidden_act", "silu"},
            {"rms_norm_eps", ShortestEps(c.layernorm_eps)},
            {"rope_theta", c.rotary_base},
            {"rope_scaling", nullptr},
            {"attention_bias", false},
            {"attention_dropout", ShortestEps(c.attention_dropout)},
            {"initializer_range", c.init_std},
            {"tie_word_embeddings", !c.untie_embeddings_and_output_weights}};
  if (mixtral) {
    j["num_local_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.moe_router_topk;
    j["router_aux_loss_coef"] = c.moe_aux_loss_coeff / c.moe_router_topk;
    j["output_router_logits"] = c.moe_aux_loss_coeff > 0;
    j["router_jitter_noise"] = 0.0;
  }
  if (mistral || mixtral) {
    j["sliding_window"] = nullptr;
  } else {
    j["mlp_bias"] = false;
  }
  return j;
}

}  // namespace

absl::StatusOr<std::string> HfConfigJson(const HfConfig& config, const std::string& torch_dtype) {
  const models::ModelConfig& c = config.model;
  if (c.ArchitectureName() == kLlamaArchitecture || c.ArchitectureName() == kMixtralArchitecture) {
    ASSIGN_OR_RETURN(Json j, LlamaJson(config));
    PutTokenIds(config, &j);
    j["torch_dtype"] = torch_dtype;
    return j.dump(2) + "\n";
  }
  const bool gpt = c.family == models::Family::kGpt2;
  auto refuse = [](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": Hugging Face's GPT-2 and BERT cannot express this model"));
  };
  if (c.ArchitectureName() != models::FamilyArchitecture(c.family)) {
    return refuse(absl::StrCat("architecture ", c.ArchitectureName()));
  }
  if (gpt != (c.norm == nn::NormPosition::kPreNorm)) {
    return refuse(absl::StrCat("norm ", gpt ? "post" : "pre", " in a ", gpt ? "GPT-2" : "BERT"));
  }
  if (c.group_query_attention) {
    return refuse(
        absl::StrCat("grouped-query attention (", c.num_query_groups, " key/value heads)"));
  }
  if (!c.position_embeddings) return refuse("position_embeddings false");
  if (c.untie_embeddings_and_output_weights) return refuse("an untied output layer");
  if (!gpt && c.num_token_types < 1) return refuse("num_token_types 0 in a BERT");
  const char* act = c.gelu == ops::GeluForm::kErf ? "gelu" : "gelu_new";
  Json j = Json::object();
  if (gpt) {
    j = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"n_layer", c.num_layers},
         {"n_embd", c.hidden_size},
         {"n_head", c.num_attention_heads},
         {"n_positions", c.max_position_embeddings},
         {"n_ctx", c.max_position_embeddings},
         {"n_inner", c.ffn() == 4 * c.hidden_size ? Json(nullptr) : Json(c.ffn())},
         {"vocab_size", c.vocab_size},
         {"activation_function", act},
         {"layer_norm_epsilon", ShortestEps(c.layernorm_eps)},
         {"attn_pdrop", ShortestEps(c.attention_dropout)},
         {"resid_pdrop", ShortestEps(c.hidden_dropout)},
         {"embd_pdrop", ShortestEps(c.hidden_dropout)},
         {"initializer_range", c.init_std},
         {"tie_word_embeddings", true}};
  } else {
    j = {{"architectures", {"BertForPreTraining"}},
         {"model_type", "bert"},
         {"num_hidden_layers", c.num_layers},
         {"hidden_size", c.hidden_size},
         {"num_attention_heads", c.num_attention_heads},
         {"intermediate_size", c.ffn()},
         {"max_position_embeddings", c.max_position_embeddings},
         {"type_vocab_size", c.num_token_types},
         {"vocab_size", c.vocab_size},
         {"hidden_act", act},
         {"layer_norm_eps", ShortestEps(c.layernorm_eps)},
         {"hidden_dropout_prob", ShortestEps(c.hidden_dropout)},
         {"attention_probs_dropout_prob", ShortestEps(c.attention_dropout)},
         {"initializer_range", c.init_std},
         {"position_embedding_type", "absolute"},
         {"tie_word_embeddings", true}};
  }
  PutTokenIds(config, &j);
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace checkpoint
}  // namespace mt
