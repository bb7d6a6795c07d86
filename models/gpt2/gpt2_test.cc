// Serial (TP = 1) tests of the GPT-2 model: loss and every gradient against a float64 reference
// (finite differences; tied and untied output layer), activation checkpointing, and bad configs.
#include "models/gpt2/gpt2.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>

#include "core/ops/testutil.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2_reference.h"
#include "models/testing/cuda_model_testutil.h"
#include "models/testing/model_testutil.h"

namespace mt {
namespace models {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::NumericalGradient;
using ::mt::testing::ToDoubles;

ModelConfig TinyConfig(nn::NormPosition norm) { return testing::TinyConfig(Family::kGpt2, norm); }

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

// The loss of config c's model and every gradient against the float64 reference.
void ExpectLossAndGradientsMatchReference(const ModelConfig& c) {
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
  const nn::StepContext sc = nn::StepContext::Train(&ec);
  auto loss = (*model)->ForwardBackward(sc, LanguageModelBatch(batch.t.view(), batch.l.view()),
                                        Backward::kYes);
  ASSERT_TRUE(loss.ok()) << loss.status();
  testing::ParamMap ref = testing::ToParamMap(store, c.vocab_size);
  EXPECT_NEAR(loss->total, testing::ReferenceGptLoss(c, ref, B, T, batch.tokens, batch.labels),
              1e-5);

  for (int i = 0; i < store.size(); ++i) {
    const std::string& name = store.spec(i).name;
    auto f = [&](const std::vector<double>& x) {
      testing::ParamMap q = ref;
      q[name] = x;
      return testing::ReferenceGptLoss(c, q, B, T, batch.tokens, batch.labels);
    };
    std::vector<double> numeric = NumericalGradient(f, ref[name], 1e-5);
    std::vector<double> got = ToDoubles(store.grad(i));
    if (name == "embedding.word.weight" || name == "output_layer.weight") {
      // The padded row is never used: its gradient is exactly zero.
      for (size_t j = numeric.size(); j < got.size(); ++j) EXPECT_EQ(got[j], 0.0);
      got.resize(numeric.size());
    }
    EXPECT_TRUE(AllClose(got, numeric, 2e-3, 2e-5)) << name;
  }
}

class GptGradientTest : public ::testing::TestWithParam<nn::NormPosition> {};

TEST_P(GptGradientTest, LossAndAllGradientsMatchFloat64Reference) {
  ExpectLossAndGradientsMatchReference(TinyConfig(GetParam()));
}

// An output layer of its own (Llama's untied lm_head): its gradient and the word embedding's
// (now from the input side only) against the reference.
TEST(GptModelTest, UntiedOutputLayerLossAndGradientsMatchFloat64Reference) {
  ModelConfig c = TinyConfig(nn::NormPosition::kPreNorm);
  c.untie_embeddings_and_output_weights = true;
  ExpectLossAndGradientsMatchReference(c);
}

INSTANTIATE_TEST_SUITE_P(Norms, GptGradientTest,
                         ::testing::Values(nn::NormPosition::kPreNorm,
                                           nn::NormPosition::kPostNorm));

// ---- Mixed precision: bf16/f16 compute with f32 master weights against the f32 model holding the
// same masters.

struct Outcome {
  double loss = 0;
  std::vector<std::vector<double>> grads;  // Per parameter, divided by the loss scale.
  std::vector<std::string> names;
};

Outcome RunPrecision(const ModelConfig& c, DType dtype, double loss_scale, const Batch& batch,
                     int B, int T) {
  Outcome out;
  nn::ParameterStore store(0, 1, dtype);
  auto model = GptModel::Create(c, &store);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return out;
  EXPECT_TRUE(store.Allocate(/*seed=*/42).ok());
  for (int i = 0; i < store.size(); ++i) {  // Non-trivial LayerNorm and bias masters.
    if (store.spec(i).init != nn::Init::kNormal) {
      Tensor r = ::mt::testing::RandomTensor(store.value(i).shape, DType::kF32, 7 + i, 0.5, 1.5);
      std::memcpy(store.value(i).data, r.data(), r.nbytes());
    }
  }
  ThreadPool pool(3);
  ExecContext ec;
  ec.pool = &pool;
  EXPECT_TRUE(store.RefreshComputeWeights(ec).ok());
  // Dropout on: the masks do not depend on the dtype.
  const nn::StepContext sc = nn::StepContext::Train(&ec, nullptr, 11, 2);
  auto loss = (*model)->ForwardBackward(sc, LanguageModelBatch(batch.t.view(), batch.l.view()),
                                        Backward::kYes, loss_scale);
  EXPECT_TRUE(loss.ok()) << loss.status();
  if (!loss.ok()) return out;
  EXPECT_EQ(batch.t.shape(), (Shape{B, T}));
  out.loss = loss->total;
  out.grads = testing::HostGrads(store, ec, loss_scale);
  for (int i = 0; i < store.size(); ++i) out.names.push_back(store.spec(i).name);
  return out;
}

using testing::PrecisionParam;
class GptMixedPrecisionTest : public ::testing::TestWithParam<PrecisionParam> {};

TEST_P(GptMixedPrecisionTest, LossAndGradientsTrackTheF32ModelWithinUnitRoundoff) {
  const auto [dtype, norm] = GetParam();
  ModelConfig c = TinyConfig(norm);
  c.hidden_size = 16;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  const int B = 3, T = 6;
  Batch batch = MakeBatch(B, T, static_cast<int>(c.vocab_size));
  const Outcome ref = RunPrecision(c, DType::kF32, 1.0, batch, B, T);
  // f16 with a loss scale (exact: a power of two), as f16 training runs.
  const double scale = dtype == DType::kF16 ? 1024.0 : 1.0;
  const Outcome got = RunPrecision(c, dtype, scale, batch, B, T);
  ASSERT_EQ(got.grads.size(), ref.grads.size());
  const double u = ::mt::testing::UnitRoundoff(dtype);
  // Each value on the way to the loss is rounded to the dtype a few dozen times (weights, every
  // op's output, the residual stream); the rounding errors are of random sign, so the relative
  // error of the loss and of each gradient tensor stays a modest multiple of u. The bounds below
  // are 16 u for the loss and 32 u for gradients (norm-wise per tensor), several times the largest
  // errors measured (bf16: 0.34 u and 6.4 u; f16: 0.73 u and 4.7 u).
  const double loss_err = std::fabs(got.loss - ref.loss) / std::fabs(ref.loss);
  double worst = 0;
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    const double e = testing::RelativeError(got.grads[i], ref.grads[i]);
    worst = std::max(worst, e);
    EXPECT_LE(e, 32 * u) << ref.names[i];
  }
  std::printf(
      "%s %s: relative loss error %.3g (%.2f u), worst relative gradient error %.3g "
      "(%.2f u)\n",
      std::string(DTypeName(dtype)).c_str(),
      norm == nn::NormPosition::kPreNorm ? "pre-norm" : "post-norm", loss_err, loss_err / u, worst,
      worst / u);
  EXPECT_LE(loss_err, 16 * u);
  // And the computation really ran in the lower precision: the results differ from f32 by more
  // than f32 rounding.
  EXPECT_GT(worst, 64 * ::mt::testing::UnitRoundoff(DType::kF32));
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, GptMixedPrecisionTest, testing::HalfPrecisionCases(),
                         testing::PrecisionCaseName);

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
    auto model = GptModel::Create(c, &store, {r == 0 ? nn::Recompute::kNo : nn::Recompute::kYes});
    ASSERT_TRUE(model.ok());
    ASSERT_TRUE(store.Allocate(3).ok());
    const nn::StepContext sc = nn::StepContext::Train(&ec, nullptr, 99, 5);
    auto loss = (*model)->ForwardBackward(sc, LanguageModelBatch(batch.t.view(), batch.l.view()),
                                          Backward::kNo);
    ASSERT_TRUE(loss.ok());
    held[r] = (*model)->stack().HeldActivationBytes();  // After a forward, before backward.
    auto loss2 = (*model)->ForwardBackward(sc, LanguageModelBatch(batch.t.view(), batch.l.view()),
                                           Backward::kYes);
    ASSERT_TRUE(loss2.ok());
    losses[r] = loss2->total;
    extra[r] = (*model)->stack().peak_backward_extra_bytes();
    const float* g = store.flat_grads().data_as<float>();
    grads[r].assign(g, g + store.NumLocalElements());
  }
  EXPECT_EQ(losses[0], losses[1]);
  ASSERT_EQ(grads[0].size(), grads[1].size());
  EXPECT_EQ(std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * sizeof(float)), 0);
  // Stored activations for 4 layers versus only the residual stream plus one recomputed layer.
  std::printf(
      "activation bytes held after forward: stored %lld, recompute %lld; "
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
