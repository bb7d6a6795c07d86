#include "experiments/gpt2_scaling_curves/scaling.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

SizeCurve Size(const std::string& name, int64_t params, const std::vector<double>& ppl) {
  SizeCurve s{name, 2, 64, 2, params};
  for (size_t i = 0; i < ppl.size(); ++i) {
    s.points.push_back({static_cast<int64_t>(10 * (i + 1)), std::log(ppl[i]), ppl[i]});
  }
  return s;
}

TEST(EvalIterationsTest, EveryIntervalAndTheEnd) {
  EXPECT_EQ(EvalIterations(25, 60), (std::vector<int64_t>{25, 50, 60}));
  EXPECT_EQ(EvalIterations(25, 50), (std::vector<int64_t>{25, 50}));
  EXPECT_EQ(EvalIterations(100, 30), (std::vector<int64_t>{30}));
  EXPECT_TRUE(EvalIterations(0, 30).empty());
  EXPECT_TRUE(EvalIterations(5, 0).empty());
}

TEST(FormatParamsTest, Units) {
  EXPECT_EQ(FormatParams(3315840), "3.3M");
  EXPECT_EQ(FormatParams(850400), "850K");
  EXPECT_EQ(FormatParams(999), "999");
}

TEST(CurvesCsvTest, OneRowPerPoint) {
  const Table t = CurvesCsv({Size("2L-64H", 3000000, {400, 200})});
  EXPECT_EQ(t.ToCsv(),
            "model,params,iteration,val_loss,val_ppl\n"
            "2L-64H,3000000,10,5.99146,400\n"
            "2L-64H,3000000,20,5.29832,200\n");
  const Table f = FinalTable({Size("2L-64H", 3000000, {400, 200})});
  EXPECT_EQ(f.rows()[0][4], "3.0M (3000000)");
  EXPECT_EQ(f.rows()[0][6], "200.00");
}

TEST(ScalingFindingTest, LargerIsLowerEverywhere) {
  // Given out of order: sorted by parameters before comparing.
  const std::string s =
      ScalingFinding({Size("big", 9000000, {300, 150, 90}), Size("small", 1000000, {400, 250, 160}),
                      Size("mid", 4000000, {350, 200, 120})},
                     512);
  EXPECT_NE(s.find("after 30 iterations (15360 tokens), smallest model first: small (1.0M "
                   "parameters) 160.00; mid (4.0M parameters) 120.00; big (9.0M parameters) "
                   "90.00"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("**Every larger model reaches a lower perplexity at equal tokens**"),
            std::string::npos);
  EXPECT_NE(s.find("at 3 of the 3 evaluation iterations"), std::string::npos) << s;
}

TEST(ScalingFindingTest, SaysWhereTheOrderingFails) {
  // The mid model ends above the small one; at iteration 10 the order holds, at 20 and 30 not.
  const std::string s =
      ScalingFinding({Size("small", 1000000, {400, 250, 160}),
                      Size("mid", 4000000, {350, 260, 170}), Size("big", 9000000, {300, 150, 90})},
                     512);
  EXPECT_NE(s.find("in 1 of 2 size steps only"), std::string::npos) << s;
  EXPECT_NE(s.find("at 1 of the 3 evaluation iterations"), std::string::npos) << s;
  EXPECT_EQ(ScalingFinding({Size("one", 10, {5})}, 512),
            "Fewer than two sizes were evaluated: nothing to compare.");
}

TEST(PowerLawTest, ExactPowerLawAndNoisyPointsAgainstAnIndependentFit) {
  // L = 10 N^-0.1 exactly: alpha 0.1, a zero-width interval, r2 1.
  std::vector<double> n = {1e3, 1e4, 1e5, 1e6}, loss;
  for (double v : n) loss.push_back(10 * std::pow(v, -0.1));
  auto exact = FitPowerLaw(n, loss);
  ASSERT_TRUE(exact.has_value());
  EXPECT_NEAR(exact->alpha, 0.1, 1e-12);
  EXPECT_NEAR(exact->alpha_high - exact->alpha_low, 0, 1e-9);
  EXPECT_NEAR(exact->intercept, std::log(10.0), 1e-10);
  // Noisy points; expected values from a float64 least-squares fit written separately in Python
  // (t = 3.182 for 3 degrees of freedom).
  auto f = FitPowerLaw({1e4, 3e4, 1e5, 3e5, 1e6}, {6.0, 5.6, 5.3, 5.05, 4.7});
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->points, 5);
  EXPECT_NEAR(f->alpha, 0.051398, 1e-6);
  EXPECT_NEAR(f->alpha_low, 0.045360, 1e-6);
  EXPECT_NEAR(f->alpha_high, 0.057436, 1e-6);
  EXPECT_NEAR(f->intercept, 2.260491, 1e-6);
  EXPECT_NEAR(f->r2, 0.995928, 1e-6);
  EXPECT_FALSE(FitPowerLaw({1, 2}, {3, 2}).has_value());
  EXPECT_FALSE(FitPowerLaw({5, 5, 5}, {3, 2, 1}).has_value());
  EXPECT_NEAR(StudentT975(3), 3.182, 1e-9);
  EXPECT_NEAR(StudentT975(60), 2.000, 2e-3);  // The table value is 2.000.
}

TEST(ScalingCountsTest, KaplanCounts) {
  // 2 layers, hidden 64, padded vocab 50304, 64 positions: the embeddings are (50304 + 64) * 64.
  EXPECT_EQ(NonEmbeddingParams(3323776, 50304, 64, 64), 3323776 - 50368 * 64);
  // 6 (N + d V) + 6 L T d = 6 (100000 + 64 * 50304) + 6 * 2 * 64 * 64.
  EXPECT_DOUBLE_EQ(TrainFlopsPerToken(100000, 2, 64, 50304, 64),
                   6.0 * (100000 + 64 * 50304) + 6.0 * 2 * 64 * 64);
  EXPECT_EQ(ComputeMatchedIters(100, 2e7, 1e7), 200);
  EXPECT_EQ(ComputeMatchedIters(100, 1e7, 3e7), 33);
  EXPECT_EQ(ComputeMatchedIters(1, 1e7, 3e9), 1);
}

}  // namespace
}  // namespace experiments
}  // namespace mt
