// The sampler against hand-computed distributions: softmax with temperature, the top-k set (with
// ties at the boundary), the nucleus set, greedy picks, draws by cumulative probability, and the
// empirical frequencies of many draws; every invalid setting and logit is an error.
#include "serve/sampling.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace serve {
namespace {

// Logits whose softmax is {0.1, 0.2, 0.3, 0.4} (logs of the probabilities, rounded to f32).
const std::vector<float> kLogits = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
constexpr double kTol = 1e-6;  // f32 logits of the probabilities: ~1e-7 relative each.

SamplingConfig Config(int top_k, double top_p, double temperature = 1.0) {
  SamplingConfig c;
  c.top_k = top_k;
  c.top_p = top_p;
  c.temperature = temperature;
  return c;
}

void ExpectDistribution(const SamplingConfig& c, const std::vector<int32_t>& ids,
                        const std::vector<double>& probs,
                        const std::vector<float>& logits = kLogits) {
  absl::StatusOr<TokenDistribution> d = SamplingDistribution(logits, c);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->ids, ids);
  ASSERT_EQ(d->probs.size(), probs.size());
  for (size_t i = 0; i < probs.size(); ++i) EXPECT_NEAR(d->probs[i], probs[i], kTol) << i;
}

TEST(SamplingTest, FullDistributionIsTheSoftmax) {
  ExpectDistribution(Config(0, 0), {0, 1, 2, 3}, {0.1, 0.2, 0.3, 0.4});
}

TEST(SamplingTest, TemperatureSharpensOrFlattens) {
  // p^(1/T) renormalised: T = 2 gives sqrt(p) / sum sqrt(p); T = 0.5 gives p^2 / sum p^2.
  const double s = std::sqrt(0.1) + std::sqrt(0.2) + std::sqrt(0.3) + std::sqrt(0.4);
  ExpectDistribution(
      Config(0, 0, 2.0), {0, 1, 2, 3},
      {std::sqrt(0.1) / s, std::sqrt(0.2) / s, std::sqrt(0.3) / s, std::sqrt(0.4) / s});
  ExpectDistribution(Config(0, 0, 0.5), {0, 1, 2, 3},
                     {0.01 / 0.3, 0.04 / 0.3, 0.09 / 0.3, 0.16 / 0.3});
}

TEST(SamplingTest, TopKKeepsTheKMostLikely) {
  ExpectDistribution(Config(2, 0), {2, 3}, {3.0 / 7, 4.0 / 7});
  ExpectDistribution(Config(3, 0), {1, 2, 3}, {2.0 / 9, 3.0 / 9, 4.0 / 9});
  ExpectDistribution(Config(4, 0), {0, 1, 2, 3}, {0.1, 0.2, 0.3, 0.4});
  ExpectDistribution(Config(9, 0), {0, 1, 2, 3}, {0.1, 0.2, 0.3, 0.4});  // k beyond the vocabulary
  // With temperature 2 after the filter: sqrt(0.3), sqrt(0.4) renormalised.
  const double s = std::sqrt(0.3) + std::sqrt(0.4);
  ExpectDistribution(Config(2, 0, 2.0), {2, 3}, {std::sqrt(0.3) / s, std::sqrt(0.4) / s});
  // Ties with the k-th largest are kept: three logits of 3 for k = 2.
  ExpectDistribution(Config(2, 0), {1, 2, 4}, {1.0 / 3, 1.0 / 3, 1.0 / 3}, {1, 3, 3, 2, 3});
}

TEST(SamplingTest, TopPKeepsTheSmallestSetReachingP) {
  ExpectDistribution(Config(0, 0.35), {3}, {1.0});                 // 0.4 alone reaches it
  ExpectDistribution(Config(0, 0.5), {2, 3}, {3.0 / 7, 4.0 / 7});  // 0.4 + 0.3
  ExpectDistribution(Config(0, 0.75), {1, 2, 3}, {2.0 / 9, 3.0 / 9, 4.0 / 9});  // + 0.2
  ExpectDistribution(Config(0, 1.0), {0, 1, 2, 3}, {0.1, 0.2, 0.3, 0.4});
  ExpectDistribution(Config(0, 1e-9), {3}, {1.0});  // The most likely token always stays.
  // Temperature first: T = 0.5 gives {1, 4, 9, 16} / 30, so 0.6 needs 16/30 + 9/30.
  ExpectDistribution(Config(0, 0.6, 0.5), {2, 3}, {9.0 / 25, 16.0 / 25});
}

