// The parallel-block variant: registered with its own block code; the parameters it declares
// (one LayerNorm per block) and their count by hand; its loss against a float64 reference of
// y = x + attn(LN(x)) + mlp(LN(x)); gradients against finite differences; a short training run
// that learns; activation checkpointing bit-identical; and what it refuses.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "models/count.h"
#include "models/gpt2/gpt2_reference.h"
#include "models/registry.h"
#include "models/testing/model_testutil.h"
#include "models/testing/reference_transformer.h"

namespace mt {
namespace models {
namespace {

ModelConfig Small() {
  ModelConfig c = FindModel("gpt-parallel-tiny")->config;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.vocab_size = 11;
  c.make_vocab_size_divisible_by = 4;  // Padded to 12: a padded column exercises the mask.
  c.max_position_embeddings = 8;
  c.init_std = 0.2;
  c.hidden_dropout = c.attention_dropout = 0;
  return c;
}

// The float64 parallel blocks: x += attn(LN(x)) + mlp(LN(x)), one LayerNorm "ln" per block.
testing::Mat ParallelLayers(const ModelConfig& c, const testing::ParamMap& p, int B, int T,
                            testing::Mat x, const testing::Visibility& visible) {
  const int H = static_cast<int>(c.hidden_size), N = B * T;
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string pre = absl::StrCat("layers.", l, ".");
    const testing::Mat h = testing::LayerNorm(x, N, H, testing::Get(p, pre + "ln.weight"),
                                              testing::Get(p, pre + "ln.bias"), c.layernorm_eps);
    const testing::Mat a = testing::ReferenceAttention(c, p, pre, B, T, h, visible);
    const testing::Mat m = testing::ReferenceMlp(c, p, pre, N, h);
    for (int i = 0; i < N * H; ++i) x[i] += a[i] + m[i];
  }
  return x;
}

TEST(ParallelBlockTest, RegisteredWithOneNormPerBlock) {
  auto m = FindModel("gpt-parallel-1.2b");
  ASSERT_TRUE(m.ok()) << m.status();
  nn::ParameterStore store(0, 1);
  ASSERT_TRUE(CreateModel(m->config, &store).ok());
  EXPECT_TRUE(store.Find("layers.39.ln.weight").ok());
  EXPECT_FALSE(store.Find("layers.0.ln1.weight").ok());
  // GPT-2 1.2B's count (REFERENCE: V_pad h + s h + L (12 h^2 + 13 h) + 2 h) less one LayerNorm
  // (2 h) per layer.
  const int64_t h = 1536, L = 40, s = 1024, v = 50304;
  auto count = CountParameters(m->config, 1);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(count->total, v * h + s * h + L * (12 * h * h + 11 * h) + 2 * h);
}

TEST(ParallelBlockTest, LossMatchesFloat64Reference) {
  const ModelConfig c = Small();
  nn::ParameterStore store(0, 1);
  auto model = CreateModel(c, &store);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(store.Allocate(3).ok());
  const testing::LmBatch b = testing::MakeLmBatch(2, 7, c.vocab_size);
  ExecContext ec;
  const nn::StepContext sc = nn::StepContext::Train(&ec);
  auto loss = (*model)->ForwardBackward(sc, b.view(), Backward::kNo);
  ASSERT_TRUE(loss.ok()) << loss.status();
  const std::vector<int> tokens(b.tokens.data_as<int32_t>(), b.tokens.data_as<int32_t>() + 14);
  const std::vector<int> labels(b.labels.data_as<int32_t>(), b.labels.data_as<int32_t>() + 14);
  const double want = testing::ReferenceGptLoss(c, testing::ToParamMap(store, c.vocab_size), 2, 7,
                                                tokens, labels, ParallelLayers);
  EXPECT_NEAR(loss->total, want, 1e-5 * want);
}

TEST(ParallelBlockTest, GradientsMatchFiniteDifferences) {
  const testing::LmBatch batch = testing::MakeLmBatch(2, 7, 11);
  testing::ExpectGradientsMatchFiniteDifferences(Small(), batch.view());
}

TEST(ParallelBlockTest, Learns) {
  ModelConfig c = Small();
  c.make_vocab_size_divisible_by = 1;
  const testing::Learning l = testing::TrainOnPattern(c);
  EXPECT_GT(l.first, 1.5);
  EXPECT_LT(l.last, 0.1);
}

TEST(ParallelBlockTest, RecomputationGivesTheSameGradients) {
  ModelConfig c = Small();
  c.hidden_dropout = c.attention_dropout = 0.1f;
  const testing::LmBatch b = testing::MakeLmBatch(2, 7, c.vocab_size);
  std::vector<std::vector<float>> grads;
  for (nn::Recompute r : {nn::Recompute::kNo, nn::Recompute::kYes}) {
    nn::ParameterStore store(0, 1);
    auto model = CreateModel(c, &store, {r});
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_TRUE(store.Allocate(5).ok());
    ExecContext ec;
    const nn::StepContext sc = nn::StepContext::Train(&ec, nullptr, 9);
    ASSERT_TRUE((*model)->ForwardBackward(sc, b.view(), Backward::kYes).ok());
    const TensorView g = store.flat_grads();
    grads.emplace_back(g.data_as<float>(), g.data_as<float>() + g.numel());
  }
  EXPECT_EQ(grads[0], grads[1]);
}

TEST(ParallelBlockTest, RefusesPostNorm) {
  ModelConfig c = Small();
  c.norm = nn::NormPosition::kPostNorm;
  nn::ParameterStore store(0, 1);
  EXPECT_EQ(CreateModel(c, &store).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace models
}  // namespace mt
