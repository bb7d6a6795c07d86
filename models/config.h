// Model configurations: one typed struct for the GPT-2 and BERT families, validated against a
// tensor-parallel degree.
#ifndef MT_MODELS_CONFIG_H_
#define MT_MODELS_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "nn/transformer.h"

namespace mt {
namespace models {

enum class Family { kGpt2, kBert };

struct ModelConfig {
  Family family = Family::kGpt2;
  int num_layers = 2;
  int64_t hidden_size = 64;
  int num_attention_heads = 4;
  int64_t ffn_hidden_size = 0;          // 0: 4 * hidden_size.
  int64_t vocab_size = 50257;           // Real vocabulary (GPT-2 BPE: 50,257; BERT: 30,522).
  int64_t make_vocab_size_divisible_by = 128;  // Padded to a multiple of this times TP.
  int64_t max_position_embeddings = 1024;
  bool position_embeddings = true;      // Learned absolute positions.
  int num_token_types = 0;              // BERT: 2.
  nn::NormPosition norm = nn::NormPosition::kPreNorm;
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
  float layernorm_eps = 1e-5f;
  double init_std = 0.02;               // N(0, 0.02); output projections / sqrt(2 * layers).

  int64_t ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  // InvalidArgument naming the problem: non-positive sizes, hidden not divisible by heads, ...
  absl::Status Validate() const;
  // Validate() plus the TP constraints: heads and ffn divisible by tp, tp >= 1.
  absl::Status ValidateParallel(int tp) const;
  int64_t PaddedVocab(int tp) const;
  // Multi-line "key: value" description.
  std::string DebugString() const;
  // Every field as a JSON object (stored in checkpoints and compared on load).
  std::string ToJson() const;
};

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_CONFIG_H_
