#include "checkpoint/hf_testutil.h"

#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/safetensors.h"
#include "core/dtype.h"
#include "core/file_system.h"
#include "core/status.h"

namespace mt {
namespace checkpoint {
namespace testing {
namespace {

using Json = nlohmann::json;

// Random tensors rounded to the file's dtype.
class Generator {
 public:
  Generator(uint64_t seed, DType dtype) : rng_(seed), dtype_(dtype) {}
  HfTestTensor Normal(const Shape& shape, double mean, double std) {
    HfTestTensor t{shape, {}};
    std::normal_distribution<double> n(mean, std);
    for (int64_t i = 0; i < NumElements(shape); ++i) t.values.push_back(Round(n(rng_)));
    return t;
  }
  double Round(double v) const {
    const float f = static_cast<float>(v);
    if (dtype_ == DType::kBF16) return Bf16ToFloat(FloatToBf16(f));
    if (dtype_ == DType::kF16) return HalfToFloat(FloatToHalf(f));
    return f;
  }

 private:
  std::mt19937_64 rng_;
  DType dtype_;
};

void AddLinear(Generator& g, HfTestModel* m, const std::string& name, int64_t rows, int64_t cols,
               int64_t bias) {
  m->tensors[name + ".weight"] = g.Normal({rows, cols}, 0, 0.3);
  m->tensors[name + ".bias"] = g.Normal({bias}, 0, 0.1);
}

void AddNorm(Generator& g, HfTestModel* m, const std::string& name, int64_t h) {
  m->tensors[name + ".weight"] = g.Normal({h}, 1, 0.1);
  m->tensors[name + ".bias"] = g.Normal({h}, 0, 0.1);
}

// The stored name of a canonical one.
std::string StoredName(const std::string& canonical, bool gpt, const HfWriteOptions& o) {
  std::string s = canonical;
  if (o.legacy_norm_names && absl::StrContains(s, "LayerNorm.")) {
    if (absl::EndsWith(s, ".weight")) s = s.substr(0, s.size() - 6) + "gamma";
    if (absl::EndsWith(s, ".bias")) s = s.substr(0, s.size() - 4) + "beta";
  }
  const bool head = absl::StartsWith(s, "cls.") || absl::StartsWith(s, "lm_head.");
  return head ? s : o.prefix + s;
}

// f32 / bf16 / f16 host tensor of a test tensor.
Tensor ToTensor(const HfTestTensor& t, DType dtype) {
  Tensor out = Tensor::Host(t.shape, dtype);
  for (size_t i = 0; i < t.values.size(); ++i) {
    const float f = static_cast<float>(t.values[i]);
    if (dtype == DType::kF32) out.data_as<float>()[i] = f;
    if (dtype == DType::kBF16) out.data_as<bf16>()[i] = FloatToBf16(f);
    if (dtype == DType::kF16) out.data_as<f16>()[i] = FloatToHalf(f);
  }
  return out;
}

// Llama's buffers and tied copy.
void LlamaExtras(const HfTestModel& m, const HfWriteOptions& o,
                 std::map<std::string, HfTestTensor>* extras) {
  const int64_t D =
      m.config.value("hidden_size", int64_t{2}) / m.config.value("num_attention_heads", int64_t{1});
  HfTestTensor inv{{D / 2}, {}};
  for (int64_t i = 0; i < D / 2; ++i) inv.values.push_back(static_cast<float>(1.0 / (i + 1)));
  for (int l = 0; o.buffers && l < m.config.value("num_hidden_layers", 0); ++l) {
    (*extras)[absl::StrCat("layers.", l, ".self_attn.rotary_emb.inv_freq")] = inv;
  }
  if (o.tied_copies && m.tensors.count("lm_head.weight") == 0) {
    (*extras)["lm_head.weight"] = m.tensors.at("embed_tokens.weight");
  }
}

// The extra tensors a file may carry (buffers, tied copies), canonical name -> tensor.
std::map<std::string, HfTestTensor> Extras(const HfTestModel& m, const HfWriteOptions& o) {
  std::map<std::string, HfTestTensor> extras;
  const std::string type = m.config["model_type"];
  if (type == "llama" || type == "mistral" || type == "mixtral") {
    LlamaExtras(m, o, &extras);
    return extras;
  }
  const bool gpt = m.config["model_type"] == "gpt2";
  if (o.buffers && gpt) {
    const int64_t n = m.config.value("n_positions", int64_t{1});
    HfTestTensor mask{{1, 1, n, n}, {}};
    for (int64_t i = 0; i < n * n; ++i) mask.values.push_back(i % n <= i / n ? 1.0 : 0.0);
    HfTestTensor masked;  // A scalar (shape []).
    masked.values = {-1e4};
    for (int l = 0; l < m.config.value("n_layer", 0); ++l) {
      extras[absl::StrCat("h.", l, ".attn.bias")] = mask;
      extras[absl::StrCat("h.", l, ".attn.masked_bias")] = masked;
    }
  }
  if (o.tied_copies && gpt) extras["lm_head.weight"] = m.tensors.at("wte.weight");
  if (o.tied_copies && !gpt) {
    extras["cls.predictions.decoder.weight"] = m.tensors.at("embeddings.word_embeddings.weight");
    extras["cls.predictions.decoder.bias"] = m.tensors.at("cls.predictions.bias");
  }
  return extras;
}

}  // namespace

HfTestModel TinyGpt2(const HfTestOptions& o) {
  Generator g(o.seed, o.dtype);
  HfTestModel m;
  m.dtype = o.dtype;
  const int64_t H = o.hidden;
  m.config = {{"architectures", {"GPT2LMHeadModel"}},
              {"model_type", "gpt2"},
              {"activation_function", "gelu_new"},
              {"n_layer", o.layers},
              {"n_embd", H},
              {"n_head", o.heads},
              {"n_positions", o.positions},
              {"n_ctx", o.positions},
              {"n_inner", nullptr},
              {"vocab_size", o.vocab},
              {"layer_norm_epsilon", 1e-5},
              {"attn_pdrop", 0.1},
              {"resid_pdrop", 0.1},
              {"embd_pdrop", 0.1},
              {"initializer_range", 0.02},
              {"bos_token_id", o.vocab - 1},
              {"eos_token_id", o.vocab - 1},
              {"summary_type", "cls_index"},
              {"scale_attn_weights", true},
              {"use_cache", true},
              {"torch_dtype", "float32"},
              {"transformers_version", "4.40.0"}};
  m.tensors["wte.weight"] = g.Normal({o.vocab, H}, 0, 0.5);
  m.tensors["wpe.weight"] = g.Normal({o.positions, H}, 0, 0.5);
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = absl::StrCat("h.", l, ".");
    AddNorm(g, &m, p + "ln_1", H);
    AddLinear(g, &m, p + "attn.c_attn", H, 3 * H, 3 * H);
    AddLinear(g, &m, p + "attn.c_proj", H, H, H);
    AddNorm(g, &m, p + "ln_2", H);
    AddLinear(g, &m, p + "mlp.c_fc", H, 4 * H, 4 * H);
    AddLinear(g, &m, p + "mlp.c_proj", 4 * H, H, H);
  }
  AddNorm(g, &m, "ln_f", H);
  return m;
}

HfTestModel TinyBert(const HfTestOptions& o, const std::string& bert_act) {
  Generator g(o.seed, o.dtype);
  HfTestModel m;
  m.dtype = o.dtype;
  const int64_t H = o.hidden, F = 4 * o.hidden;
  m.config = {{"architectures", {"BertForPreTraining"}},
              {"model_type", "bert"},
              {"hidden_act", bert_act},
              {"num_hidden_layers", o.layers},
              {"hidden_size", H},
              {"num_attention_heads", o.heads},
              {"intermediate_size", F},
              {"max_position_embeddings", o.positions},
              {"type_vocab_size", 2},
              {"vocab_size", o.vocab},
              {"layer_norm_eps", 1e-12},
              {"hidden_dropout_prob", 0.1},
              {"attention_probs_dropout_prob", 0.1},
              {"initializer_range", 0.02},
              {"position_embedding_type", "absolute"},
              {"pad_token_id", 0},
              {"gradient_checkpointing", false},
              {"use_cache", true}};
  m.tensors["embeddings.word_embeddings.weight"] = g.Normal({o.vocab, H}, 0, 0.5);
  m.tensors["embeddings.position_embeddings.weight"] = g.Normal({o.positions, H}, 0, 0.5);
  m.tensors["embeddings.token_type_embeddings.weight"] = g.Normal({2, H}, 0, 0.5);
  AddNorm(g, &m, "embeddings.LayerNorm", H);
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = absl::StrCat("encoder.layer.", l, ".");
    for (const char* qkv : {"query", "key", "value"}) {
      AddLinear(g, &m, absl::StrCat(p, "attention.self.", qkv), H, H, H);
    }
    AddLinear(g, &m, p + "attention.output.dense", H, H, H);
    AddNorm(g, &m, p + "attention.output.LayerNorm", H);
    AddLinear(g, &m, p + "intermediate.dense", F, H, F);
    AddLinear(g, &m, p + "output.dense", H, F, H);
    AddNorm(g, &m, p + "output.LayerNorm", H);
  }
  AddLinear(g, &m, "pooler.dense", H, H, H);
  AddLinear(g, &m, "cls.predictions.transform.dense", H, H, H);
  AddNorm(g, &m, "cls.predictions.transform.LayerNorm", H);
  m.tensors["cls.predictions.bias"] = g.Normal({o.vocab}, 0, 0.1);
  AddLinear(g, &m, "cls.seq_relationship", 2, H, 2);
  return m;
}

HfTestModel TinyLlama(const HfTestOptions& o, const std::string& model_type) {
  Generator g(o.seed, o.dtype);
  HfTestModel m;
  m.dtype = o.dtype;
  const int64_t H = o.hidden, F = o.intermediate, D = o.hidden / o.heads;
  const int64_t G = o.kv_heads > 0 ? o.kv_heads : o.heads;
  const bool mistral = model_type == "mistral", mixtral = model_type == "mixtral";
  m.config = {{"architectures",
               {mixtral   ? "MixtralForCausalLM"
                : mistral ? "MistralForCausalLM"
                          : "LlamaForCausalLM"}},
              {"model_type", model_type},
              {"hidden_act", "silu"},
              {"num_hidden_layers", o.layers},
              {"hidden_size", H},
              {"num_attention_heads", o.heads},
              {"num_key_value_heads", G},
              {"intermediate_size", F},
              {"max_position_embeddings", o.positions},
              {"vocab_size", o.vocab},
              {"rms_norm_eps", 1e-6},
              {"rope_theta", o.rope_theta},
              {"rope_scaling", nullptr},
              {"attention_bias", false},
              {"attention_dropout", 0.0},
              {"initializer_range", 0.02},
              {"tie_word_embeddings", o.tie},
              {"bos_token_id", 1},
              {"eos_token_id", 2},
              {"pretraining_tp", 1},
              {"use_cache", true},
              {"torch_dtype", "bfloat16"},
              {"transformers_version", "4.40.0"}};
  if (mistral || mixtral) m.config["sliding_window"] = nullptr;
  if (mixtral) {
    m.config["num_local_experts"] = o.experts;
    m.config["num_experts_per_tok"] = o.topk;
    m.config["router_aux_loss_coef"] = 0.02;
    m.config["output_router_logits"] = true;
    m.config["router_jitter_noise"] = 0.0;
  }
  m.tensors["embed_tokens.weight"] = g.Normal({o.vocab, H}, 0, 0.5);
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = absl::StrCat("layers.", l, ".");
    m.tensors[p + "input_layernorm.weight"] = g.Normal({H}, 1, 0.1);
    m.tensors[p + "self_attn.q_proj.weight"] = g.Normal({o.heads * D, H}, 0, 0.3);
    m.tensors[p + "self_attn.k_proj.weight"] = g.Normal({G * D, H}, 0, 0.3);
    m.tensors[p + "self_attn.v_proj.weight"] = g.Normal({G * D, H}, 0, 0.3);
    m.tensors[p + "self_attn.o_proj.weight"] = g.Normal({H, o.heads * D}, 0, 0.3);
    m.tensors[p + "post_attention_layernorm.weight"] = g.Normal({H}, 1, 0.1);
    if (mixtral) {
      m.tensors[p + "block_sparse_moe.gate.weight"] = g.Normal({o.experts, H}, 0, 0.5);
      for (int e = 0; e < o.experts; ++e) {
        const std::string x = absl::StrCat(p, "block_sparse_moe.experts.", e, ".");
        m.tensors[x + "w1.weight"] = g.Normal({F, H}, 0, 0.3);
        m.tensors[x + "w3.weight"] = g.Normal({F, H}, 0, 0.3);
        m.tensors[x + "w2.weight"] = g.Normal({H, F}, 0, 0.3);
      }
      continue;
    }
    m.tensors[p + "mlp.gate_proj.weight"] = g.Normal({F, H}, 0, 0.3);
    m.tensors[p + "mlp.up_proj.weight"] = g.Normal({F, H}, 0, 0.3);
    m.tensors[p + "mlp.down_proj.weight"] = g.Normal({H, F}, 0, 0.3);
  }
  m.tensors["norm.weight"] = g.Normal({H}, 1, 0.1);
  if (!o.tie) m.tensors["lm_head.weight"] = g.Normal({o.vocab, H}, 0, 0.5);
  return m;
}

