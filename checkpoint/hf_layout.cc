#include "checkpoint/hf_layout.h"

#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/hf_config.h"
#include "glog/logging.h"

namespace mt {
namespace checkpoint {
namespace {

using models::Family;

void Add(std::vector<HfTensorMap>* maps, std::string ours, std::string hf,
         HfLayout layout = HfLayout::kCopy, bool optional = false) {
  maps->push_back({std::move(ours), {std::move(hf)}, layout, optional});
}

// "<ours>.weight" / ".bias" from "<hf>.weight" / ".bias" (weight_layout: the weight's).
void AddLinear(std::vector<HfTensorMap>* maps, const std::string& ours, const std::string& hf,
               HfLayout weight_layout, bool optional = false) {
  Add(maps, ours + ".weight", hf + ".weight", weight_layout, optional);
  Add(maps, ours + ".bias", hf + ".bias", HfLayout::kCopy, optional);
}

void AddNorm(std::vector<HfTensorMap>* maps, const std::string& ours, const std::string& hf,
             bool optional = false) {
  AddLinear(maps, ours, hf, HfLayout::kCopy, optional);
}

void Gpt2Maps(const models::ModelConfig& c, std::vector<HfTensorMap>* maps) {
  Add(maps, "embedding.word.weight", "wte.weight", HfLayout::kVocabRows);
  Add(maps, "embedding.position.weight", "wpe.weight");
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string ours = absl::StrCat("layers.", i), hf = absl::StrCat("h.", i);
    AddNorm(maps, ours + ".ln1", hf + ".ln_1");
    AddLinear(maps, ours + ".attention.qkv", hf + ".attn.c_attn", HfLayout::kQkvColumns);
    maps->back().layout = HfLayout::kQkvColumns;  // The fused bias too.
    AddLinear(maps, ours + ".attention.proj", hf + ".attn.c_proj", HfLayout::kCopy);
    AddNorm(maps, ours + ".ln2", hf + ".ln_2");
    AddLinear(maps, ours + ".mlp.fc1", hf + ".mlp.c_fc", HfLayout::kCopy);
    AddLinear(maps, ours + ".mlp.fc2", hf + ".mlp.c_proj", HfLayout::kCopy);
  }
  AddNorm(maps, "final_layernorm", "ln_f");
}

// Llama / Mistral (models/variants/modern_decoder): torch Linear weights without biases,
// separate q/k/v projections of NH, G and G heads, RMSNorm gains only.
void LlamaMaps(const models::ModelConfig& c, std::vector<HfTensorMap>* maps) {
  Add(maps, "embedding.word.weight", "embed_tokens.weight", HfLayout::kVocabRows);
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string ours = absl::StrCat("layers.", i), hf = absl::StrCat("layers.", i);
    Add(maps, ours + ".ln1.weight", hf + ".input_layernorm.weight");
    const std::string attn = hf + ".self_attn.";
    maps->push_back({ours + ".attention.qkv.weight",
                     {attn + "q_proj.weight", attn + "k_proj.weight", attn + "v_proj.weight"},
                     HfLayout::kQkvSeparate});
    Add(maps, ours + ".attention.proj.weight", attn + "o_proj.weight", HfLayout::kTranspose);
    Add(maps, ours + ".ln2.weight", hf + ".post_attention_layernorm.weight");
    if (c.num_experts > 0) {  // Mixtral: w1 the gate, w3 the up, w2 the down projection.
      const std::string moe = hf + ".block_sparse_moe.";
      Add(maps, ours + ".mlp.router.weight", moe + "gate.weight", HfLayout::kTranspose);
      for (int e = 0; e < c.num_experts; ++e) {
        for (auto [part, w] :
             {std::pair<const char*, const char*>{"gate", "w1"}, {"up", "w3"}, {"down", "w2"}}) {
          Add(maps, absl::StrCat(ours, ".mlp.experts.", e, ".", part, ".weight"),
              absl::StrCat(moe, "experts.", e, ".", w, ".weight"), HfLayout::kTranspose);
        }
      }
      continue;
    }
    for (const char* part : {"gate", "up", "down"}) {
      Add(maps, absl::StrCat(ours, ".mlp.", part, ".weight"),
          absl::StrCat(hf, ".mlp.", part, "_proj.weight"), HfLayout::kTranspose);
    }
  }
  Add(maps, "final_norm.weight", "norm.weight");
  if (c.untie_embeddings_and_output_weights) {
    Add(maps, "output_layer.weight", "lm_head.weight", HfLayout::kVocabRows);
  }
}

bool IsLlama(const models::ModelConfig& c) {
  return c.ArchitectureName() == kLlamaArchitecture || c.ArchitectureName() == kMixtralArchitecture;
}

void BertMaps(const models::ModelConfig& c, std::vector<HfTensorMap>* maps) {
  Add(maps, "embedding.word.weight", "embeddings.word_embeddings.weight", HfLayout::kVocabRows);
  Add(maps, "embedding.position.weight", "embeddings.position_embeddings.weight");
  Add(maps, "embedding.token_type.weight", "embeddings.token_type_embeddings.weight");
  AddNorm(maps, "embedding.layernorm", "embeddings.LayerNorm");
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string ours = absl::StrCat("layers.", i);
    const std::string hf = absl::StrCat("encoder.layer.", i);
    const std::string self = hf + ".attention.self.";
    for (const char* part : {"weight", "bias"}) {
      maps->push_back({absl::StrCat(ours, ".attention.qkv.", part),
                       {absl::StrCat(self, "query.", part), absl::StrCat(self, "key.", part),
                        absl::StrCat(self, "value.", part)},
                       HfLayout::kQkvSeparate});
    }
    // Post-norm: ln1 follows the attention, ln2 the MLP.
    AddNorm(maps, ours + ".ln1", hf + ".attention.output.LayerNorm");
    AddLinear(maps, ours + ".attention.proj", hf + ".attention.output.dense", HfLayout::kTranspose);
    AddNorm(maps, ours + ".ln2", hf + ".output.LayerNorm");
    AddLinear(maps, ours + ".mlp.fc1", hf + ".intermediate.dense", HfLayout::kTranspose);
    AddLinear(maps, ours + ".mlp.fc2", hf + ".output.dense", HfLayout::kTranspose);
  }
  AddLinear(maps, "pooler.dense", "pooler.dense", HfLayout::kTranspose);
  AddLinear(maps, "lm_head.dense", "cls.predictions.transform.dense", HfLayout::kTranspose,
            /*optional=*/true);
  AddNorm(maps, "lm_head.layernorm", "cls.predictions.transform.LayerNorm", /*optional=*/true);
  Add(maps, "lm_head.bias", "cls.predictions.bias", HfLayout::kVocabRows, /*optional=*/true);
  AddLinear(maps, "sop_head", "cls.seq_relationship", HfLayout::kTranspose, /*optional=*/true);
}

