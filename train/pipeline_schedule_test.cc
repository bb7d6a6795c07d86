// The pipeline simulator: with uniform stage times the simulated idle fraction of every stage is
// the theory's bubble ((P - 1) / (m + P - 1) for 1F1B, (P - 1) / (V m + P - 1) interleaved), for
// any ratio of backward to forward time, and no shape deadlocks. (The op orders themselves:
// comm/pipeline_order_test.cc.)
#include "train/pipeline_schedule.h"

#include "gtest/gtest.h"

namespace mt {
namespace train {
namespace {

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

}  // namespace
}  // namespace train
}  // namespace mt
