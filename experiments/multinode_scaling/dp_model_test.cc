#include "experiments/multinode_scaling/dp_model.h"

#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

TEST(DpModelTest, Buckets) {
  EXPECT_EQ(BucketElements(2500000, 1000000), (std::vector<int64_t>{1000000, 1000000, 500000}));
  EXPECT_EQ(BucketElements(2000000, 1000000), (std::vector<int64_t>{1000000, 1000000}));
  EXPECT_EQ(BucketElements(10, 1000000), (std::vector<int64_t>{10}));
  EXPECT_TRUE(BucketElements(0, 1000000).empty());
}

DpStepInputs Inputs(double bus_bandwidth) {
  DpStepInputs in;
  in.compute_s = 0.3;
  in.parameters = 2500000;  // Buckets of 4, 4 and 2 MB (f32).
  in.bucket_elements = 1000000;
  in.ranks = 2;
  in.alpha_s = 1e-3;
  in.bus_bandwidth = bus_bandwidth;
  return in;
}

TEST(DpModelTest, FastLinkHidesAllButTheLastBucket) {
  // By hand, 2 ranks (2 (n - 1) / n = 1): the buckets take 0.001 + 4e6 / 1e8 = 0.041 s, 0.041 s
  // and 0.021 s, 0.103 s in all. Forward 0.1 s, backward 0.2 s: the buckets are final at
  // 0.1 + 0.2 x (0.4, 0.8, 1.0) = 0.18, 0.26, 0.3 s; the link runs them 0.18-0.221, 0.26-0.301,
  // 0.301-0.322.
  const DpPrediction p = PredictDpStep(Inputs(1e8));
  EXPECT_NEAR(p.comm_s, 0.103, 1e-12);
  EXPECT_NEAR(p.after_s, 0.403, 1e-12);
  EXPECT_NEAR(p.overlapped_s, 0.322, 1e-12);
}

TEST(DpModelTest, SlowLinkQueuesTheBuckets) {
  // 10 MB/s: 0.401, 0.401 and 0.201 s. The first starts at 0.18 s and the others queue behind it:
  // 0.18 + 0.401 + 0.401 + 0.201 = 1.183 s, past backward's end at 0.3 s.
  const DpPrediction p = PredictDpStep(Inputs(1e7));
  EXPECT_NEAR(p.comm_s, 1.003, 1e-12);
  EXPECT_NEAR(p.after_s, 1.303, 1e-12);
  EXPECT_NEAR(p.overlapped_s, 1.183, 1e-12);
}

TEST(DpModelTest, OneRankHasNoCommunication) {
  DpStepInputs in = Inputs(1e8);
  in.ranks = 1;
  const DpPrediction p = PredictDpStep(in);
  EXPECT_EQ(p.comm_s, 0);
  EXPECT_NEAR(p.after_s, 0.3, 1e-12);
  EXPECT_NEAR(p.overlapped_s, 0.3, 1e-12);
}

}  // namespace
}  // namespace experiments
}  // namespace mt
