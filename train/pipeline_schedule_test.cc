// The pipeline schedules as pure functions: 1F1B and interleaved op orders by hand, every
// micro-batch's forward before its backward on every stage, no deadlock for many shapes, the
// simulated bubble against the theory ((P - 1) / (m + P - 1) for 1F1B, (P - 1) / (V m + P - 1)
// interleaved), the peak of micro-batches in flight against models/memory.h's count, and the
// argument errors.
#include "train/pipeline_schedule.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/memory.h"

namespace mt {
namespace train {
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

// With uniform stage times the simulated idle fraction of every stage is the theory's bubble, for
// any ratio of backward to forward time; no shape deadlocks.
// models::InFlightMicroBatches (describe's activation memory) is the peak of forwards run and not
// yet backward on a stage, walked over the schedule's ops.
TEST(PipelineScheduleTest, InFlightPeakMatchesTheMemoryModel) {
  for (int stages : {1, 2, 3, 4}) {
    for (int chunks : {1, 2, 3}) {
      if (chunks > 1 && stages < 2) continue;
      for (int m = stages; m <= 4 * stages; m += (chunks > 1 ? stages : 1)) {
        for (int stage = 0; stage < stages; ++stage) {
          auto ops = PipelineScheduleOps(stages, stage, chunks, m);
          ASSERT_TRUE(ops.ok()) << ops.status();
          int64_t now = 0, peak = 0;
          for (const PipelineOp& op : *ops) {
            now += op.kind == PipelineOp::Kind::kForward ? 1 : -1;
            peak = std::max(peak, now);
          }
          auto want = models::InFlightMicroBatches(stages, stage, chunks, m);
          ASSERT_TRUE(want.ok()) << want.status();
          EXPECT_EQ(peak, *want) << "P " << stages << " V " << chunks << " m " << m << " stage "
                                 << stage;
        }
      }
    }
  }
}

TEST(PipelineScheduleTest, SimulatedBubbleMatchesTheory) {
  for (int P : {2, 3, 4, 8}) {
    for (int m : {1, 2, 4, 8, 16, 32}) {
      for (double tb : {1.0, 2.0, 3.0}) {
        auto sim = SimulatePipeline(P, 1, m, 1.0, tb);
        ASSERT_TRUE(sim.ok()) << sim.status();
        const double theory = (P - 1.0) / (m + P - 1.0);
        EXPECT_NEAR(sim->makespan, (m + P - 1) * (1.0 + tb), 1e-9);
        for (int s = 0; s < P; ++s) {
          EXPECT_NEAR(sim->idle_fraction[s], theory, 1e-12) << P << " " << m << " " << s;
        }
      }
    }
  }
  for (int P : {2, 4}) {
    for (int V : {2, 4}) {
      for (int m : {P, 2 * P, 4 * P, 8 * P}) {
        // Each chunk's forward takes 1 / V of a stage's forward, its backward 2 / V.
        auto sim = SimulatePipeline(P, V, m, 1.0 / V, 2.0 / V);
        ASSERT_TRUE(sim.ok()) << sim.status();
        auto plain = SimulatePipeline(P, 1, m, 1.0, 2.0);
        ASSERT_TRUE(plain.ok());
        const double theory = (P - 1.0) / (V * m + P - 1.0);
        for (int s = 0; s < P; ++s) {
          EXPECT_NEAR(sim->idle_fraction[s], theory, 1e-12)
              << "P " << P << " V " << V << " m " << m << " stage " << s;
          EXPECT_LT(sim->idle_fraction[s], plain->idle_fraction[s]);
        }
      }
    }
  }
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
}  // namespace train
}  // namespace mt
