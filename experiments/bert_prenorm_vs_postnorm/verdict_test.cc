#include "experiments/bert_prenorm_vs_postnorm/verdict.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

NormRun MakeRun(int64_t depth, bool pre, int64_t seed, const std::vector<double>& losses,
                int64_t hidden = 64) {
  NormRun r{depth, pre, seed, 2.0, {}, hidden};
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
  EXPECT_EQ(t.curves.rows()[5], (std::vector<std::string>{"2", "2", "post", "2", "10", "64"}));
  ASSERT_EQ(t.mean_curves.rows().size(), 8u);
  // Iteration 3: seed 1 smoothed (8 + 6) / 2 = 7, seed 2 (10 + 8) / 2 = 9: mean 8, sd sqrt(2).
  EXPECT_EQ(t.mean_curves.rows()[2], (std::vector<std::string>{"post_2_h64", "2", "post", "3", "7",
                                                               "8", "6.58579", "9.41421", "64"}));
  EXPECT_EQ(t.per_seed.rows()[1],
            (std::vector<std::string>{"2", "post", "2", "7", "learned", "64", "post_h64"}));
  EXPECT_EQ(t.final_table.rows()[0][3], "6.000 ± 1.414");
  EXPECT_EQ(t.final_table.rows()[0][4], "1.000");  // sqrt(2) / sqrt(2).
}

TEST(MakeNormTablesTest, FinalCsvHasEachNormsRowsTogether) {
  const NormTables t = MakeNormTables({MakeRun(2, false, 1, {10, 8}), MakeRun(2, true, 1, {10, 9}),
                                       MakeRun(8, false, 1, {10, 7}), MakeRun(8, true, 1, {10, 6})},
                                      1, 1);
  ASSERT_EQ(t.final_csv.rows().size(), 4u);
  EXPECT_EQ(t.final_csv.rows()[0],
            (std::vector<std::string>{"2", "post", "1", "8", "0", "8", "8", "0", "0", "1", "64",
                                      "nan", "8", "8", "post_h64"}));
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

// Runs of one width whose final losses (window 1) are `post` and `pre` per seed, at `depth`.
void AddDepth(int64_t depth, const std::vector<double>& post, const std::vector<double>& pre,
              std::vector<NormRun>* runs, int64_t hidden = 64) {
  for (size_t i = 0; i < post.size(); ++i)
    runs->push_back(MakeRun(depth, false, i + 1, {11, post[i]}, hidden));
  for (size_t i = 0; i < pre.size(); ++i)
    runs->push_back(MakeRun(depth, true, i + 1, {11, pre[i]}, hidden));
}

TEST(CompareTest, GapAndItsStandardError) {
  std::vector<NormRun> runs;
  AddDepth(12, {7.0, 7.2}, {6.0, 6.0}, &runs);
  const NormTables t = MakeNormTables(runs, 1, 1);
  ASSERT_EQ(t.gaps.size(), 1u);
  EXPECT_DOUBLE_EQ(t.gaps[0].gap, 1.1);
  // SE post = sd / sqrt(2) = 0.1414.. / 1.4142.. = 0.1; pre 0: SE of the gap 0.1, z 11.
  EXPECT_NEAR(t.gaps[0].se, 0.1, 1e-12);
  EXPECT_NEAR(t.gaps[0].z, 11, 1e-9);
  // Paired: differences {1.0, 1.2}, mean 1.1, sd 0.1414..: SE 0.1, z 11.
  EXPECT_EQ(t.gaps[0].pairs, 2);
  EXPECT_NEAR(t.gaps[0].paired_se, 0.1, 1e-12);
  EXPECT_EQ(t.gaps_csv.rows()[0],
            (std::vector<std::string>{"64", "12", "1.1", "0.1", "11", "2", "0.1", "11"}));
}

TEST(FindingTest, StatesTheRegimeWhenPostNormDegradesAtDepth) {
  std::vector<NormRun> runs;
  for (int64_t hidden : {64, 128}) {
    AddDepth(2, {6.0, 6.1, 6.2}, {6.1, 6.0, 6.2}, &runs, hidden);
    AddDepth(24, {7.0, 7.1, 7.2}, {5.5, 5.7, 5.6}, &runs, hidden);
  }
  const NormTables t = MakeNormTables(runs, 1, 1);
  const Verdict v = Judge(t, 3.0);
  EXPECT_EQ(v.shown, 2);
  EXPECT_TRUE(v.supported());
  const std::string s = Finding(t, 1e-3, 0);
  EXPECT_NE(s.find("at 24 layers post-norm 7.100 ± 0.100, pre-norm 5.600 ± 0.100, gap +1.500 ± "
                   "0.082 (+18.4 SE; paired by seed +26.0 SE; every post-norm seed above every "
                   "pre-norm seed)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("the seeds' ranges overlap"), std::string::npos) << s;  // At 2 layers.
  EXPECT_NE(s.find("pre-norm 6.100 -> 5.600 (better with depth)"), std::string::npos) << s;
  EXPECT_NE(s.find("**Supported at every width (2 of 2)**"), std::string::npos) << s;
}

TEST(FindingTest, SaysPlainlyWhenItDoesNot) {
  std::vector<NormRun> runs;
  AddDepth(2, {6.0, 6.1}, {6.0, 6.2}, &runs);
  AddDepth(24, {5.5, 5.7}, {5.5, 5.6}, &runs);
  const NormTables t = MakeNormTables(runs, 1, 1);
  EXPECT_FALSE(Judge(t, 3.0).supported());
  const std::string s = Finding(t, 1e-3, 0);
  EXPECT_NE(s.find("**Not supported at every width (0 of 1 show it)**"), std::string::npos) << s;
  EXPECT_NE(s.find("--num_layers=2,8,16 --train_iters=1000"), std::string::npos) << s;
}

TEST(FindingTest, AGapThatDoesNotGrowWithDepthIsNotTheFinding) {
  std::vector<NormRun> runs;
  AddDepth(2, {7.0, 7.1, 7.2}, {5.5, 5.6, 5.7}, &runs);
  AddDepth(24, {6.5, 6.6, 6.7}, {5.5, 5.6, 5.7}, &runs);
  EXPECT_FALSE(ShowsFinding(MakeNormTables(runs, 1, 1).gaps, 3.0));
}

TEST(FindingTest, DivergedPostNormRunsCount) {
  std::vector<NormRun> runs;
  AddDepth(2, {6.0}, {6.0}, &runs);
  runs.push_back(MakeRun(24, false, 1, {11, NAN}));
  runs.push_back(MakeRun(24, true, 1, {11, 5.5}));
  const std::string s = Finding(MakeNormTables(runs, 1, 1), 3e-3, 0);
  EXPECT_NE(s.find("diverged runs: 1 post-norm, 0 pre-norm"), std::string::npos) << s;
}

}  // namespace
}  // namespace experiments
}  // namespace mt
