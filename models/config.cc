#include "models/config.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  if (family == Family::kBert && num_token_types < 1) {
    return absl::InvalidArgumentError("BERT needs num_token_types >= 1");
  }
  for (float p : {hidden_dropout, attention_dropout}) {
    if (!(p >= 0 && p < 1)) {
      return absl::InvalidArgumentError(absl::StrCat("dropout must be in [0, 1), got ", p));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelConfig::ValidateParallel(int tp) const {
  absl::Status s = Validate();
  if (!s.ok()) return s;
  if (tp < 1) return absl::InvalidArgumentError(absl::StrCat("tensor_model_parallel_size ", tp, " must be >= 1"));
  if (num_attention_heads % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_attention_heads ", num_attention_heads,
        " is not divisible by tensor_model_parallel_size ", tp,
        "; choose a tensor-parallel size that divides the number of heads"));
  }
  if (ffn() % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ffn_hidden_size ", ffn(),
                                                   " is not divisible by tensor_model_parallel_size ",
                                                   tp));
  }
  return absl::OkStatus();
}

int64_t ModelConfig::PaddedVocab(int tp) const {
  return nn::PaddedVocabSize(vocab_size, make_vocab_size_divisible_by, tp);
}

std::string ModelConfig::DebugString() const {
  return absl::StrFormat(
      "family: %s\nnum_layers: %d\nhidden_size: %d\nnum_attention_heads: %d\nffn_hidden_size: %d\n"
      "vocab_size: %d\nmake_vocab_size_divisible_by: %d\nmax_position_embeddings: %d\n"
      "position_embeddings: %s\nnum_token_types: %d\nnorm: %s\nhidden_dropout: %g\n"
      "attention_dropout: %g\nlayernorm_eps: %g\ninit_std: %g\n",
      family == Family::kGpt2 ? "gpt2" : "bert", num_layers, hidden_size, num_attention_heads,
      ffn(), vocab_size, make_vocab_size_divisible_by, max_position_embeddings,
      position_embeddings ? "true" : "false", num_token_types,
      norm == nn::NormPosition::kPreNorm ? "pre" : "post", hidden_dropout, attention_dropout,
      layernorm_eps, init_std);
}

std::string ModelConfig::ToJson() const {
  nlohmann::json j = {
      {"family", family == Family::kGpt2 ? "gpt2" : "bert"},
      {"num_layers", num_layers},
      {"hidden_size", hidden_size},
      {"num_attention_heads", num_attention_heads},
      {"ffn_hidden_size", ffn()},
      {"vocab_size", vocab_size},
      {"make_vocab_size_divisible_by", make_vocab_size_divisible_by},
      {"max_position_embeddings", max_position_embeddings},
      {"position_embeddings", position_embeddings},
      {"num_token_types", num_token_types},
      {"norm", norm == nn::NormPosition::kPreNorm ? "pre" : "post"},
      {"hidden_dropout", hidden_dropout},
      {"attention_dropout", attention_dropout},
      {"layernorm_eps", layernorm_eps},
      {"init_std", init_std},
  };
  return j.dump();
}

}  // namespace models
}  // namespace mt
