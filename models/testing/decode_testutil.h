// Test support for incremental decoding (IncrementalDecoder::StartDecoding / DecodeStep): a greedy
// continuation through the key/value cache checked, step by step, against recomputing the whole
// prefix; and TinyLm, a small language model over nn/ modules alone with any LayerSpec (rotary
// embeddings: what a GPT-family variant on nn::TransformerStack computes). testonly.
#ifndef MT_MODELS_TESTING_DECODE_TESTUTIL_H_
#define MT_MODELS_TESTING_DECODE_TESTUTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "models/model.h"
#include "nn/context.h"
#include "nn/embedding.h"
#include "nn/norm.h"
#include "nn/parameter.h"
#include "nn/transformer.h"

namespace mt {
namespace models {
namespace testing {

// The small GPT-2 of the decoding tests: 2 layers, hidden 32, 4 heads, a vocabulary of 203 padded
// to 208 (at TP 1 and 2: padding columns exist), `positions` positions, init std 0.2 (so that the
// logits are spread and greedy picks are rarely near ties).
ModelConfig SmallDecodingConfig(int64_t positions);
// TinyLm's layer in the tests: RMSNorm, rotary attention without biases, SwiGLU (hidden 32,
// 4 heads, ffn 48, init std 0.2).
nn::LayerSpec RotarySpec();
// The bound on |cached - recomputed| logits relative to a step's peak |logit|: the two paths run
// GEMMs of different shapes (n rows against B * T), whose f32 sums may be ordered differently (a
// few roundings per op through two layers; observed below 1e-6 in f32: the bound is 1e-5); in
// 16-bit compute such a difference can flip the rounding of an activation to its neighbour, so
// 16 u of the dtype. A wrong position, cache row or mask is off by O(1).
double DecodingBound(DType dtype);

// A language model seen through the calls the comparison needs (host tensors throughout).
struct DecodingLm {
  int64_t vocab = 0;         // Real vocabulary (the columns compared).
  int64_t padded_vocab = 0;  // Columns of the logits.
  // Logits of every position: tokens i32 [B, T] -> full f32 [B * T, padded_vocab].
  std::function<absl::Status(const TensorView& tokens, const TensorView& full)> logits;
  std::function<absl::Status(int64_t batch, int64_t max_length)> start;
  // tokens i32 [B, n] -> the last new position's logits f32 [B, padded_vocab].
  std::function<absl::Status(const TensorView& tokens, const TensorView& logits)> step;
};
// The calls of a models::Model with the step context `sc` (which must outlive the result): start
// and step through its IncrementalDecoder (Unimplemented, IncrementalDecoderOf's error, without).
DecodingLm ForModel(Model* model, const nn::StepContext* sc);

struct GreedyResult {
  std::vector<std::vector<int32_t>> tokens;  // Per sequence: prompt + generated.
  int near_ties = 0;       // Steps where the argmaxes differed within the bound (see below).
  double worst_error = 0;  // Largest |cached - recomputed| logit, relative to the peak.
};

// Greedily continues `prompts` (B rows of P >= 1 tokens) by `steps` tokens through the cache
// (StartDecoding(B, P + steps), the prompts in one step, then one token per step), and at every
// step also recomputes the logits of the whole prefix. EXPECTs, for every sequence and step, that
// the cached logits of the real vocabulary equal the recomputed ones within bound * peak (peak:
// the largest recomputed |logit| of the step), and that both pick the same token, except where
// the recomputed top two are within 2 * bound * peak of each other (a near tie, counted; at most a
// quarter of the picks may be near ties, so that the check cannot pass vacuously). The cached
// path's tokens continue the sequences. `label` names the case in failures.
GreedyResult ExpectGreedyDecodingMatchesRecompute(const DecodingLm& lm,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  int steps, double bound,
                                                  const std::string& label);

// B prompts of `length` tokens in [0, vocab), from `seed`.
std::vector<std::vector<int32_t>> RandomPrompts(int B, int length, int64_t vocab, uint64_t seed);

// A small language model built from nn/ modules: vocab-parallel embedding "embedding.word" (no
// position embeddings: order enters through the layers, e.g. rotary embeddings) -> a
// TransformerStack "layers" of `spec` -> RMSNorm "final_norm" -> the tied output layer, logits
// gathered across the TP ranks. Runs where its store lives; tokens and logits are host tensors.
class TinyLm {
 public:
  static absl::StatusOr<std::unique_ptr<TinyLm>> Create(nn::ParameterStore* store,
                                                        const nn::LayerSpec& spec, int layers,
                                                        int64_t vocab, int64_t padded_vocab);
  int64_t vocab() const { return word_.valid_vocab(); }
  int64_t padded_vocab() const { return word_.padded_vocab(); }
  // Every position's logits, recomputed: tokens [B, T] -> full [B * T, padded_vocab].
  absl::Status Logits(const nn::StepContext& sc, const TensorView& tokens, const TensorView& full);
  absl::Status StartDecoding(const nn::StepContext& sc, int64_t batch, int64_t max_length);
  // The next n tokens [B, n] through the cache -> the last new position's logits [B, padded_vocab].
  absl::Status DecodeStep(const nn::StepContext& sc, const TensorView& tokens,
                          const TensorView& logits);
  // The calls for ExpectGreedyDecodingMatchesRecompute (sc must outlive the result).
  DecodingLm Calls(const nn::StepContext* sc);

 private:
  TinyLm() = default;
  // h [N, H] (device) -> logits of all N rows, gathered, into host f32 [N, padded_vocab].
  absl::Status Head(const nn::StepContext& sc, const TensorView& h, const TensorView& full);
  // Token embeddings [B, T, H] of host tokens [B, T] on the store's device.
  absl::StatusOr<Tensor> Embed(const nn::StepContext& sc, const TensorView& tokens);

  DType dtype_ = DType::kF32;
  int64_t hidden_ = 0;
  nn::VocabParallelEmbedding word_;
  std::unique_ptr<nn::TransformerStack> stack_;
  nn::RmsNormModule final_norm_;
};

}  // namespace testing
}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_TESTING_DECODE_TESTUTIL_H_
