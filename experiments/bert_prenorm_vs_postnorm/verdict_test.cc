#include "experiments/bert_prenorm_vs_postnorm/verdict.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

NormRun MakeRun(int64_t depth, bool pre, int64_t seed, const std::vector<double>& losses) {
  NormRun r{depth, pre, seed, 2.0, {}};
  for (size_t i = 0; i < losses.size(); ++i)
    r.curve.push_back({static_cast<int64_t>(i + 1), losses[i]});
  return r;
}

TEST(MakeNormTablesTest, GroupsSeedsAndAverages) {
  // Depth 2 post-norm, seeds 1 and 2; window 2: finals (6 + 4) / 2 = 5 and (8 + 6) / 2 = 7.
  const std::vector<NormRun> runs = {MakeRun(2, false, 1, {10, 8, 6, 4}),
                                     MakeRun(2, false, 2, {10, 10, 8, 6}),
                                     MakeRun(2, true, 1, {10, 9, 8, 7})};
  const NormTables t = MakeNormTables(runs, /*window=*/2, /*smooth=*/2);
  ASSERT_EQ(t.finals.size(), 2u);
  const NormFinal& post = t.finals[0];
  EXPECT_EQ(post.depth, 2);
  EXPECT_FALSE(post.pre);
  EXPECT_EQ(post.final.n, 2);
  EXPECT_DOUBLE_EQ(post.final.mean, 6);
  EXPECT_DOUBLE_EQ(post.final.stddev, std::sqrt(2.0));  // (1 + 1) / 1.
  EXPECT_EQ(post.learned, 2);
  EXPECT_DOUBLE_EQ(post.seconds, 4);
  EXPECT_TRUE(t.finals[1].pre);
  EXPECT_DOUBLE_EQ(t.finals[1].final.mean, 7.5);
  // Every iteration of every run, then the mean curves: post-norm mean {10, 9, 7, 5}, smoothed
  // over 2: {10, 9.5, 8, 6}.
  EXPECT_EQ(t.curves.rows().size(), 12u);
  EXPECT_EQ(t.curves.rows()[5], (std::vector<std::string>{"2", "2", "post", "2", "10"}));
  ASSERT_EQ(t.mean_curves.rows().size(), 8u);
  EXPECT_EQ(t.mean_curves.rows()[2],
            (std::vector<std::string>{"post_2", "2", "post", "3", "7", "8"}));
  EXPECT_EQ(t.per_seed.rows()[1], (std::vector<std::string>{"2", "post", "2", "7", "learned"}));
  EXPECT_EQ(t.final_table.rows()[0][2], "6.000 ± 1.414");
}

TEST(MakeNormTablesTest, FinalCsvHasEachNormsRowsTogether) {
  const NormTables t = MakeNormTables({MakeRun(2, false, 1, {10, 8}), MakeRun(2, true, 1, {10, 9}),
                                       MakeRun(8, false, 1, {10, 7}), MakeRun(8, true, 1, {10, 6})},
                                      1, 1);
  ASSERT_EQ(t.final_csv.rows().size(), 4u);
  EXPECT_EQ(t.final_csv.rows()[0],
            (std::vector<std::string>{"2", "post", "1", "8", "0", "8", "8", "0", "0", "1"}));
  EXPECT_EQ(t.final_csv.rows()[1][0], "8");
  EXPECT_EQ(t.final_csv.rows()[1][1], "post");
  EXPECT_EQ(t.final_csv.rows()[2][1], "pre");
  EXPECT_EQ(t.final_csv.rows()[3][3], "6");
}

TEST(MakeNormTablesTest, CountsDivergedAndStalled) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const NormTables t = MakeNormTables(
      {MakeRun(24, false, 1, {10, 11, 12, nan}), MakeRun(24, false, 2, {10, 10, 9.9, 9.9}),
       MakeRun(24, false, 3, {10, 10, 11, 12})},
      2, 2);
  ASSERT_EQ(t.finals.size(), 1u);
  EXPECT_EQ(t.finals[0].diverged, 2);
  EXPECT_EQ(t.finals[0].stalled, 1);
  EXPECT_EQ(t.finals[0].learned, 0);
  EXPECT_TRUE(std::isnan(t.finals[0].final.mean));  // A non-finite seed: no mean.
}

NormFinal Final(int64_t depth, bool pre, const std::vector<double>& finals, int diverged = 0) {
  NormFinal f;
  f.depth = depth;
  f.pre = pre;
  f.final = Summarize(finals);
  f.diverged = diverged;
  return f;
}

TEST(FindingTest, StatesTheRegimeWhenPostNormDegradesAtDepth) {
  const std::string s = Finding({Final(2, false, {6.0, 6.1}), Final(2, true, {6.0, 6.2}),
                                 Final(24, false, {7.0, 7.2}), Final(24, true, {5.5, 5.6})},
                                1e-3, 64);
  EXPECT_NE(s.find("At 24 layers: post-norm 7.100 ± 0.141, pre-norm 5.550 ± 0.071 (gap post - "
                   "pre +1.550; every post-norm seed above every pre-norm seed)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("the seeds' ranges overlap"), std::string::npos) << s;  // At 2 layers.
  EXPECT_NE(s.find("**Post-norm degrades at depth while pre-norm does not**"), std::string::npos)
      << s;
}

TEST(FindingTest, SaysPlainlyWhenItDoesNot) {
  const std::string s = Finding({Final(2, false, {6.0, 6.1}), Final(2, true, {6.0, 6.2}),
                                 Final(24, false, {5.5, 5.7}), Final(24, true, {5.5, 5.6})},
                                1e-3, 64);
  EXPECT_NE(s.find("post-norm does not degrade or diverge"), std::string::npos) << s;
  EXPECT_NE(s.find("--num_layers=2,24,48 --lr=1e-2"), std::string::npos) << s;
}

TEST(FindingTest, DivergedPostNormRunsCount) {
  const std::string s = Finding({Final(2, false, {6.0}), Final(2, true, {6.0}),
                                 Final(24, false, {NAN}, 1), Final(24, true, {5.5})},
                                3e-3, 64);
  EXPECT_NE(s.find("diverged runs: 1 post-norm, 0 pre-norm"), std::string::npos) << s;
  EXPECT_NE(s.find("**Post-norm diverges at depth"), std::string::npos) << s;
}

}  // namespace
}  // namespace experiments
}  // namespace mt
