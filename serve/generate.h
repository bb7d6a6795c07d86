// Text generation from a language model (models::Model) through its key/value cache, as
// Megatron-LM's generate does it for a batch of prompts of different lengths:
//
//   1. StartDecoding(B, max_b(L_b) + N), where L_b is prompt b's length and N tokens_to_generate;
//   2. one DecodeStep over the common prefix: the first m = min_b(L_b) tokens of every prompt;
//   3. then one position at a time for every sequence: position p of sequence b is its own prompt
//      token while p < L_b (forced), else a token sampled (serve/sampling.h) from the logits of
//      position p - 1; a sequence stops after N generated tokens, after generating `eod`, or when
//      the caller's StopCondition says so, and the batch stops once every sequence has.
//
// (With Decoding::kRecompute, or for a model without a cache, steps 1-2 and every DecodeStep are
// replaced by Model::Logits over the whole prefix; the tokens are the same up to float rounding.)
// The cache is the model's models::IncrementalDecoder (Model::incremental_decoder()).
//
// Collective when the model is tensor-parallel: every rank calls Generate with the same
// arguments and gets the same result (the gathered logits are identical on every rank and the
// draws are a function of (seed, sequence, position)). Tokens and logits stay on the host; the
// model runs where its store lives (sc.exec's device).
#ifndef MT_SERVE_GENERATE_H_
#define MT_SERVE_GENERATE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/model.h"
#include "nn/context.h"
#include "serve/sampling.h"

namespace mt {
namespace serve {

// How the logits of each new position are computed.
enum class Decoding {
  // Through the model's key/value cache (IncrementalDecoder::DecodeStep): each step runs only the
  // new positions. A model without one (no Model::incremental_decoder(), or its StartDecoding is
  // Unimplemented) is run as kRecompute.
  kCache,
  // Model::Logits over every sequence's whole prefix at every step: no cache (the baseline, and
  // what any language model supports).
  kRecompute,
};

struct GenerateConfig {
  int64_t tokens_to_generate = 64;  // N: at most this many new tokens per sequence (>= 0).
  Decoding decoding = Decoding::kCache;
  SamplingConfig sampling;
  int32_t eod = -1;  // A sequence that generates this token stops there (-1: none).
  bool logprobs =
      false;  // Report log p(token | the tokens before it) of every token but the first.
};

enum class FinishReason {
  kLength,  // tokens_to_generate tokens generated (or none asked for).
  kEod,     // The end-of-document token was generated (it is the last token).
  kStop,    // The StopCondition ended it.
};

struct Generation {
  std::vector<int32_t> tokens;  // The prompt, then the generated tokens.
  int64_t prompt_length = 0;
  // With GenerateConfig::logprobs: [tokens.size() - 1], entry i = log p(tokens[i + 1] | tokens
  // [0 .. i]) under the model: the log-softmax of its logits over the real vocabulary, without
  // temperature or filtering (Megatron's output_log_probs). Empty otherwise.
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::kLength;

  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_length; }
};

// Asked after each token sequence `row` generates (`generated`: its tokens so far, the newest
// last), identically on every rank: true ends the sequence (FinishReason::kStop). Must be a pure
// function of its arguments (tensor-parallel ranks must agree).
using StopCondition = std::function<bool(int64_t row, absl::Span<const int32_t> generated)>;

// Generate's argument checks (the errors below, before the model's).
absl::Status CheckGenerateArguments(const models::Model& model,
                                    const std::vector<std::vector<int32_t>>& prompts,
                                    const GenerateConfig& config);

// Generates continuations of `prompts` (B >= 1 sequences of >= 1 tokens in [0, vocab_size)).
// Errors: InvalidArgument (naming the prompt and token) for no prompts, an empty prompt, a token
// outside the vocabulary, a prompt of L tokens with L + tokens_to_generate >
// max_position_embeddings, tokens_to_generate < 0, or an invalid sampling config; the model's
// errors (Unimplemented for a model without decoding).
absl::StatusOr<std::vector<Generation>> Generate(const nn::StepContext& sc, models::Model& model,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const GenerateConfig& config,
                                                 const StopCondition& stop = nullptr);

}  // namespace serve
}  // namespace mt

#endif  // MT_SERVE_GENERATE_H_
