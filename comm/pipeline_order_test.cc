// The pipeline schedules' op orders as pure functions: 1F1B and interleaved by hand, every
// micro-batch's forward before its backward on every stage, the micro-batches in flight by hand,
// and the argument errors.
#include "comm/pipeline_order.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace comm {
namespace {

std::string Names(const std::vector<PipelineOp>& ops) {
  std::string out;
  for (const PipelineOp& op : ops) out += (out.empty() ? "" : " ") + OpName(op);
  return out;
}

TEST(PipelineScheduleTest, OneFOneBByHand) {
  // P = 4, m = 6: stage s warms up with 3 - s forwards.
  const char* want[] = {
      "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5",
      "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5",
      "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5",
      "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5",
  };
  for (int s = 0; s < 4; ++s) {
    auto ops = PipelineScheduleOps(4, s, 1, 6);
    ASSERT_TRUE(ops.ok()) << ops.status();
    EXPECT_EQ(Names(*ops), want[s]) << s;
  }
  // Fewer micro-batches than stages: all forwards, then all backwards.
  auto few = PipelineScheduleOps(4, 0, 1, 2);
  ASSERT_TRUE(few.ok());
  EXPECT_EQ(Names(*few), "F0 F1 B0 B1");
}

TEST(PipelineScheduleTest, InterleavedByHand) {
  // P = 2, V = 2, m = 4: groups of 2 micro-batches through chunk 0 then chunk 1; stage 0 warms
  // up with (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 forwards, stage 1 with 2.
  auto s0 = PipelineScheduleOps(2, 0, 2, 4);
  auto s1 = PipelineScheduleOps(2, 1, 2, 4);
  ASSERT_TRUE(s0.ok() && s1.ok());
  EXPECT_EQ(Names(*s0), "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3");
  EXPECT_EQ(Names(*s1), "F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3");
}

TEST(PipelineScheduleTest, EveryOpOnceForwardBeforeBackward) {
  for (int P : {1, 2, 3, 4}) {
    for (int V : {1, 2, 3}) {
      for (int m : {1, 2, 3, 4, 6, 8, 12}) {
        if (V > 1 && (P < 2 || m % P != 0)) continue;
        for (int s = 0; s < P; ++s) {
          auto ops = PipelineScheduleOps(P, s, V, m);
          ASSERT_TRUE(ops.ok()) << ops.status();
          ASSERT_EQ(ops->size(), static_cast<size_t>(2 * m * V));
          std::set<std::pair<int, int>> forwarded, backwarded;
          for (const PipelineOp& op : *ops) {
            const std::pair<int, int> key{op.micro, op.chunk};
            if (op.kind == PipelineOp::Kind::kForward) {
              EXPECT_TRUE(forwarded.insert(key).second) << OpName(op);
            } else {
              EXPECT_TRUE(forwarded.count(key)) << P << " " << V << " " << m << " " << OpName(op);
              EXPECT_TRUE(backwarded.insert(key).second) << OpName(op);
            }
          }
        }
      }
    }
  }
}

// The micro-batches in flight, by hand: 1F1B stage s of 4 holds 4 - s (or all m when fewer).
// Interleaved over 4 micro-batches (the orders of InterleavedByHand): on stage 0, chunk 0 runs F0
// F1 F2 F3 before B0 (4), chunk 1 holds at most F0.1 F1.1 (2), and both together 5 after F2; on
// stage 1, chunk 0 runs F0 F1 F2 before B0 (3, also the peak of both), chunk 1 holds 1.
TEST(PipelineInFlightTest, ByHand) {
  for (int s = 0; s < 4; ++s) {
    auto all = PipelineInFlightMicroBatches(4, s, 1, 0);
    auto two = PipelineInFlightMicroBatches(4, s, 1, 2);
    ASSERT_TRUE(all.ok() && two.ok()) << all.status() << two.status();
    EXPECT_EQ(all->peak, 4 - s);
    EXPECT_EQ(all->chunk_peaks, std::vector<int64_t>{4 - s});
    EXPECT_EQ(two->peak, std::min(4 - s, 2));
    EXPECT_EQ(two->chunk_peak_sum(), two->peak);
  }
  auto s0 = PipelineInFlightMicroBatches(2, 0, 2, 4);
  auto s1 = PipelineInFlightMicroBatches(2, 1, 2, 4);
  ASSERT_TRUE(s0.ok() && s1.ok());
  EXPECT_EQ(s0->peak, 5);
  EXPECT_EQ(s0->chunk_peaks, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(s0->chunk_peak_sum(), 6);
  EXPECT_EQ(s1->peak, 3);
  EXPECT_EQ(s1->chunk_peaks, (std::vector<int64_t>{3, 1}));
  // As many micro-batches as the schedule can use: the same; m = P: every forward first.
  auto saturated = PipelineInFlightMicroBatches(2, 0, 2, 0);
  ASSERT_TRUE(saturated.ok());
  EXPECT_EQ(saturated->peak, 5);
  EXPECT_EQ(saturated->chunk_peaks, (std::vector<int64_t>{4, 2}));
  // The last of 4 stages with 2 chunks: m = 4 runs all 8 forwards first (4 per chunk), m = 8 keeps
  // 5 on chunk 0 and 1 on chunk 1; unspecified m takes the larger of each.
  auto last4 = PipelineInFlightMicroBatches(4, 3, 2, 4);
  auto last8 = PipelineInFlightMicroBatches(4, 3, 2, 8);
  auto last_any = PipelineInFlightMicroBatches(4, 3, 2, 0);
  ASSERT_TRUE(last4.ok() && last8.ok() && last_any.ok());
  EXPECT_EQ(last4->chunk_peaks, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(last8->chunk_peaks, (std::vector<int64_t>{5, 1}));
  EXPECT_EQ(last_any->chunk_peaks, (std::vector<int64_t>{5, 4}));
  EXPECT_EQ(last_any->peak, 8);
  auto all_first = PipelineInFlightMicroBatches(2, 0, 2, 2);
  ASSERT_TRUE(all_first.ok());
  EXPECT_EQ(all_first->peak, 4);
  EXPECT_EQ(all_first->chunk_peaks, (std::vector<int64_t>{2, 2}));
  auto eight = PipelineInFlightMicroBatches(2, 1, 2, 8);
  ASSERT_TRUE(eight.ok());
  EXPECT_EQ(eight->peak, 3);
  EXPECT_EQ(PipelineInFlightMicroBatches(2, 0, 2, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PipelineInFlightMicroBatches(2, 2, 1, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PipelineScheduleTest, ArgumentErrors) {
  EXPECT_EQ(PipelineScheduleOps(0, 0, 1, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PipelineScheduleOps(2, 2, 1, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PipelineScheduleOps(2, 0, 1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  auto odd = PipelineScheduleOps(2, 0, 2, 3);
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("multiple of it"), std::string::npos) << odd.status();
  EXPECT_EQ(PipelineScheduleOps(1, 0, 2, 4).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace comm
}  // namespace mt
