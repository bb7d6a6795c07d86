#include "experiments/quickstart/char_lm.h"

#include <cmath>
#include <vector>

#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace quickstart {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::NumericalGradient;
using ::mt::testing::ToDoubles;

// The whole model in float64, written independently of the ops: parameters in the order of
// CharLm::parameters() (embed, w1, b1, gamma, beta, w2, b2).
double ReferenceLoss(const CharLmConfig& c, const std::vector<std::vector<double>>& p,
                     const std::vector<int>& ctx, const std::vector<int>& tgt) {
  const int K = c.context, C = c.embed, H = c.hidden, V = 256;
  const int B = static_cast<int>(tgt.size());
  double total = 0;
  for (int b = 0; b < B; ++b) {
    std::vector<double> x(K * C);
    for (int k = 0; k < K; ++k)
      for (int j = 0; j < C; ++j) x[k * C + j] = p[0][ctx[b * K + k] * C + j];
    std::vector<double> h(H);
    for (int o = 0; o < H; ++o) {
      double s = p[2][o];
      for (int i = 0; i < K * C; ++i) s += x[i] * p[1][i * H + o];
      h[o] = 0.5 * s * (1 + std::tanh(std::sqrt(2 / M_PI) * (s + 0.044715 * s * s * s)));
    }
    double mean = 0, var = 0;
    for (double v : h) mean += v;
    mean /= H;
    for (double v : h) var += (v - mean) * (v - mean);
    var /= H;
    const double rstd = 1 / std::sqrt(var + 1e-5);
    std::vector<double> n(H);
    for (int o = 0; o < H; ++o) n[o] = (h[o] - mean) * rstd * p[3][o] + p[4][o];
    std::vector<double> logits(V);
    double mx = -1e300;
    for (int v = 0; v < V; ++v) {
      double s = p[6][v];
      for (int o = 0; o < H; ++o) s += n[o] * p[5][o * V + v];
      logits[v] = s;
      mx = std::max(mx, s);
    }
    double z = 0;
    for (double l : logits) z += std::exp(l - mx);
    total += mx + std::log(z) - logits[tgt[b]];
  }
  return total / B;
}

TEST(CharLmTest, LossAndGradientsMatchFloat64Reference) {
  CharLmConfig config;
  config.context = 3;
  config.embed = 4;
  config.hidden = 8;
  config.batch = 5;
  auto model = CharLm::Create(config);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<Parameter>& params = (*model)->parameters();
  // Make LayerNorm and the biases non-trivial so their gradients are exercised.
  for (int i : {2, 3, 4, 6}) {
    Tensor r = ::mt::testing::RandomTensor(params[i].value.shape(), DType::kF32, 100 + i, -0.5, 1.5);
    ::mt::testing::WriteDoubles(ToDoubles(r.view()), params[i].value.view());
  }
  // Repeated ids in the batch exercise the scatter-add of the embedding gradient.
  const std::vector<int> ctx = {65, 66, 67, 66, 67, 68, 65, 65, 200, 10, 32, 66, 0, 255, 65};
  const std::vector<int> tgt = {68, 69, 66, 97, 255};
  Tensor contexts = Tensor::Host({5, 3}, DType::kI32), targets = Tensor::Host({5}, DType::kI32);
  for (int i = 0; i < 15; ++i) contexts.data_as<int32_t>()[i] = ctx[i];
  for (int i = 0; i < 5; ++i) targets.data_as<int32_t>()[i] = tgt[i];

  ThreadPool pool(2);
  ExecContext ec;
  ec.pool = &pool;
  auto loss = (*model)->ForwardBackward(ec, contexts.view(), targets.view(), true);
  ASSERT_TRUE(loss.ok()) << loss.status();

  std::vector<std::vector<double>> ref_params;
  for (const Parameter& p : params) ref_params.push_back(ToDoubles(p.value.view()));
  EXPECT_NEAR(*loss, ReferenceLoss(config, ref_params, ctx, tgt), 1e-5);

  for (size_t i = 0; i < params.size(); ++i) {
    auto f = [&](const std::vector<double>& x) {
      std::vector<std::vector<double>> q = ref_params;
      q[i] = x;
      return ReferenceLoss(config, q, ctx, tgt);
    };
    std::vector<double> numeric = NumericalGradient(f, ref_params[i], 1e-5);
    EXPECT_TRUE(AllClose(params[i].grad.view(), numeric, 1e-3, 2e-5)) << params[i].name;
  }
}

TEST(CharLmTest, TrainingLearnsAPeriodicText) {
  CharLmConfig config;
  config.context = 4;
  config.embed = 8;
  config.hidden = 32;
  config.batch = 16;
  config.lr = 1e-2f;
  auto model = CharLm::Create(config);
  ASSERT_TRUE(model.ok());
  const std::string text = "the quick brown fox jumps over the lazy dog. ";
  Tensor contexts = Tensor::Host({16, 4}, DType::kI32), targets = Tensor::Host({16}, DType::kI32);
  ExecContext ec;
  double first = 0, last = 0;
  for (int step = 1; step <= 300; ++step) {
    for (int b = 0; b < 16; ++b) {
      const int t = 4 + (step * 7 + b * 3) % (static_cast<int>(text.size()) * 3);
      for (int k = 0; k < 4; ++k) {
        contexts.data_as<int32_t>()[b * 4 + k] = text[(t - 4 + k) % text.size()];
      }
      targets.data_as<int32_t>()[b] = text[t % text.size()];
    }
    auto loss = (*model)->ForwardBackward(ec, contexts.view(), targets.view(), true);
    ASSERT_TRUE(loss.ok()) << loss.status();
    ASSERT_TRUE((*model)->AdamStep(ec, step).ok());
    if (step == 1) first = *loss;
    last = *loss;
  }
  EXPECT_GT(first, 5.0);  // About log(256) at initialisation.
  EXPECT_LT(last, 0.1);   // The text is deterministic given 4 bytes of context.
}

TEST(CharLmTest, BadConfigAndBatchesAreRejected) {
  CharLmConfig config;
  config.hidden = 0;
  EXPECT_EQ(CharLm::Create(config).status().code(), absl::StatusCode::kInvalidArgument);
  config.hidden = 8;
  config.batch = 2;
  auto model = CharLm::Create(config);
  ASSERT_TRUE(model.ok());
  Tensor contexts = Tensor::Zeros({3, config.context}, DType::kI32);
  Tensor targets = Tensor::Zeros({3}, DType::kI32);
  ExecContext ec;
  EXPECT_EQ((*model)->ForwardBackward(ec, contexts.view(), targets.view(), false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace quickstart
}  // namespace mt
