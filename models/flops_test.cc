#include "models/flops.h"

#include <cmath>

#include "gtest/gtest.h"

namespace mt {
namespace models {
namespace {

// The paper's 8.3B config on 512 GPUs: 15.1 PFLOP/s is 76% of 512 x 39 TFLOP/s; check the formula
// against a hand expansion instead of that (time-dependent) figure.
TEST(FlopsTest, MatchesHandExpansion) {
  const double B = 512, s = 1024, L = 72, h = 3072, V = 51200;
  const double expect = 72 * B * s * L * h * h + 72 * B * s * L * h * h * s / (12 * h) +
                        72 * B * s * L * h * h * V / (12 * L * h);
  EXPECT_NEAR(ModelFlopsPerIteration(512, 1024, 72, 3072, 51200, false), expect, 1e-9 * expect);
  // Dominant term 72 B s L h^2 = 2.56e17 FLOPs; the total is within 15% above it.
  const double f = ModelFlopsPerIteration(512, 1024, 72, 3072, 51200, false);
  EXPECT_GT(f, 72 * B * s * L * h * h);
  EXPECT_LT(f, 1.15 * 72 * B * s * L * h * h);
  // Recompute: 96 / 72 = 4/3 more on the dominant term.
  EXPECT_NEAR(
      ModelFlopsPerIteration(1, 1024, 40, 1536, 51200, true),
      96.0 * 1024 * 40 * 1536.0 * 1536 * (1 + 1024 / (6.0 * 1536) + 51200 / (16.0 * 40 * 1536)),
      1.0);
}

// BERT: the layers as GPT's formula without its logit term; the heads counted weight by weight
// (6 FLOPs per weight per row), the MLM head only at the masked positions.
TEST(FlopsTest, BertCountsTheHeadsAtMaskedPositions) {
  const double B = 8, s = 512, L = 24, h = 1024, V = 30592, m = 614;  // 15% of 4096 tokens.
  const double kW = StandardLayerWeights(1024, 4096);
  const double layers = 72 * B * s * L * h * h * (1 + s / (12 * h));
  const double mlm = 6 * m * (h * h) + 6 * m * (h * V);  // Transform + tied logits.
  const double pooler_sop = 6 * B * (h * h) + 6 * B * (h * 2);
  const double expect = layers + mlm + pooler_sop;
  EXPECT_NEAR(BertModelFlops(8, 512, static_cast<int64_t>(m), 24, 1024, 30592, kW, false), expect,
              1e-9 * expect);
  // With every position scored and no pooler/SOP/transform, it would be GPT's count: the
  // difference is exactly those terms.
  const double gpt = ModelFlopsPerIteration(8, 512, 24, 1024, 30592, false);
  EXPECT_NEAR(BertModelFlops(8, 512, 8 * 512, 24, 1024, 30592, kW, false) - gpt,
              6 * B * s * h * h + pooler_sop, 1e-9 * gpt);
  // Recompute: 4/3 more on the layers only (the heads are not recomputed).
  EXPECT_NEAR(BertModelFlops(8, 512, static_cast<int64_t>(m), 24, 1024, 30592, kW, true),
              96 * B * s * L * h * h * (1 + s / (6 * h)) + mlm + pooler_sop, 1e-9 * expect);
}

// A layer with other matrix shapes (a SwiGLU MLP of width f: 3 h f weights) counts 6 FLOPs per
// weight per token (8 with recomputation), the attention scores and logits as before.
TEST(FlopsTest, OtherLayerShapesCountTheirWeights) {
  const double B = 4, s = 256, L = 6, h = 512, V = 50304, f = 1376;
  const double W = 4 * h * h + 3 * h * f;
  EXPECT_NEAR(DecoderFlops(4, 256, 6, 512, 50304, W, false),
              6 * B * s * L * W + 6 * B * s * s * L * h + 6 * B * s * h * V, 1.0);
  EXPECT_NEAR(DecoderFlops(4, 256, 6, 512, 50304, W, true),
              8 * B * s * L * W + 16 * B * s * s * L * h + 6 * B * s * h * V, 1.0);
  // With W = 12 h^2 it is the paper's formula.
  EXPECT_NEAR(DecoderFlops(4, 256, 6, 512, 50304, 12 * h * h, false),
              ModelFlopsPerIteration(4, 256, 6, 512, 50304, false), 1.0);
}

}  // namespace
}  // namespace models
}  // namespace mt