// Column c = (head, s, d) of our fused QKV as (s, column within Hugging Face's s-th block).
struct QkvColumn {
  int64_t s, col;
};
QkvColumn HfQkvColumn(int64_t c, int64_t heads, int64_t head_dim) {
  const int64_t d = c % head_dim, s = (c / head_dim) % 3, h = c / (3 * head_dim);
  return {s, h * head_dim + d};
}

// Copies between our fused QKV [rows, 3H] and GPT-2's block-ordered [rows, 3H] (rows == 1 for
// the bias).
void PermuteQkvColumns(float* ours, float* hf, int64_t rows, int64_t hidden, int64_t heads,
                       bool to_ours) {
  const int64_t head_dim = hidden / heads;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < 3 * hidden; ++c) {
      const QkvColumn q = HfQkvColumn(c, heads, head_dim);
      float* o = ours + r * 3 * hidden + c;
      float* h = hf + r * 3 * hidden + q.s * hidden + q.col;
      if (to_ours) {
        *o = *h;
      } else {
        *h = *o;
      }
    }
  }
}

// Column c of our fused QKV, ordered (group, {its R = NH / G queries, key, value}, d), as
// (part: 0 q, 1 k, 2 v; row of that part's torch Linear: head * D + d).
QkvColumn GroupedQkvColumn(int64_t c, int64_t heads, int64_t groups, int64_t head_dim) {
  const int64_t R = heads / groups, block = (R + 2) * head_dim;
  const int64_t g = c / block, s = (c % block) / head_dim, d = c % head_dim;
  if (s < R) return {0, (g * R + s) * head_dim + d};
  return {s - R + 1, g * head_dim + d};
}

