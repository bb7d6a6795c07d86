// The modern-decoder variant: registered with its own code; the parameters it declares (RMSNorm
// weights, SwiGLU projections, no learned positions, no attention biases) and their count by
// hand; FLOPs counted from its own layer shape; gradients against finite differences; a short
// training run that learns; and what it refuses.
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "models/count.h"
#include "models/flops.h"
#include "models/registry.h"
#include "models/testing/model_testutil.h"

namespace mt {
namespace models {
namespace {

ModelConfig Small() {
  ModelConfig c = FindModel("modern-decoder-tiny")->config;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.ffn_hidden_size = 24;
  c.vocab_size = 11;
  c.make_vocab_size_divisible_by = 1;
  c.max_position_embeddings = 8;
  c.init_std = 0.2;
  return c;
}

TEST(ModernDecoderTest, RegisteredWithItsOwnParameters) {
  auto m = FindModel("modern-decoder-124m");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->config.ArchitectureName(), "modern-decoder");
  nn::ParameterStore store(0, 1);
  auto model = CreateModel(m->config, &store);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(store.Find("layers.0.ln1.weight").ok());
  EXPECT_TRUE(store.Find("layers.0.mlp.gate.weight").ok());
  EXPECT_TRUE(store.Find("layers.11.mlp.down.weight").ok());
  EXPECT_TRUE(store.Find("final_norm.weight").ok());
  for (const char* absent :
       {"embedding.position.weight", "layers.0.ln1.bias", "layers.0.attention.qkv.bias",
        "layers.0.attention.proj.bias", "final_layernorm.weight"}) {
    EXPECT_FALSE(store.Find(absent).ok()) << absent;
  }
  // V_pad h (tied embedding) + L (4 h^2 + 3 h f + 2 h) + h, V_pad = 50304.
  const int64_t h = 768, f = 2048, L = 12, v = 50304;
  auto count = CountParameters(m->config, 1);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(count->total, v * h + L * (4 * h * h + 3 * h * f + 2 * h) + h);
  // FLOPs count the SwiGLU layer's own weights: 4 h^2 + 3 h f per layer.
  EXPECT_DOUBLE_EQ((*model)->TrainingFlops(8, 1024, 8 * 1024),
                   DecoderFlops(8, 1024, L, h, v, 4.0 * h * h + 3.0 * h * f, false));
}

TEST(ModernDecoderTest, GroupedQueryAttentionConfigIsRegistered) {
  auto m = FindModel("modern-decoder-gqa-124m");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->config.ArchitectureName(), "modern-decoder");
  EXPECT_EQ(m->config.query_groups(), 4);
  nn::ParameterStore store(0, 1);
  auto model = CreateModel(m->config, &store);
  ASSERT_TRUE(model.ok()) << model.status();
  // The fused QKV projection: 12 query heads and 4 key and 4 value heads of 64 (h + 2 g d = 1280
  // columns instead of 3 h = 2304).
  auto qkv = store.Find("layers.0.attention.qkv.weight");
  ASSERT_TRUE(qkv.ok());
  EXPECT_EQ(NumElements(store.spec(*qkv).global_shape), 768 * 1280);
  // V_pad h + L (h (h + 2 g d) + h^2 + 3 h f + 2 h) + h: the K/V projections are 3 x smaller.
  const int64_t h = 768, kv = 4 * 64, f = 2048, L = 12, v = 50304;
  auto count = CountParameters(m->config, 1);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(count->total, v * h + L * (h * (h + 2 * kv) + h * h + 3 * h * f + 2 * h) + h);
  // FLOPs count the smaller projections (the attention scores cost as before).
  EXPECT_DOUBLE_EQ((*model)->TrainingFlops(8, 1024, 8 * 1024),
                   DecoderFlops(8, 1024, L, h, v, 2.0 * h * h + 2.0 * h * kv + 3.0 * h * f, false));
  // TP 4 splits the 4 groups; TP 8 cannot.
  EXPECT_TRUE(CountParameters(m->config, 4).ok());
  EXPECT_EQ(CountParameters(m->config, 8).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModernDecoderTest, GroupedQueryAttentionGradientsMatchFiniteDifferences) {
  ModelConfig c = Small();
  c.group_query_attention = true;
  c.num_query_groups = 1;  // Multi-query: both heads read one key/value head.
  const testing::LmBatch batch = testing::MakeLmBatch(2, 7, 11);
  testing::ExpectGradientsMatchFiniteDifferences(c, batch.view());
}

TEST(ModernDecoderTest, GradientsMatchFiniteDifferences) {
  const testing::LmBatch batch = testing::MakeLmBatch(2, 7, 11);
  testing::ExpectGradientsMatchFiniteDifferences(Small(), batch.view());
}

TEST(ModernDecoderTest, Learns) {
  const testing::Learning l = testing::TrainOnPattern(Small());
  EXPECT_GT(l.first, 1.5);
  EXPECT_LT(l.last, 0.1);
}

TEST(ModernDecoderTest, RefusesWhatItCannotBe) {
  nn::ParameterStore store(0, 1);
  ModelConfig c = Small();
  c.position_embeddings = true;
  EXPECT_EQ(CreateModel(c, &store).status().code(), absl::StatusCode::kInvalidArgument);
  c = Small();
  c.hidden_size = 18;  // Head dim 9: rotary embeddings need it even.
  nn::ParameterStore store2(0, 1);
  const absl::Status s = CreateModel(c, &store2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("even"), std::string::npos) << s;
  // A rope_theta of a converted checkpoint is kept here (grouped-query config: another base),
  // and refused by an architecture without rotary embeddings rather than dropped.
  c = Small();
  c.rotary_base = 500000.0;
  nn::ParameterStore store3(0, 1);
  EXPECT_TRUE(CreateModel(c, &store3).ok());
  c.architecture = "gpt2";
  c.position_embeddings = true;
  nn::ParameterStore store4(0, 1);
  const absl::Status no_rope = CreateModel(c, &store4).status();
  EXPECT_EQ(no_rope.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_rope.message().find("has no rotary position embeddings"), std::string::npos)
      << no_rope;
}

}  // namespace
}  // namespace models
}  // namespace mt