TEST(SamplingTest, GreedyPicksTheFirstLargest) {
  SamplingConfig greedy;
  greedy.greedy = true;
  ExpectDistribution(greedy, {3}, {1.0});
  ExpectDistribution(Config(1, 0), {1}, {1.0}, {5, 7, 7, -1});  // top_k == 1; the first of a tie
  absl::StatusOr<int32_t> t = SampleToken(kLogits, Config(1, 0), 0, 0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, 3);
}

TEST(SamplingTest, MinusInfinityLogitsAreNeverCandidatesWithWeight) {
  const float inf = std::numeric_limits<float>::infinity();
  ExpectDistribution(Config(0, 0), {0, 1, 2}, {0.0, 0.5, 0.5}, {-inf, 0, 0});
  ExpectDistribution(Config(0, 0.9), {1, 2}, {0.5, 0.5}, {-inf, 0, 0});
}

TEST(SamplingTest, DrawWalksTheCumulativeProbabilities) {
  absl::StatusOr<TokenDistribution> d = SamplingDistribution(kLogits, Config(2, 0));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(Draw(*d, 0.0), 2);
  EXPECT_EQ(Draw(*d, 0.42), 2);  // 3/7 = 0.4286
  EXPECT_EQ(Draw(*d, 0.43), 3);
  EXPECT_EQ(Draw(*d, 0.999999), 3);
}

TEST(SamplingTest, DrawsFollowTheDistribution) {
  // 40000 draws (one per position) from {0.1, 0.2, 0.3, 0.4}: each frequency within 5 standard
  // deviations (sqrt(p (1 - p) / n) <= 0.0025) of its probability.
  const int n = 40000;
  std::vector<int> counts(4, 0);
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<int32_t> t = SampleToken(kLogits, Config(0, 0), /*row=*/3, /*position=*/i);
    ASSERT_TRUE(t.ok());
    ++counts[*t];
  }
  for (int v = 0; v < 4; ++v) {
    const double p = 0.1 * (v + 1);
    EXPECT_NEAR(counts[v] / double{n}, p, 5 * std::sqrt(p * (1 - p) / n)) << v;
  }
}

TEST(SamplingTest, UniformsArePureFunctionsOfSeedRowAndPosition) {
  EXPECT_EQ(SamplingUniform(7, 1, 5), SamplingUniform(7, 1, 5));
  EXPECT_NE(SamplingUniform(7, 1, 5), SamplingUniform(7, 2, 5));
  EXPECT_NE(SamplingUniform(7, 1, 5), SamplingUniform(7, 1, 6));
  EXPECT_NE(SamplingUniform(7, 1, 5), SamplingUniform(8, 1, 5));
  double lo = 1, hi = 0, sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = SamplingUniform(1, 0, i);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
  }
  EXPECT_GE(lo, 0.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_NEAR(sum / 10000, 0.5, 0.015);  // 5 standard deviations of the mean (0.0029).
}

TEST(SamplingTest, LogProbabilityIsTheLogSoftmax) {
  EXPECT_NEAR(LogProbability(kLogits, 2), std::log(0.3), kTol);
  EXPECT_NEAR(LogProbability({0, 0}, 1), std::log(0.5), 1e-12);
}

TEST(SamplingTest, BadSettingsAndLogitsAreErrors) {
  for (const SamplingConfig& c : {Config(2, 0.5), Config(0, 0, 0.0), Config(0, 0, -1.0),
                                  Config(0, 0, std::numeric_limits<double>::quiet_NaN()),
                                  Config(0, 1.5), Config(-1, 0), Config(0, -0.1)}) {
    EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(SamplingDistribution(kLogits, c).status().code(), absl::StatusCode::kInvalidArgument);
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::vector<float>& logits :
       std::vector<std::vector<float>>{{}, {0, std::nanf("")}, {0, inf}, {-inf, -inf}}) {
    EXPECT_EQ(SamplingDistribution(logits, Config(0, 0)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace serve
}  // namespace mt
