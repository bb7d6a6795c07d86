#include "experiments/table1_weak_scaling/measured.h"

#include <cmath>

#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

TEST(MeasuredTest, ParseOpTimes) {
  auto t = ParseOpTimes(
      "gemm_s: 0.925549\nattention_s: 0.017100\nlayernorm_s: 0.001617\nloss_s: 0.286168\n"
      "optimizer_s: 0.147649\ncopy_bytes_per_s: 1.52e+10\ngemm_s: 9\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_DOUBLE_EQ(t->gemm, 0.925549);  // The first copy's line.
  EXPECT_DOUBLE_EQ(t->attention, 0.0171);
  EXPECT_DOUBLE_EQ(t->layernorm, 0.001617);
  EXPECT_DOUBLE_EQ(t->loss, 0.286168);
  EXPECT_DOUBLE_EQ(t->optimizer, 0.147649);
  EXPECT_DOUBLE_EQ(t->copy_bandwidth, 1.52e10);
  EXPECT_FALSE(ParseOpTimes("gemm_s: 1\n").ok());
}

TEST(MeasuredTest, ParseStepProfile) {
  const auto rows = ParseStepProfile(
      "step time (best of 3): 0.675 s\n"
      "step breakdown by op class (rank 0's main thread sampled every 1 ms over 3 more steps):\n"
      "  GEMM             0.298 s   40.9%  74.6 GFLOP/s on the GEMM FLOPs\n"
      "  element-wise     0.047 s    6.4%\n"
      "  other            0.001 s    0.1%  most: foo 0.1%\n"
      "  with the GEMMs at the GEMM rate and the rest as sampled: 0.616 s per step\n"
      "  GEMM             9 s\n");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].first, "GEMM");
  EXPECT_DOUBLE_EQ(rows[0].second, 0.298);
  EXPECT_EQ(rows[1].first, "element-wise");
  EXPECT_DOUBLE_EQ(rows[1].second, 0.047);
  EXPECT_EQ(rows[2].first, "other");
  EXPECT_DOUBLE_EQ(rows[2].second, 0.001);
  EXPECT_TRUE(ParseStepProfile("step time (best of 3): 0.675 s\n").empty());
}

StepShape Tiny(int tp, int dp) {
  StepShape s;
  s.hidden = 4;
  s.heads = 2;
  s.layers = 1;
  s.seq = 2;
  s.micro_batch = 1;
  s.vocab = 8;
  s.params_per_rank = 2500;
  s.dp_bucket_elements = 1000;
  s.tp = tp;
  s.dp = dp;
  return s;
}

TEST(MeasuredTest, PredictStepTpByHand) {
  OpTimes ops{1, 2, 3, 4, 5, /*copy_bandwidth=*/1e9};
  const PredictedStep p = PredictStep(Tiny(2, 1), ops, /*alpha=*/1e-5, /*bus_bandwidth=*/1e9);
  EXPECT_EQ(p.ops.gemm, 1);
  EXPECT_EQ(p.ops.attention, 2);
  EXPECT_EQ(p.ops.layernorm, 3);
  EXPECT_EQ(p.ops.loss, 4);
  EXPECT_EQ(p.ops.optimizer, 5);
  // perf_model.cc's 2019 kernel list at T*B = 2 tokens, H = 4, TP = 2 (stream 8 elements, split
  // 4, 3-split 12, 4-split 16, scores 1 x 1 head x 2 x 2 = 4): forward 19 stream + 8 split + 2
  // 3-split + 4 4-split + 10.5 scores passes = 152 + 32 + 24 + 64 + 42 = 314 element-passes,
  // backward 19.2 + 8 + 1 + 4 + 9.5 passes = 153.6 + 32 + 12 + 64 + 38 = 299.6; 4 bytes each.
  EXPECT_NEAR(p.elementwise, 613.6 * 4 / 1e9, 1e-15);
  // Ring of 2 with 5 us per step: 6 activation all-reduces of 2 x 4 x 4 = 32 bytes (10 us + 32
  // ns each) and the loss's 8- and 16-byte ones.
  EXPECT_NEAR(p.tp_comm, 6 * (1e-5 + 32e-9) + (1e-5 + 8e-9) + (1e-5 + 16e-9), 1e-15);
  EXPECT_EQ(p.dp_comm, 0);
  EXPECT_NEAR(p.total(), 15 + 613.6 * 4 / 1e9 + 8.0216e-5, 1e-12);
}

TEST(MeasuredTest, PredictStepDpByHand) {
  OpTimes ops{1, 0, 0, 0, 0, 1e9};
  const PredictedStep p = PredictStep(Tiny(1, 2), ops, 1e-5, 1e9);
  EXPECT_EQ(p.tp_comm, 0);
  // 2500 parameters in buckets of 1000: 3 rings of 2 steps x 5 us, plus 2 x 1/2 x 10000 bytes at
  // 1 GB/s.
  EXPECT_NEAR(p.dp_comm, 3e-5 + 1e-5, 1e-15);
}

}  // namespace
}  // namespace experiments
}  // namespace mt
