#include "experiments/common/curves.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string WriteTemp(const std::string& name, const std::string& text) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(t != nullptr ? t : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::vector<LossPoint> Curve(const std::vector<double>& losses) {
  std::vector<LossPoint> c;
  for (size_t i = 0; i < losses.size(); ++i) c.push_back({static_cast<int64_t>(i + 1), losses[i]});
  return c;
}

TEST(ReadLossCurveTest, ReadsTheKeyAndNullAsNaN) {
  const std::string path = WriteTemp("log.jsonl",
                                     "{\"iteration\":1,\"loss\":10.5,\"lm_loss\":9.75}\n"
                                     "{\"iteration\":2,\"loss\":null,\"lm_loss\":9.5}\n\n"
                                     "{\"iteration\":3,\"loss\":8.25,\"lm_loss\":7.0}\n");
  auto curve = ReadLossCurve(path);
  ASSERT_TRUE(curve.ok()) << curve.status();
  ASSERT_EQ(curve->size(), 3u);
  EXPECT_EQ((*curve)[0].iteration, 1);
  EXPECT_EQ((*curve)[0].loss, 10.5);
  EXPECT_TRUE(std::isnan((*curve)[1].loss));
  EXPECT_EQ((*curve)[2].iteration, 3);
  EXPECT_EQ((*curve)[2].loss, 8.25);
  auto lm = ReadLossCurve(path, "lm_loss");
  ASSERT_TRUE(lm.ok()) << lm.status();
  EXPECT_EQ((*lm)[1].loss, 9.5);
}

TEST(ReadLossCurveTest, ErrorsNameTheFileAndLine) {
  auto missing = ReadLossCurve("/nonexistent/log.jsonl");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/log.jsonl"), std::string::npos);
  const std::string bad =
      WriteTemp("bad.jsonl", "{\"iteration\":1,\"loss\":1}\n{\"iteration\":2,\"los\":1}\n");
  auto r = ReadLossCurve(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("bad.jsonl:2"), std::string::npos) << r.status();
  const std::string garbage = WriteTemp("garbage.jsonl", "not json\n");
  EXPECT_EQ(ReadLossCurve(garbage).status().code(), absl::StatusCode::kDataLoss);
}

TEST(SummarizeTest, HandComputed) {
  // {2, 4, 9}: mean 5, deviations -3, -1, 4, squares 9 + 1 + 16 = 26, / 2 = 13.
  const Spread s = Summarize({2, 4, 9});
  EXPECT_EQ(s.n, 3);
  EXPECT_DOUBLE_EQ(s.mean, 5);
  EXPECT_DOUBLE_EQ(s.stddev, std::sqrt(13.0));
  EXPECT_EQ(s.min, 2);
  EXPECT_EQ(s.max, 9);
  const Spread one = Summarize({7.5});
  EXPECT_EQ(one.mean, 7.5);
  EXPECT_EQ(one.stddev, 0);
}

TEST(SummarizeTest, EmptyOrNonFiniteIsNaN) {
  for (const std::vector<double>& v :
       {std::vector<double>{}, std::vector<double>{1, kNaN}, std::vector<double>{INFINITY, 1}}) {
    const Spread s = Summarize(v);
    EXPECT_TRUE(std::isnan(s.mean) && std::isnan(s.stddev) && std::isnan(s.min) &&
                std::isnan(s.max));
  }
}

TEST(WindowMeanTest, HeadAndTail) {
  const auto c = Curve({10, 8, 6, 4, 3});
  EXPECT_DOUBLE_EQ(HeadMean(c, 2), 9);
  EXPECT_DOUBLE_EQ(TailMean(c, 2), 3.5);
  EXPECT_DOUBLE_EQ(TailMean(c, 3), 13.0 / 3);
  EXPECT_DOUBLE_EQ(HeadMean(c, 99), 31.0 / 5);  // Shorter than the window: all of it.
  EXPECT_TRUE(std::isnan(TailMean({}, 3)));
  EXPECT_TRUE(std::isnan(TailMean(Curve({1, kNaN, 2}), 2)));
  EXPECT_DOUBLE_EQ(HeadMean(Curve({1, 3, kNaN}), 2), 2);  // The NaN is outside the window.
}

