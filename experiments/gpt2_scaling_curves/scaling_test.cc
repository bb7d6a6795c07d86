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

}  // namespace
}  // namespace experiments
}  // namespace mt
