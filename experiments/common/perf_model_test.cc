#include "experiments/common/perf_model.h"

#include "gtest/gtest.h"
#include "models/flops.h"

namespace mt {
namespace experiments {
namespace perf {
namespace {

TEST(PerfModelTest, RingAllReduceByHand) {
  // 8 ranks, 50 MB, 8 us per step, 120 GB/s: 14 * 8 us + 1.75 * 50e6 / 120e9 = 112 us + 729.2 us.
  EXPECT_NEAR(RingAllReduceSeconds(50e6, 8, 8e-6, 120e9), 112e-6 + 729.1667e-6, 1e-9);
  EXPECT_NEAR(RingAllReduceSeconds(1e6, 2, 1e-6, 1e9), 2e-6 + 1e-3, 1e-12);
  EXPECT_EQ(RingAllReduceSeconds(1e9, 1, 1.0, 1.0), 0.0);
}

TEST(PerfModelTest, GemmEfficiencyByHand) {
  Hardware hw = Dgx2hV100();
  // 8192 x 384: 64 x 3 = 192 tiles on 80 SMs = 3 waves (240 slots): 0.8. K = 3072: 3072/3136.
  EXPECT_NEAR(WaveEfficiency(hw, 8192, 384, 1), 0.8, 1e-12);
  EXPECT_NEAR(GemmEfficiency(hw, 8192, 384, 3072, 1), 0.85 * 0.8 * 3072.0 / 3136.0, 1e-12);
  // 100 x 100 is one partial tile in one wave of 80.
  EXPECT_NEAR(WaveEfficiency(hw, 100, 100, 1), 1e4 / (80.0 * 128 * 128), 1e-12);
  const double s = GemmSeconds(hw, 8192, 384, 3072);
  EXPECT_NEAR(s, 2.0 * 8192 * 384 * 3072 / (130e12 * 0.85 * 0.8 * 3072 / 3136) + 5e-6, 1e-12);
  hw.sms = 0;
  EXPECT_EQ(WaveEfficiency(hw, 7, 7, 3), 1.0);
}

TEST(PerfModelTest, ModelFlopsIsThePapersFormula) {
  Workload w;
  w.hidden = 3072;
  w.heads = 32;
  w.layers = 72;
  w.vocab = 51200;
  w.seq = 1024;
  w.micro_batch = 8;
  w.tp = 8;
  w.dp = 64;
  const double f = models::ModelFlopsPerIteration(512, 1024, 72, 3072, 51200, false);
  EXPECT_NEAR(ModelFlopsPerGpu(w, 2.0), f / 2.0 / 512, 1e-6 * f / 1024);
}

// A machine with only GEMMs at a flat rate (no tiles, no overheads, free memory and links): the
// iteration is the layers' and logits' matrix-product FLOPs (with the recomputed forward) over the
// rate, so the efficiency of TP=2 against TP=1 is exactly 1, and with a finite link it is the
// hand-computed ratio.
TEST(PerfModelTest, EfficiencyByHand) {
  Hardware hw;
  hw.peak_flops = 1e12;
  hw.gemm_efficiency = 1;
  hw.sms = 0;
  hw.mem_bandwidth = 1e300;
  hw.gpus_per_node = 8;
  hw.intra_bus_bandwidth = 1e300;
  Software sw;
  sw.per_tensor_optimizer = false;
  sw.optimizer_bytes = {};
  sw.host_op = 0;
  Workload base;
  base.hidden = 64;
  base.heads = 4;
  base.layers = 2;
  base.vocab = 256;
  base.seq = 32;
  base.micro_batch = 2;
  const double n = 64, h = 64, s = 32, L = 2, V = 256;
  // Per layer forward: 24 n h^2 + 4 n s h; x4 with recompute; logits 3 x 2 n h V.
  const double flops = L * 4 * (24 * n * h * h + 4 * n * s * h) + 6 * n * h * V;
  EXPECT_NEAR(PredictIteration(base, hw, sw).total(), flops / 1e12, 1e-15);
  Workload tp2 = base;
  tp2.tp = 2;
  EXPECT_NEAR(Efficiency(tp2, base, hw, sw), 1.0, 1e-12);
  hw.intra_bus_bandwidth = 1e9;  // 8 all-reduces per layer... 6 per layer + 2 at the head.
  const double ar = 2.0 * 1 / 2 * n * h * 2 / 1e9;
  const double t2 = flops / 2 / 1e12 + (6 * L + 2) * ar;
  EXPECT_NEAR(Efficiency(tp2, base, hw, sw), (flops / 1e12) / (2 * t2), 1e-12);
}

}  // namespace
}  // namespace perf
}  // namespace experiments
}  // namespace mt