absl::Status WriteHfModel(const HfTestModel& m, const std::string& dir, const HfWriteOptions& o) {
  RETURN_IF_ERROR(DefaultFileSystem().CreateDirectories(dir));
  RETURN_IF_ERROR(
      WriteFile(DefaultFileSystem(), dir + "/config.json", m.config.dump(2), Sync::kNone));
  const bool gpt = m.config["model_type"] == "gpt2";
  std::map<std::string, HfTestTensor> all = m.tensors;
  for (auto& [name, t] : Extras(m, o)) all[name] = t;
  std::vector<std::vector<NamedTensor>> shards(o.shards);
  std::vector<Tensor> owned;
  owned.reserve(all.size());
  Json weight_map = Json::object();
  int i = 0;
  for (const auto& [name, t] : all) {
    bool omitted = false;
    for (const std::string& x : o.omit) omitted |= x == name;
    if (omitted) continue;
    const bool buffer = absl::EndsWith(name, ".attn.bias") || absl::EndsWith(name, "masked_bias") ||
                        absl::EndsWith(name, "inv_freq");
    owned.push_back(ToTensor(t, buffer ? DType::kF32 : m.dtype));
    const std::string stored = StoredName(name, gpt, o);
    const int shard = i++ % o.shards;
    shards[shard].push_back({stored, owned.back().view()});
    weight_map[stored] = absl::StrCat("model-", shard + 1, "-of-", o.shards, ".safetensors");
  }
  if (o.shards == 1) return WriteSafetensors(dir + "/model.safetensors", shards[0]);
  for (int s = 0; s < o.shards; ++s) {
    RETURN_IF_ERROR(WriteSafetensors(
        absl::StrCat(dir, "/model-", s + 1, "-of-", o.shards, ".safetensors"), shards[s]));
  }
  const Json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  return WriteFile(DefaultFileSystem(), dir + "/model.safetensors.index.json", index.dump(2),
                   Sync::kNone);
}

}  // namespace testing
}  // namespace checkpoint
}  // namespace mt
