// The Hugging Face `config.json` of GPT-2 (GPT2LMHeadModel), BERT (BertForPreTraining) and Llama /
// Mistral (LlamaForCausalLM, MistralForCausalLM) and the project's models::ModelConfig, in both
// directions (checkpoint/hf_checkpoint.h converts the tensors).
//
// GPT-2 keys read: n_layer, n_embd, n_head, n_positions, n_inner (null: 4 x n_embd),
// vocab_size, layer_norm_epsilon, activation_function (gelu_new / gelu_pytorch_tanh / gelu_fast:
// the tanh form; gelu: the erf form, ModelConfig::gelu), attn_pdrop, resid_pdrop,
// initializer_range, and the switches that change the forward math and must hold their published
// values: scale_attn_weights (true), scale_attn_by_inverse_layer_idx (false), add_cross_attention
// (false), tie_word_embeddings (true). BERT keys read: num_hidden_layers, hidden_size,
// num_attention_heads, intermediate_size, max_position_embeddings, type_vocab_size, vocab_size,
// layer_norm_eps, hidden_act (gelu: the erf form; gelu_new: tanh), hidden_dropout_prob,
// attention_probs_dropout_prob, initializer_range, and position_embedding_type (absolute),
// is_decoder (false), add_cross_attention (false), tie_word_embeddings (true). Keys that do not
// change the forward math (model_type, architectures, n_ctx, *_token_id, torch_dtype, summary_*,
// use_cache, ...) are accepted; any other key is an error naming it, never silently ignored.
// Llama / Mistral keys read: num_hidden_layers, hidden_size, num_attention_heads,
// num_key_value_heads (absent: the heads; fewer: grouped-query attention), intermediate_size,
// max_position_embeddings, vocab_size, rms_norm_eps, rope_theta (ModelConfig::rotary_base),
// attention_dropout, initializer_range, tie_word_embeddings (absent or false: an untied output
// layer), and, refused unless at these values: hidden_act (silu), attention_bias and mlp_bias
// (false), rope_scaling (null), head_dim (hidden_size / num_attention_heads), pretraining_tp (1),
// sliding_window (null, or at least max_position_embeddings: no window). Mixtral: Llama's keys
// and num_local_experts (num_experts), num_experts_per_tok (moe_router_topk),
// router_aux_loss_coef with output_router_logits (moe_aux_loss_coeff: coef * k when true, else
// 0; Hugging Face's loss is k times ours at the same coefficient), router_jitter_noise (0 only);
// dropless, no z-loss.
#ifndef MT_CHECKPOINT_HF_CONFIG_H_
#define MT_CHECKPOINT_HF_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "models/config.h"

namespace mt {
namespace checkpoint {

// The architecture (models/registry.h) Llama and Mistral checkpoints become: the modern decoder
// of models/variants/modern_decoder, which a program must link to build the model.
constexpr char kLlamaArchitecture[] = "modern-decoder";
// Mixtral's: the mixture of experts of models/variants/moe.
constexpr char kMixtralArchitecture[] = "moe";

// The model a Hugging Face config.json describes.
struct HfConfig {
  models::ModelConfig model;
  // "gpt2", "bert", "llama", "mistral" or "mixtral" (empty: the architecture's default on export).
  std::string model_type;
  // bos_token_id / eos_token_id / pad_token_id as given (-1: absent); written back on export.
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;
  int64_t pad_token_id = -1;
};

// Parses config.json text (`path` names it in messages). The model type comes from "model_type"
// ("gpt2", "bert", "llama", "mistral" or "mixtral"), else from the keys (n_embd: GPT-2;
// hidden_size: BERT). GPT-2 becomes a pre-norm models::Family::kGpt2 config, BERT a post-norm kBert
// one with the published structure, Llama and Mistral a kLlamaArchitecture one (no dropout);
// make_vocab_size_divisible_by keeps the project's default (128). Errors, one line "<path>: <key>:
// <what>": InvalidArgument for malformed JSON, a missing required key, a value of the wrong type or
// out of range, a config the model rejects (ModelConfig::Validate); Unimplemented for another model
// type, an activation other than the forms above, a switch off its published value, or an unknown
// key.
absl::StatusOr<HfConfig> ParseHfConfig(const std::string& path, const std::string& text);

// The config.json of `config` (GPT-2: GPT2LMHeadModel; BERT: BertForPreTraining; the modern
// decoder: LlamaForCausalLM, or MistralForCausalLM when config.model_type is "mistral"; the
// mixture of experts: MixtralForCausalLM), with
// torch_dtype `torch_dtype` ("float32", "bfloat16" or "float16"), pretty-printed.
// FailedPrecondition naming the field for a config Hugging Face's GPT-2 / BERT cannot express
// (another architecture, pre-norm BERT, post-norm GPT-2, no position embeddings, an untied GPT-2,
// BERT without 1 or more token types, a mixture of experts with a capacity or a z-loss).
absl::StatusOr<std::string> HfConfigJson(const HfConfig& config, const std::string& torch_dtype);

}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_HF_CONFIG_H_
