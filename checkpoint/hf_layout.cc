#include "checkpoint/hf_layout.h"

#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

// Copies between our fused QKV [rows, 3H] and Hugging Face's: one [rows, 3H] block-ordered
// tensor (separate: false) or three [H, rows] transposed ones (separate: true; rows == 1 for a
// bias, stored [H]).
void PermuteQkv(float* ours, const std::vector<float*>& hf, int64_t rows, int64_t hidden,
                int64_t heads, bool separate, bool to_ours) {
  const int64_t head_dim = hidden / heads;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < 3 * hidden; ++c) {
      const QkvColumn q = HfQkvColumn(c, heads, head_dim);
      float* o = ours + r * 3 * hidden + c;
      float* h =
          separate ? hf[q.s] + q.col * rows + r : hf[0] + r * 3 * hidden + q.s * hidden + q.col;
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
  if (config.family == Family::kGpt2) {
    Gpt2Maps(config, &maps);
  } else {
    BertMaps(config, &maps);
  }
  return maps;
}

HfExtraTensors HfExtras(const models::ModelConfig& config) {
  HfExtraTensors extras;
  if (config.family == Family::kGpt2) {
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
    models::Family family, const std::vector<std::string>& stored) {
  std::map<std::string, std::string> out;
  for (const std::string& name : stored) {
    std::string c = name;
    const std::string prefix = family == Family::kGpt2 ? "transformer." : "bert.";
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

Shape HfShape(const HfTensorMap& map, const Shape& ours, int64_t vocab_size) {
  switch (map.layout) {
    case HfLayout::kCopy:
    case HfLayout::kQkvColumns:
      return ours;
    case HfLayout::kTranspose:
      if (ours.size() == 2) return {ours[1], ours[0]};
      return ours;
    case HfLayout::kVocabRows: {
      Shape s = ours;
      s[0] = vocab_size;
      return s;
    }
    case HfLayout::kQkvSeparate:
      if (ours.size() == 2) return {ours[0], ours[0]};
      return {ours[0] / 3};
  }
  LOG(FATAL) << "unknown layout";
}

void HfToOurs(const HfTensorMap& map, const std::vector<Tensor>& hf, int64_t heads,
              const TensorView& ours) {
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
    case HfLayout::kQkvSeparate: {
      std::vector<float*> parts;
      for (const Tensor& t : hf) parts.push_back(t.data_as<float>());
      PermuteQkv(o, parts, rows, ours.shape.back() / 3, heads, map.layout == HfLayout::kQkvSeparate,
                 /*to_ours=*/true);
      return;
    }
  }
}

std::vector<Tensor> OursToHf(const HfTensorMap& map, const TensorView& ours, int64_t heads,
                             int64_t vocab_size) {
  const Shape shape = HfShape(map, ours.shape, vocab_size);
  std::vector<Tensor> hf;
  for (size_t i = 0; i < map.hf.size(); ++i) hf.push_back(Tensor::Host(shape, DType::kF32));
  const float* o = ours.data_as<float>();
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
    case HfLayout::kQkvSeparate: {
      std::vector<float*> parts;
      for (const Tensor& t : hf) parts.push_back(t.data_as<float>());
      PermuteQkv(const_cast<float*>(o), parts, rows, ours.shape.back() / 3, heads,
                 map.layout == HfLayout::kQkvSeparate, /*to_ours=*/false);
      break;
    }
  }
  return hf;
}

}  // namespace checkpoint
}  // namespace mt
