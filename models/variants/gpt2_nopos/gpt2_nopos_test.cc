// The variant is registered, has exactly the position table fewer parameters than its base, and
// trains: with no position information, a causal model still learns a sequence it can only tell
// apart by content.
#include "core/ops/cross_entropy.h"
#include "gtest/gtest.h"
#include "models/count.h"
#include "models/gpt2/gpt2.h"
#include "models/registry.h"
#include "core/ops/adam.h"

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
  EXPECT_EQ(cb->total - cv->total,
            base->config.max_position_embeddings * base->config.hidden_size);
}

TEST(Gpt2NoPosTest, LearnsWithoutPositions) {
  ModelConfig c = FindModel("gpt2-tiny-nopos")->config;
  c.num_layers = 1;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.vocab_size = 10;
  c.make_vocab_size_divisible_by = 1;
  c.hidden_dropout = c.attention_dropout = 0;
  nn::ParameterStore store(0, 1);
  auto model = GptModel::Create(c, &store);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(store.Allocate(11).ok());
  // Next token = (token + 3) mod 10: learnable from content alone.
  Tensor tokens = Tensor::Host({2, 8}, DType::kI32), labels = Tensor::Host({2, 8}, DType::kI32);
  for (int i = 0; i < 16; ++i) {
    tokens.data_as<int32_t>()[i] = (i * 7) % 10;
    labels.data_as<int32_t>()[i] = ((i * 7) % 10 + 3) % 10;
  }
  ExecContext ec;
  nn::StepContext sc;
  sc.exec = &ec;
  Tensor m = Tensor::Zeros({store.NumLocalElements()}, DType::kF32);
  Tensor v = Tensor::Zeros({store.NumLocalElements()}, DType::kF32);
  double first = 0, last = 0;
  for (int step = 1; step <= 150; ++step) {
    store.ZeroGrads();
    auto loss = (*model)->ForwardBackward(sc, LanguageModelBatch(tokens.view(), labels.view()), Backward::kYes);
    ASSERT_TRUE(loss.ok()) << loss.status();
    if (step == 1) first = loss->total;
    last = loss->total;
    ops::AdamArgs a;
    a.lr = 1e-2f;
    a.step = step;
    ASSERT_TRUE(ops::AdamUpdate(ec, store.flat_values(), store.flat_grads(), m.view(), v.view(), a).ok());
  }
  EXPECT_GT(first, 1.5);
  EXPECT_LT(last, 0.1);
}

}  // namespace
}  // namespace models
}  // namespace mt