// Copies between our fused QKV [in, W] (or a bias [W], in == 1) and Hugging Face's three torch
// Linear weights [rows_s, in] (or biases [rows_s]), W = (NH + 2G) D.
void PermuteQkvSeparate(float* ours, const std::vector<float*>& hf, int64_t in, int64_t width,
                        int64_t heads, int64_t groups, bool to_ours) {
  const int64_t head_dim = width / (heads + 2 * groups);
  for (int64_t c = 0; c < width; ++c) {
    const QkvColumn q = GroupedQkvColumn(c, heads, groups, head_dim);
    for (int64_t i = 0; i < in; ++i) {
      float* o = ours + i * width + c;
      float* h = hf[q.s] + q.col * in + i;
      if (to_ours) {
        *o = *h;
      } else {
        *h = *o;
      }
    }
  }
}

void Transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  }
}

}  // namespace

std::vector<HfTensorMap> HfTensorMaps(const models::ModelConfig& config) {
  std::vector<HfTensorMap> maps;
  if (IsLlama(config)) {
    LlamaMaps(config, &maps);
  } else if (config.family == Family::kGpt2) {
    Gpt2Maps(config, &maps);
  } else {
    BertMaps(config, &maps);
  }
  return maps;
}

HfExtraTensors HfExtras(const models::ModelConfig& config) {
  HfExtraTensors extras;
  if (IsLlama(config)) {
    for (int i = 0; i < config.num_layers; ++i) {
      extras.ignored.push_back(absl::StrCat("layers.", i, ".self_attn.rotary_emb.inv_freq"));
    }
    if (!config.untie_embeddings_and_output_weights) {
      extras.tied.push_back({"lm_head.weight", "embed_tokens.weight"});
    }
  } else if (config.family == Family::kGpt2) {
    for (int i = 0; i < config.num_layers; ++i) {
      extras.ignored.push_back(absl::StrCat("h.", i, ".attn.bias"));
      extras.ignored.push_back(absl::StrCat("h.", i, ".attn.masked_bias"));
    }
    extras.tied.push_back({"lm_head.weight", "wte.weight"});
  } else {
    extras.ignored.push_back("embeddings.position_ids");
    extras.tied.push_back({"cls.predictions.decoder.weight", "embeddings.word_embeddings.weight"});
    extras.tied.push_back({"cls.predictions.decoder.bias", "cls.predictions.bias"});
  }
  return extras;
}

absl::StatusOr<std::map<std::string, std::string>> CanonicalHfNames(
    const models::ModelConfig& config, const std::vector<std::string>& stored) {
  std::map<std::string, std::string> out;
  for (const std::string& name : stored) {
    std::string c = name;
    const std::string prefix = IsLlama(config)                  ? "model."
                               : config.family == Family::kGpt2 ? "transformer."
                                                                : "bert.";
    if (absl::StartsWith(c, prefix)) c = c.substr(prefix.size());
    for (auto [legacy, now] :
         {std::pair<const char*, const char*>{"LayerNorm.gamma", "LayerNorm.weight"},
          {"LayerNorm.beta", "LayerNorm.bias"}}) {
      if (absl::EndsWith(c, legacy)) c = c.substr(0, c.size() - std::strlen(legacy)) + now;
    }
    auto [it, inserted] = out.emplace(c, name);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensors '", it->second, "' and '", name, "' are both '", c, "'; keep one"));
    }
  }
  return out;
}

