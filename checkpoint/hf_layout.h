// How the tensors of Hugging Face's GPT-2 (GPT2LMHeadModel), BERT (BertForPreTraining) and
// Llama / Mistral (LlamaForCausalLM, MistralForCausalLM) map to the parameters of models/gpt2,
// models/bert and the modern decoder (models/variants/modern_decoder), and Mixtral's
// (MixtralForCausalLM: block_sparse_moe.gate the router, experts.<e>.w1 / w3 / w2 the gate, up and
// down projections) to the mixture of experts (models/variants/moe), one parameter at a time, in
// both directions. Llama's rotary embeddings pair element i with i + D/2 of each head
// (rotate_half), as ours do (core/ops/rope.h), so q_proj and k_proj rows need no permutation
// beyond the fused QKV's column order.
//
// Our linear weights are [in, out] (y = x W + b, nn/linear.h); the attention's fused QKV
// projection orders its 3H output columns (head, q|k|v, d). GPT-2's Conv1D weights are [in, out]
// too, its fused c_attn ordered (q|k|v, head, d); BERT's torch Linear weights are [out, in] with
// separate query/key/value. Word embeddings (and BERT's MLM output bias) hold the real
// vocabulary's rows in Hugging Face's files and our padded vocabulary's here (padding rows zero).
//
// Names are Hugging Face's canonical ones: without the "transformer." / "bert." / "model." prefix,
// with LayerNorm parameters called weight/bias (CanonicalHfNames maps what a file stores to them).
#ifndef MT_CHECKPOINT_HF_LAYOUT_H_
#define MT_CHECKPOINT_HF_LAYOUT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "models/config.h"

namespace mt {
namespace checkpoint {

enum class HfLayout {
  kCopy,         // Same shape and element order.
  kTranspose,    // Hugging Face [out, in] (torch Linear) <-> ours [in, out].
  kVocabRows,    // Hugging Face [V, ...] <-> ours [V_padded, ...] (padding rows zero).
  kQkvColumns,   // One [H, 3H] or [3H], columns (q|k|v, head, d) <-> ours (head, q|k|v, d).
  kQkvSeparate,  // Three torch Linear [NH D, H], [G D, H], [G D, H] (q, k, v; or biases
                 // [NH D], [G D], [G D]) <-> ours [H, (NH + 2G) D] / [(NH + 2G) D], ordered
                 // (group, {its NH / G queries, key, value}, d); G = NH without GQA.
};

// One parameter of ours and the Hugging Face tensor(s) it comes from.
struct HfTensorMap {
  std::string ours;
  std::vector<std::string> hf;  // Canonical names; three (query, key, value) for kQkvSeparate.
  HfLayout layout = HfLayout::kCopy;
  // May be absent from a file being imported (BERT's MLM and NSP heads, which a bare BertModel
  // checkpoint lacks): the parameter keeps its initial value.
  bool optional = false;
};

// Every parameter of the family's standard model (pretraining heads) with `config`, in the
// model's declaration order. Our BERT's sentence-order head (sop_head) holds Hugging Face's
// next-sentence head (cls.seq_relationship): the same Linear(H -> 2) on the pooled output.
std::vector<HfTensorMap> HfTensorMaps(const models::ModelConfig& config);

// Tensors that a Hugging Face file may hold besides those of HfTensorMaps and that are not
// parameters of the model: GPT-2's causal-mask buffers h.<i>.attn.bias / attn.masked_bias and
// BERT's embeddings.position_ids and older Llama files' layers.<i>.self_attn.rotary_emb.inv_freq
// (ignored), and the tied output layers (lm_head.weight, of a tied Llama too,
// cls.predictions.decoder.weight / .bias), which must equal the tensor named here.
struct HfExtraTensors {
  std::vector<std::string> ignored;
  std::vector<std::pair<std::string, std::string>> tied;  // (extra, the tensor it must equal)
};
HfExtraTensors HfExtras(const models::ModelConfig& config);

// Canonical name -> stored name for the tensors of a file: the "transformer." (GPT-2), "bert."
// (BERT; not in front of "cls.") or "model." (Llama; not in front of "lm_head.") prefix removed,
// legacy LayerNorm.gamma / .beta renamed weight / bias. InvalidArgument naming both when two stored
// names map to one canonical name.
absl::StatusOr<std::map<std::string, std::string>> CanonicalHfNames(
    const models::ModelConfig& config, const std::vector<std::string>& stored);

// The Hugging Face shape of hf tensor `index` of `map` for our parameter's global shape `ours`
// (config: the model's; its vocab_size is the real vocabulary).
Shape HfShape(const HfTensorMap& map, const Shape& ours, const models::ModelConfig& config,
              size_t index = 0);

// Fills our f32 parameter `ours` (contiguous host, its global shape) from the map's Hugging Face
// tensors `hf` (f32 host, shapes HfShape).
void HfToOurs(const HfTensorMap& map, const std::vector<Tensor>& hf,
              const models::ModelConfig& config, const TensorView& ours);
// The inverse: the map's Hugging Face tensors (f32 host) from our parameter (the padding rows
// of kVocabRows are dropped).
std::vector<Tensor> OursToHf(const HfTensorMap& map, const TensorView& ours,
                             const models::ModelConfig& config);

}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_HF_LAYOUT_H_
