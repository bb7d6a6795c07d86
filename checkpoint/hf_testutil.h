// Test fixtures for the Hugging Face converter (hf_checkpoint.h): tiny GPT-2 and BERT models in
// Hugging Face's exact layout (names, shapes, dtypes, config.json) with random weights, written
// as a model directory, and an independent float64 implementation of Hugging Face's forward math
// (GPT2LMHeadModel, BertForPreTraining) over those tensors. Nothing here uses the converter or
// the models. testonly.
#ifndef MT_CHECKPOINT_HF_TESTUTIL_H_
#define MT_CHECKPOINT_HF_TESTUTIL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace checkpoint {
namespace testing {

// One tensor: its Hugging Face shape and values (exactly representable in the file's dtype).
struct HfTestTensor {
  Shape shape;
  std::vector<double> values;
};

// A model as Hugging Face stores it: canonical tensor names (no prefix, LayerNorm weight/bias),
// its config.json, and the file dtype.
struct HfTestModel {
  nlohmann::json config;
  std::map<std::string, HfTestTensor> tensors;
  DType dtype = DType::kF32;
};

struct HfTestOptions {
  DType dtype = DType::kF32;  // f32, bf16 or f16.
  uint64_t seed = 1;
  int layers = 2;
  int heads = 4;
  int64_t hidden = 16;
  int64_t vocab = 37;
  int64_t positions = 8;
  // Llama / Mistral only.
  int kv_heads = 0;           // num_key_value_heads (0: heads).
  bool tie = false;           // tie_word_embeddings.
  double rope_theta = 10000;  // rope_theta.
  int64_t intermediate = 24;  // intermediate_size.
  int experts = 4;            // Mixtral: num_local_experts,
  int topk = 2;               // and num_experts_per_tok.
};

// GPT-2 (GPT2LMHeadModel; activation gelu_new, layer_norm_epsilon 1e-5) and BERT
// (BertForPreTraining, hidden_act `bert_act`, layer_norm_eps 1e-12, 2 token types, MLM and NSP
// heads) with random weights: matrices N(0, 0.3^2), biases N(0, 0.1^2), LayerNorm gains
// 1 + N(0, 0.1^2), embeddings N(0, 0.5^2).
HfTestModel TinyGpt2(const HfTestOptions& options);
HfTestModel TinyBert(const HfTestOptions& options, const std::string& bert_act = "gelu");
// Llama (LlamaForCausalLM; model_type "mistral": MistralForCausalLM with sliding_window null;
// "mixtral": MixtralForCausalLM, block_sparse_moe with options.experts experts, top-k):
// rms_norm_eps 1e-6, silu, no biases, lm_head.weight unless options.tie; RMSNorm gains
// 1 + N(0, 0.1^2), the rest as above.
HfTestModel TinyLlama(const HfTestOptions& options, const std::string& model_type = "llama");

// How WriteHfModel lays the files out.
struct HfWriteOptions {
  std::string prefix;  // "transformer." / "bert." / "model." before the base model's names.
  bool legacy_norm_names = false;  // LayerNorm.gamma / .beta.
  bool buffers = true;  // GPT-2's attn.bias / masked_bias, BERT's position_ids, Llama's inv_freq.
  bool tied_copies = false;  // lm_head.weight / cls.predictions.decoder.* as well (tied models).
  int shards = 1;            // > 1: model.safetensors.index.json and that many shards.
  std::vector<std::string> omit;  // Canonical names to leave out.
};

// Writes config.json and the weights into dir (created).
absl::Status WriteHfModel(const HfTestModel& model, const std::string& dir,
                          const HfWriteOptions& options = {});

// Hugging Face's forward math in float64. ids / token_types: [B, T]; mask: [B, T] (1 = attend).
// GPT-2: logits [B * T, vocab]. BERT: MLM logits [B * T, vocab] and NSP logits [B, 2].
std::vector<double> Gpt2Logits(const HfTestModel& model, const std::vector<int>& ids, int B, int T);
struct BertOutputs {
  std::vector<double> mlm_logits;
  std::vector<double> nsp_logits;
};
// Llama / Mistral: logits [B * T, vocab] (rotate_half rotary embeddings with rope_theta,
// repeat_kv for grouped-query attention, RMSNorm, SwiGLU, lm_head or the tied embedding;
// Mixtral: softmax over the experts, the top k, their weights renormalised to sum to 1).
std::vector<double> LlamaLogits(const HfTestModel& model, const std::vector<int>& ids, int B,
                                int T);
BertOutputs BertForward(const HfTestModel& model, const std::vector<int>& ids,
                        const std::vector<int>& token_types, const std::vector<int>& mask, int B,
                        int T);

}  // namespace testing
}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_HF_TESTUTIL_H_
