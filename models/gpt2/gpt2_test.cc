// Serial (TP = 1) tests of the GPT-2 model: loss and every gradient against a float64 reference
// (finite differences), activation checkpointing, and bad configs.
#include "models/gpt2/gpt2.h"

#include <cstring>

#include "core/ops/testutil.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2_reference.h"

namespace mt {
namespace models {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::NumericalGradient;
using ::mt::testing::ToDoubles;

ModelConfig TinyConfig(nn::NormPosition norm) {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.vocab_size = 11;
  c.make_vocab_size_divisible_by = 4;  // Padded to 12: one padded column exercises the mask.
  c.max_position_embeddings = 6;
  c.norm = norm;
  c.hidden_dropout = 0;
  c.attention_dropout = 0;
  c.init_std = 0.3;  // Large enough that attention is far from uniform.
  return c;
}

struct Batch {
  std::vector<int> tokens, labels;
  Tensor t, l;
};

Batch MakeBatch(int B, int T, int V) {
  Batch b;
  for (int i = 0; i < B * T; ++i) {
    b.tokens.push_back((i * 7 + 3) % V);
    b.labels.push_back(i % 5 == 4 ? -100 : (i * 5 + 1) % V);
  }
  b.t = Tensor::Host({B, T}, DType::kI32);
  b.l = Tensor::Host({B, T}, DType::kI32);
  for (int i = 0; i < B * T; ++i) {
    b.t.data_as<int32_t>()[i] = b.tokens[i];
    b.l.data_as<int32_t>()[i] = b.labels[i];
  }
  return b;
}

// Copies the store's values, unpadded to the real vocabulary, into a name -> doubles map.
testing::ParamMap ToParamMap(const nn::ParameterStore& store, int64_t vocab, int64_t hidden) {
  testing::ParamMap m;
  for (int i = 0; i < store.size(); ++i) {
    std::vector<double> v = ToDoubles(store.value(i));
    if (store.spec(i).name == "embedding.word.weight") v.resize(vocab * hidden);
    m[store.spec(i).name] = v;
  }
  return m;
}

class GptGradientTest : public ::testing::TestWithParam<nn::NormPosition> {};

TEST_P(GptGradientTest, LossAndAllGradientsMatchFloat64Reference) {
  const ModelConfig c = TinyConfig(GetParam());
  nn::ParameterStore store(0, 1);
  auto model = GptModel::Create(c, &store);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(store.Allocate(/*seed=*/42).ok());
  // Non-trivial LayerNorm and bias parameters.
  for (int i = 0; i < store.size(); ++i) {
    if (store.spec(i).init != nn::Init::kNormal) {
      Tensor r = ::mt::testing::RandomTensor(store.value(i).shape, DType::kF32, 7 + i, 0.5, 1.5);
      std::memcpy(store.value(i).data, r.data(), r.nbytes());
    }
  }
  const int B = 2, T = 5;
  Batch batch = MakeBatch(B, T, static_cast<int>(c.vocab_size));
  ThreadPool pool(2);
  ExecContext ec;
  ec.pool = &pool;
  nn::StepContext sc;
  sc.exec = &ec;
  auto loss = (*model)->ForwardBackward(sc, batch.t.view(), batch.l.view(), true);
  ASSERT_TRUE(loss.ok()) << loss.status();
  testing::ParamMap ref = ToParamMap(store, c.vocab_size, c.hidden_size);
  EXPECT_NEAR(*loss, testing::ReferenceGptLoss(c, ref, B, T, batch.tokens, batch.labels), 1e-5);

  for (int i = 0; i < store.size(); ++i) {
    const std::string& name = store.spec(i).name;
    auto f = [&](const std::vector<double>& x) {
      testing::ParamMap q = ref;
      q[name] = x;
      return testing::ReferenceGptLoss(c, q, B, T, batch.tokens, batch.labels);
    };
    std::vector<double> numeric = NumericalGradient(f, ref[name], 1e-5);
    std::vector<double> got = ToDoubles(store.grad(i));
    if (name == "embedding.word.weight") {
      // The padded row is never used: its gradient is exactly zero.
      for (size_t j = numeric.size(); j < got.size(); ++j) EXPECT_EQ(got[j], 0.0);
      got.resize(numeric.size());
    }
    EXPECT_TRUE(AllClose(got, numeric, 2e-3, 2e-5)) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Norms, GptGradientTest,
                         ::testing::Values(nn::NormPosition::kPreNorm,
                                           nn::NormPosition::kPostNorm));

TEST(GptModelTest, ActivationCheckpointingGivesBitIdenticalGradientsAndSavesMemory) {
  ModelConfig c = TinyConfig(nn::NormPosition::kPreNorm);
  c.num_layers = 4;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  const int B = 2, T = 6;
  Batch batch = MakeBatch(B, T, static_cast<int>(c.vocab_size));
  ExecContext ec;
  std::vector<float> grads[2];
  double losses[2];
  int64_t held[2], extra[2];
  for (int r = 0; r < 2; ++r) {
    nn::ParameterStore store(0, 1);
    auto model = GptModel::Create(c, &store, r == 0 ? nn::Recompute::kNo : nn::Recompute::kYes);
    ASSERT_TRUE(model.ok());
    ASSERT_TRUE(store.Allocate(3).ok());
    nn::StepContext sc;
    sc.exec = &ec;
    sc.dropout_seed = 99;
    sc.micro_step = 5;
    auto loss = (*model)->ForwardBackward(sc, batch.t.view(), batch.l.view(), false);
    ASSERT_TRUE(loss.ok());
    held[r] = (*model)->stack().HeldActivationBytes();  // After a forward, before backward.
    auto loss2 = (*model)->ForwardBackward(sc, batch.t.view(), batch.l.view(), true);
    ASSERT_TRUE(loss2.ok());
    losses[r] = *loss2;
    extra[r] = (*model)->stack().peak_backward_extra_bytes();
    const float* g = store.flat_grads().data_as<float>();
    grads[r].assign(g, g + store.NumLocalElements());
  }
  EXPECT_EQ(losses[0], losses[1]);
  ASSERT_EQ(grads[0].size(), grads[1].size());
  EXPECT_EQ(std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * sizeof(float)), 0);
  // Stored activations for 4 layers versus only the residual stream plus one recomputed layer.
  std::printf("activation bytes held after forward: stored %lld, recompute %lld; "
              "recompute transient during backward %lld\n",
              static_cast<long long>(held[0]), static_cast<long long>(held[1]),
              static_cast<long long>(extra[1]));
  EXPECT_LT(held[1] + extra[1], held[0]);
}

TEST(GptModelTest, BadConfigsAreRejected) {
  ModelConfig c = TinyConfig(nn::NormPosition::kPreNorm);
  c.hidden_size = 10;  // Not divisible by 4 heads.
  c.num_attention_heads = 4;
  nn::ParameterStore s1(0, 1);
  auto m1 = GptModel::Create(c, &s1);
  EXPECT_EQ(m1.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m1.status().message().find("not divisible by num_attention_heads"), std::string::npos);
  c = TinyConfig(nn::NormPosition::kPreNorm);  // 2 heads.
  nn::ParameterStore s4(0, 4);
  auto m4 = GptModel::Create(c, &s4);
  EXPECT_EQ(m4.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m4.status().message().find("tensor_model_parallel_size 4"), std::string::npos);
}

}  // namespace
}  // namespace models
}  // namespace mt