Shape HfShape(const HfTensorMap& map, const Shape& ours, const models::ModelConfig& config,
              size_t index) {
  switch (map.layout) {
    case HfLayout::kCopy:
    case HfLayout::kQkvColumns:
      return ours;
    case HfLayout::kTranspose:
      if (ours.size() == 2) return {ours[1], ours[0]};
      return ours;
    case HfLayout::kVocabRows: {
      Shape s = ours;
      s[0] = config.vocab_size;
      return s;
    }
    case HfLayout::kQkvSeparate: {
      const int64_t heads = config.num_attention_heads, groups = config.query_groups();
      const int64_t D = config.hidden_size / heads, rows = (index == 0 ? heads : groups) * D;
      if (ours.size() == 2) return {rows, ours[0]};
      return {rows};
    }
  }
  LOG(FATAL) << "unknown layout";
}

void HfToOurs(const HfTensorMap& map, const std::vector<Tensor>& hf,
              const models::ModelConfig& config, const TensorView& ours) {
  float* o = ours.data_as<float>();
  const float* h = hf[0].data_as<float>();
  const int64_t rows = ours.shape.size() == 2 ? ours.shape[0] : 1;
  switch (map.layout) {
    case HfLayout::kCopy:
      std::memcpy(o, h, ours.nbytes());
      return;
    case HfLayout::kTranspose:
      if (ours.shape.size() == 2) {
        Transpose(h, ours.shape[1], ours.shape[0], o);
      } else {
        std::memcpy(o, h, ours.nbytes());
      }
      return;
    case HfLayout::kVocabRows:
      std::memset(o, 0, ours.nbytes());
      std::memcpy(o, h, hf[0].nbytes());
      return;
    case HfLayout::kQkvColumns:
      PermuteQkvColumns(o, const_cast<float*>(h), rows, ours.shape.back() / 3,
                        config.num_attention_heads, /*to_ours=*/true);
      return;
    case HfLayout::kQkvSeparate: {
      std::vector<float*> parts;
      for (const Tensor& t : hf) parts.push_back(t.data_as<float>());
      PermuteQkvSeparate(o, parts, rows, ours.shape.back(), config.num_attention_heads,
                         config.query_groups(), /*to_ours=*/true);
      return;
    }
  }
}

std::vector<Tensor> OursToHf(const HfTensorMap& map, const TensorView& ours,
                             const models::ModelConfig& config) {
  std::vector<Tensor> hf;
  for (size_t i = 0; i < map.hf.size(); ++i) {
    hf.push_back(Tensor::Host(HfShape(map, ours.shape, config, i), DType::kF32));
  }
  float* o = ours.data_as<float>();
  float* h = hf[0].data_as<float>();
  const int64_t rows = ours.shape.size() == 2 ? ours.shape[0] : 1;
  switch (map.layout) {
    case HfLayout::kCopy:
    case HfLayout::kVocabRows:  // The first vocab_size rows.
      std::memcpy(h, o, hf[0].nbytes());
      break;
    case HfLayout::kTranspose:
      if (ours.shape.size() == 2) {
        Transpose(o, ours.shape[0], ours.shape[1], h);
      } else {
        std::memcpy(h, o, hf[0].nbytes());
      }
      break;
    case HfLayout::kQkvColumns:
      PermuteQkvColumns(o, h, rows, ours.shape.back() / 3, config.num_attention_heads,
                        /*to_ours=*/false);
      break;
    case HfLayout::kQkvSeparate: {
      std::vector<float*> parts;
      for (const Tensor& t : hf) parts.push_back(t.data_as<float>());
      PermuteQkvSeparate(o, parts, rows, ours.shape.back(), config.num_attention_heads,
                         config.query_groups(), /*to_ours=*/false);
      break;
    }
  }
  return hf;
}

}  // namespace checkpoint
}  // namespace mt
