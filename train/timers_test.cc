// The timers' levels and accounting, the reports' text against hand-written expectations, and the
// communicator's running total of time in calls that the straggler report subtracts.
#include "train/timers.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "gtest/gtest.h"

namespace mt {
namespace train {
namespace {

int IndexOf(const char* name) {
  for (int i = 0; i < kNumTimers; ++i) {
    if (std::string(kTimers[i].name) == name) return i;
  }
  return -1;
}

TEST(TimersTest, LevelsGateTheTimersAndTimeAccumulates) {
  int syncs = 0;
  Timers t(/*log_level=*/1, [&] { ++syncs; });
  EXPECT_TRUE(t.Enabled("forward-backward"));
  EXPECT_FALSE(t.Enabled("forward-compute"));
  for (int i = 0; i < 2; ++i) {
    t.Start("forward-backward");
    t.Start("forward-compute");  // Level 2: nothing.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    t.Stop("forward-compute");
    t.Stop("forward-backward");
  }
  EXPECT_EQ(syncs, 4);  // Two readings of the clock per interval of an enabled timer.
  const std::vector<double> ms = t.ElapsedMs();
  EXPECT_GE(ms[IndexOf("forward-backward")], 40.0);
  EXPECT_EQ(ms[IndexOf("forward-compute")], -1.0);
  EXPECT_EQ(ms[IndexOf("optimizer")], -1.0);
  t.Reset();
  EXPECT_EQ(t.ElapsedMs()[IndexOf("forward-backward")], -1.0);
}

TEST(TimersTest, StartingTwiceIsAProgrammingError) {
  Timers t(2, nullptr);
  t.Start("optimizer");
  EXPECT_DEATH(t.Start("optimizer"), "started twice");
  EXPECT_DEATH(t.Stop("backward-compute"), "not running");
  EXPECT_DEATH(t.Start("no-such-timer"), "no timer named");
}

RankTimings ThreeRanks() {
  RankTimings t;
  t.timer_ms.assign(3, std::vector<double>(kNumTimers, -1.0));
  t.timer_ms[0][IndexOf("forward-backward")] = 10.0;
  t.timer_ms[1][IndexOf("forward-backward")] = 12.5;
  t.timer_ms[2][IndexOf("forward-backward")] = 11.0;
  t.timer_ms[1][IndexOf("forward-recv")] = 3.25;  // Only rank 1 receives.
  t.step_ms = {20, 20, 20};
  t.busy_ms = {10, 30, 11};
  return t;
}

TEST(TimersTest, FormatsAsMegatron) {
  const RankTimings t = ThreeRanks();
  EXPECT_EQ(FormatTimers(t, TimingLogOption::kMinMax),
            "(min, max) time across ranks (ms):\n"
            "    forward-backward ...............................: (10.00, 12.50)\n"
            "    forward-recv ...................................: (3.25, 3.25)");
  EXPECT_EQ(FormatTimers(t, TimingLogOption::kMax),
            "max time across ranks (ms):\n"
            "    forward-backward ...............................: 12.50\n"
            "    forward-recv ...................................: 3.25");
  EXPECT_EQ(FormatTimers(t, TimingLogOption::kAll),
            "times across ranks (ms):\n"
            "  forward-backward:\n"
            "     rank  0: 10.00\n"
            "     rank  1: 12.50\n"
            "     rank  2: 11.00\n"
            "  forward-recv:\n"
            "     rank  1: 3.25");
  RankTimings none = t;
  none.timer_ms.assign(3, std::vector<double>(kNumTimers, -1.0));
  EXPECT_EQ(FormatTimers(none, TimingLogOption::kMinMax), "");
}

TEST(TimersTest, NamesTheStragglerOverTheMedian) {
  RankTimings t = ThreeRanks();
  int straggler = -2;
  // Median 11; rank 1 at 30 is 173% above it.
  EXPECT_EQ(FormatStragglers(t, 0.2, &straggler),
            "straggler report (busy ms per iteration, excluding time in communication): rank 0: "
            "10.0 | rank 1: 30.0 | rank 2: 11.0; rank 1 is a straggler: 173% above the median "
            "(--straggler_threshold=0.2)");
  EXPECT_EQ(straggler, 1);
  t.busy_ms = {10, 12, 11};  // 9% above the median: none.
  EXPECT_NE(FormatStragglers(t, 0.2, &straggler).find("no straggler"), std::string::npos);
  EXPECT_EQ(straggler, -1);
  t.busy_ms = {10, 10, 10, 21};  // Even count: median 10.
  EXPECT_NE(FormatStragglers(t, 1.0, &straggler).find("rank 3 is a straggler: 110%"),
            std::string::npos);
}

TEST(CallMonitorTest, CountsTheTimeOfOutermostCalls) {
  comm::CallMonitor m;
  EXPECT_EQ(m.Read().seconds_in_calls, 0.0);
  const auto before = std::chrono::steady_clock::now();
  m.Enter("AllReduce");
  m.Enter("Send");  // Nested: one call.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  m.Leave();
  EXPECT_GE(m.Read().seconds_in_calls, 0.03);  // The running call counts.
  m.Leave();
  const std::chrono::duration<double> call = std::chrono::steady_clock::now() - before;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // Outside calls: not counted.
  const comm::CallMonitor::Snapshot s = m.Read();
  EXPECT_EQ(s.calls, 1);
  EXPECT_FALSE(s.in_call);
  EXPECT_GE(s.seconds_in_calls, 0.03);
  EXPECT_LE(s.seconds_in_calls, call.count());
}

}  // namespace
}  // namespace train
}  // namespace mt
