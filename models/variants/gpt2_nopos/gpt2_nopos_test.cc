// The variant is registered, has exactly the position table fewer parameters than its base, and
// trains: with no position information, a causal model still learns a sequence it can only tell
// apart by content.
#include "gtest/gtest.h"
#include "models/count.h"
#include "models/registry.h"
#include "models/testing/model_testutil.h"

namespace mt {
namespace models {
namespace {

TEST(Gpt2NoPosTest, RegisteredWithoutPositionTable) {
  auto variant = FindModel("gpt2-tiny-nopos");
  auto base = FindModel("gpt2-tiny");
  ASSERT_TRUE(variant.ok()) << variant.status();
  ASSERT_TRUE(base.ok()) << base.status();
  EXPECT_FALSE(variant->config.position_embeddings);
  auto cv = CountParameters(variant->config, 1), cb = CountParameters(base->config, 1);
  ASSERT_TRUE(cv.ok() && cb.ok());
  EXPECT_EQ(cb->total - cv->total, base->config.max_position_embeddings * base->config.hidden_size);
}

TEST(Gpt2NoPosTest, LearnsWithoutPositions) {
  ModelConfig c = FindModel("gpt2-tiny-nopos")->config;
  c.num_layers = 1;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.vocab_size = 10;
  c.make_vocab_size_divisible_by = 1;
  const testing::Learning l = testing::TrainOnPattern(c);
  EXPECT_GT(l.first, 1.5);
  EXPECT_LT(l.last, 0.1);
}

}  // namespace
}  // namespace models
}  // namespace mt
