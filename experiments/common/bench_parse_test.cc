#include "experiments/common/bench_parse.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

TEST(BenchParseTest, FitAllReduceByHand) {
  // Latency: the smallest message's time, 10 us (rows given out of order). Then time - alpha =
  // 0, 2, 10 us at 1000, 2000, 4000 bytes (k = 2 (n - 1) / n = 1 for 2 ranks): the slope through
  // the origin is (2e-6 * 2000 + 10e-6 * 4000) / (1000^2 + 2000^2 + 4000^2) = 0.044 / 21e6.
  const std::vector<std::pair<double, double>> rows = {{2000, 12e-6}, {1000, 10e-6}, {4000, 20e-6}};
  auto fit = FitAllReduce(rows, 2);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_DOUBLE_EQ(fit->first, 10e-6);
  EXPECT_NEAR(fit->second, 21e6 / 0.044, 1e-6 * 21e6 / 0.044);
  // 4 ranks: k = 1.5 scales the bytes, so the bandwidth by 1.5.
  auto fit4 = FitAllReduce(rows, 4);
  ASSERT_TRUE(fit4.ok());
  EXPECT_NEAR(fit4->second, 1.5 * 21e6 / 0.044, 1e-6 * 1.5 * 21e6 / 0.044);
}

TEST(BenchParseTest, FitAllReduceNeverNegativeAndRejectsBadRows) {
  // A cache cliff makes the unconstrained intercept negative (the least-squares line through
  // these points meets 0 bytes at -439 us); the latency stays the smallest message's time.
  const std::vector<std::pair<double, double>> cliff = {
      {4096, 13e-6}, {262144, 79e-6}, {1048576, 1147e-6}, {4194304, 8310e-6}};
  auto fit = FitAllReduce(cliff, 2);
  ASSERT_TRUE(fit.ok());
  EXPECT_DOUBLE_EQ(fit->first, 13e-6);
  EXPECT_GT(fit->second, 0);
  EXPECT_FALSE(FitAllReduce({}, 2).ok());
  EXPECT_FALSE(FitAllReduce(cliff, 1).ok());
  EXPECT_FALSE(FitAllReduce({{0, 1e-6}, {100, 2e-6}}, 2).ok());
  EXPECT_FALSE(FitAllReduce({{100, 2e-6}, {200, 2e-6}}, 2).ok());  // Flat: no bandwidth.
  // Falling with the size: the largest message is the fastest.
  EXPECT_FALSE(FitAllReduce({{1000, 50e-6}, {2000, 40e-6}, {4000, 10e-6}}, 2).ok());
}

TEST(BenchParseTest, FitAllReduceSurvivesASlowedSmallestMessage) {
  // The 1000-byte row was preempted (50 us). The latency is the fastest row, 10 us at 2000 bytes;
  // time - alpha = 40, 0, 10 us at 1000, 2000, 4000 bytes, so the slope through the origin is
  // (40e-6 * 1000 + 10e-6 * 4000) / 21e6 = 0.08 / 21e6.
  const std::vector<std::pair<double, double>> rows = {{1000, 50e-6}, {2000, 10e-6}, {4000, 20e-6}};
  auto fit = FitAllReduce(rows, 2);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_DOUBLE_EQ(fit->first, 10e-6);
  EXPECT_NEAR(fit->second, 21e6 / 0.08, 1e-6 * 21e6 / 0.08);
}

TEST(BenchParseTest, ParseAllReduceRowsBySection) {
  const char* out =
      "# comm_bench: backend mpi, 2 ranks\n"
      "#\n# all_reduce (sum)\n"
      "#      size(B)        count   type     time(us)  algbw(GB/s)  busbw(GB/s)   #wrong\n"
      "          4096         1024    f32        20.00        0.205        0.205        0\n"
      "          8192         2048    f32        30.50        0.269        0.269        0\n"
      "#\n# all_reduce_async (sum; AllReduceAsync, then Wait at once)\n"
      "#      size(B)        count   type     time(us)  algbw(GB/s)  busbw(GB/s)   #wrong\n"
      "          4096         1024    f32        25.00        0.164        0.164        0\n"
      "#\n# all_gather\n"
      "#      size(B)        count   type     time(us)  algbw(GB/s)  busbw(GB/s)   #wrong\n"
      "          4096          512    f32        99.00        0.041        0.021        0\n";
  const auto blocking = ParseAllReduceRows(out);
  ASSERT_EQ(blocking.size(), 2u);
  EXPECT_EQ(blocking[0].first, 4096);
  EXPECT_DOUBLE_EQ(blocking[0].second, 20e-6);
  EXPECT_DOUBLE_EQ(blocking[1].second, 30.5e-6);
  const auto async = ParseAllReduceRows(out, "all_reduce_async");
  ASSERT_EQ(async.size(), 1u);
  EXPECT_DOUBLE_EQ(async[0].second, 25e-6);
  EXPECT_TRUE(ParseAllReduceRows(out, "overlap").empty());
}

}  // namespace
}  // namespace experiments
}  // namespace mt