TEST(ClassifyTest, LearnedStalledDiverged) {
  // Head mean (10 + 8) / 2 = 9, tail (4 + 3) / 2 = 3.5: fell by 61%.
  EXPECT_EQ(Classify(Curve({10, 8, 6, 4, 3}), 2, 0.05), Outcome::kLearned);
  // Head 10, tail 9.8: fell by 2% < 5%.
  EXPECT_EQ(Classify(Curve({10, 10, 9.9, 9.8, 9.8}), 2, 0.05), Outcome::kStalled);
  // Fell by exactly 5%: not less than min_drop, so learned.
  EXPECT_EQ(Classify(Curve({10, 10, 9.5, 9.5}), 2, 0.05), Outcome::kLearned);
  // The loss rose.
  EXPECT_EQ(Classify(Curve({5, 5, 6, 7}), 2, 0.05), Outcome::kDiverged);
  // A non-finite loss anywhere, even in the middle.
  EXPECT_EQ(Classify(Curve({10, 8, kNaN, 4, 3}), 2, 0.05), Outcome::kDiverged);
  EXPECT_EQ(Classify(Curve({10, INFINITY, 3}), 1, 0.05), Outcome::kDiverged);
  EXPECT_STREQ(OutcomeName(Outcome::kStalled), "stalled");
}

TEST(SeparatedTest, RangesMustNotOverlap) {
  const Spread high = Summarize({5, 6, 7}), low = Summarize({3, 4, 4.5});
  EXPECT_TRUE(Separated(high, low));
  EXPECT_FALSE(Separated(low, high));
  EXPECT_FALSE(Separated(Summarize({4.5, 6}), low));  // Touching: 4.5 is not above 4.5.
  EXPECT_FALSE(Separated(Summarize({5, kNaN}), low));
  EXPECT_FALSE(Separated(Summarize({}), low));
}

TEST(MovingAverageTest, Trailing) {
  const std::vector<double> out = MovingAverage({1, 3, 5, 7, 9}, 3);
  const std::vector<double> want = {1, 2, 3, 5, 7};
  ASSERT_EQ(out.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_DOUBLE_EQ(out[i], want[i]) << i;
  EXPECT_EQ(MovingAverage({4, 2}, 1), (std::vector<double>{4, 2}));
  const std::vector<double> nan = MovingAverage({1, kNaN, 3, 5}, 2);
  EXPECT_EQ(nan[0], 1);
  EXPECT_TRUE(std::isnan(nan[1]) && std::isnan(nan[2]) && std::isnan(nan[3]));
}

TEST(ParsePositiveListTest, ListsAndErrors) {
  auto ok = ParsePositiveList("num_layers", "2,8,24");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, (std::vector<int64_t>{2, 8, 24}));
  EXPECT_EQ(*ParsePositiveList("seeds", "7"), (std::vector<int64_t>{7}));
  for (const char* bad : {"", "2,,8", "2,x", "0", "-3", "2.5"}) {
    auto r = ParsePositiveList("num_layers", bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("--num_layers"), std::string::npos);
  }
}

TEST(ParsePositiveMapTest, PairsAndErrors) {
  auto ok = ParsePositiveMap("train_iters_per_width", "32:1000,64:500");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, (std::map<int64_t, int64_t>{{32, 1000}, {64, 500}}));
  EXPECT_EQ(*ParsePositiveMap("x", "7:3"), (std::map<int64_t, int64_t>{{7, 3}}));
  for (const char* bad : {"", "32", "32:", ":5", "32:1000,", "32:1000:5", "32:0", "0:5", "32:x",
                          "32:2.5", "32:1,32:2"}) {
    auto r = ParsePositiveMap("train_iters_per_width", bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("--train_iters_per_width"), std::string::npos) << bad;
  }
  EXPECT_NE(ParsePositiveMap("x", "32:1,32:2").status().message().find("32 is given twice"),
            std::string::npos);
}

}  // namespace
}  // namespace experiments
}  // namespace mt
