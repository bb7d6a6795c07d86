// Next-token sampling as Megatron-LM's text generation does it (megatron/text_generation/
// sampling.py), over a model's logits of the real vocabulary (never the padding columns):
//
//   greedy, or top_k == 1   the argmax (the lowest id among equal maxima);
//   otherwise               z = logits / temperature, then at most one filter:
//     top_k > 1             keep the tokens whose z is at least the k-th largest z (ties at the
//                           boundary are all kept, as Megatron's `logits < kth_value` removal);
//     0 < top_p <= 1        nucleus: in order of decreasing probability (ties by id), keep the
//                           smallest prefix whose probability reaches top_p (the most likely
//                           token always stays);
//   then draw from softmax(z) over the kept tokens. top_k > 1 together with top_p > 0 is an error.
//
// Draws are reproducible and identical on every rank of a tensor-parallel group: the uniform
// number of sequence `row` at position `position` is a pure function of (seed, row, position)
// (Philox, core/philox.h), and every rank sees the same gathered logits. The probabilities are
// computed in double.
//
// Thread-safety: all functions are pure.
#ifndef MT_SERVE_SAMPLING_H_
#define MT_SERVE_SAMPLING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/fields.h"

namespace mt {
namespace serve {

struct SamplingConfig {
  bool greedy = false;
  int top_k = 0;             // 0: off; 1: greedy; > 1: the k most likely tokens.
  double top_p = 0.0;        // 0: off; (0, 1]: nucleus.
  double temperature = 1.0;  // > 0; divides the logits before any filter.
  uint64_t seed = 0;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("greedy", &self.greedy, "Pick the most likely token (as --top_k=1).");
    v("top_k", &self.top_k, "Sample among the k most likely tokens (0: off, 1: greedy).");
    v("top_p", &self.top_p,
      "Nucleus sampling: the smallest set of most likely tokens reaching this probability "
      "(0: off; exclusive with --top_k > 1).");
    v("temperature", &self.temperature, "Divide the logits by this before sampling (> 0).");
    v("seed", &self.seed, "Seed of the sampling random numbers.");
  }

  // InvalidArgument naming the setting: temperature not finite and > 0, top_k < 0, top_p outside
  // [0, 1], or top_k > 1 together with top_p > 0.
  absl::Status Validate() const;
  bool IsGreedy() const { return greedy || top_k == 1; }
};

// What a draw picks from: the candidate ids, in increasing order, and their probabilities, which
// sum to 1 (within rounding).
struct TokenDistribution {
  std::vector<int32_t> ids;
  std::vector<double> probs;
};

// The distribution `config` draws from given the logits of the real vocabulary (ids 0 .. n-1);
// greedy: the argmax alone, with probability 1. InvalidArgument for an invalid config, no logits,
// a NaN or +inf logit, or every logit -inf.
absl::StatusOr<TokenDistribution> SamplingDistribution(absl::Span<const float> logits,
                                                       const SamplingConfig& config);

// The candidate whose cumulative probability (in id order) first exceeds u, for u in [0, 1) (the
// last candidate if rounding leaves u beyond the sum).
int32_t Draw(const TokenDistribution& distribution, double u);

// The uniform number in [0, 1) (53 random bits) of sequence `row` at position `position`.
double SamplingUniform(uint64_t seed, int64_t row, int64_t position);

// SamplingDistribution, then Draw with SamplingUniform(config.seed, row, position).
absl::StatusOr<int32_t> SampleToken(absl::Span<const float> logits, const SamplingConfig& config,
                                    int64_t row, int64_t position);

// log softmax(logits)[id] over the given logits, in double (the log-probability Megatron reports:
// of the raw logits, before temperature or filtering).
double LogProbability(absl::Span<const float> logits, int32_t id);

}  // namespace serve
}  // namespace mt

#endif  // MT_SERVE_SAMPLING_H_
