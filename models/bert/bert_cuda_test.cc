// BERT on a GPU against the same model on the CPU (skipped without a GPU), pre-norm and post-norm,
// f32/bf16/f16 compute, dropout on, a batch with padding: the pretraining losses (MLM + SOP) and
// every gradient, then a multiple-choice step (loss, gradients, predictions) on the same store,
// agree within the compute dtype's rounding; the second step takes device-resident inputs.
// Everywhere (no GPU needed): a step whose ExecContext runs on another device than the store is
// refused with InvalidArgument.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/testutil.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "models/bert/bert.h"
#include "models/testing/cuda_model_testutil.h"

namespace mt {
namespace models {
namespace {

using ::mt::models::testing::ExpectGradsClose;
using ::mt::models::testing::GpuContext;
using ::mt::models::testing::HostValues;
using ::mt::models::testing::MakeGpuContext;
using ::mt::models::testing::NonTrivialMasters;
using ::mt::testing::UnitRoundoff;

ModelConfig SmallConfig(nn::NormPosition norm) {
  ModelConfig c;
  c.family = Family::kBert;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.vocab_size = 101;
  c.make_vocab_size_divisible_by = 8;  // Padded to 104.
  c.max_position_embeddings = 16;
  c.num_token_types = 2;
  c.norm = norm;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.init_std = 0.2;
  return c;
}

Tensor I32(const std::vector<int>& v, Shape shape) {
  Tensor t = Tensor::Host(std::move(shape), DType::kI32);
  for (size_t i = 0; i < v.size(); ++i) t.data_as<int32_t>()[i] = v[i];
  return t;
}

// `rows` sequences of length T; row r has r % 3 padded positions at its end; segment B starts at
// T / 2; about half the real positions (never [CLS]) carry an MLM label.
struct Batch {
  Tensor tokens, types, mask, mlm, sop;
};

Batch MakeBatch(int rows, int T, int V, int salt) {
  std::vector<int> tokens, types, mask, mlm, sop;
  for (int r = 0; r < rows; ++r) {
    const int real = T - r % 3;
    for (int t = 0; t < T; ++t) {
      const int i = r * T + t;
      tokens.push_back((i * 7 + 3 + salt) % V);
      types.push_back(t >= T / 2 ? 1 : 0);
      mask.push_back(t < real ? 1 : 0);
      mlm.push_back(t > 0 && t < real && (i + salt) % 2 == 1 ? (i * 5 + 1 + salt) % V : -100);
    }
    sop.push_back((r + salt) % 2);
  }
  Batch b;
  b.tokens = I32(tokens, {rows, T});
  b.types = I32(types, {rows, T});
  b.mask = I32(mask, {rows, T});
  b.mlm = I32(mlm, {rows, T});
  b.sop = I32(sop, {rows});
  return b;
}

nn::StepContext Step(const ExecContext* ec, uint64_t micro_step) {
  nn::StepContext sc;
  sc.exec = ec;
  sc.dropout_seed = 77;
  sc.micro_step = micro_step;
  sc.sample_offset = 3;
  return sc;
}

// As gpt2_cuda_test.cc: f32 differs only by the order of sums inside the ops; 16-bit compute
// within the mixed-precision tests' bounds against f32 (16 u for losses, 32 u for gradients).
double LossBound(DType dt) { return dt == DType::kF32 ? 1e-5 : 16 * UnitRoundoff(dt); }
double GradBound(DType dt) { return dt == DType::kF32 ? 1e-4 : 32 * UnitRoundoff(dt); }

void ExpectLossClose(double got, double want, DType dt, const std::string& what) {
  EXPECT_LE(std::fabs(got - want), LossBound(dt) * std::fabs(want))
      << what << ": gpu " << got << " cpu " << want;
}

using Param = std::tuple<DType, nn::NormPosition>;
class BertCudaTest : public ::testing::TestWithParam<Param> {};

TEST_P(BertCudaTest, LossesGradientsAndPredictionsMatchTheCpuModel) {
  absl::StatusOr<std::unique_ptr<GpuContext>> gpu = MakeGpuContext();
  if (!gpu.ok()) GTEST_SKIP() << gpu.status().message();
  const auto [dtype, norm] = GetParam();
  const ExecContext& gec = (*gpu)->exec;
  ThreadPool pool(3);
  ExecContext cec;
  cec.pool = &pool;
  const ModelConfig c = SmallConfig(norm);
  const double scale = dtype == DType::kF16 ? 1024.0 : 1.0;
  const std::string label = absl::StrCat(
      DTypeName(dtype), norm == nn::NormPosition::kPreNorm ? " pre-norm" : " post-norm");

  nn::ParameterStore cs(0, 1, dtype), gs(0, 1, dtype, Device::Cuda(0));
  auto cm = BertModel::Create(c, &cs, {nn::Recompute::kNo, Heads::kAll});
  auto gm = BertModel::Create(c, &gs, {nn::Recompute::kNo, Heads::kAll});
  ASSERT_TRUE(cm.ok() && gm.ok());
  ASSERT_TRUE(cs.Allocate(5).ok());
  absl::Status allocated = gs.Allocate(5);
  ASSERT_TRUE(allocated.ok()) << allocated;
  EXPECT_EQ(HostValues(gs, gec), HostValues(cs, cec)) << "the initial masters differ";
  const Tensor masters = NonTrivialMasters(cs, 13);
  ASSERT_TRUE(cs.CopyValuesFromHost(cec, masters.view()).ok());
  ASSERT_TRUE(gs.CopyValuesFromHost(gec, masters.view()).ok());

  // Pretraining, host inputs.
  const int B = 4, T = 12, V = static_cast<int>(c.vocab_size);
  Batch b = MakeBatch(B, T, V, 0);
  auto lc = (*cm)->ForwardBackward(Step(&cec, 1), BertBatch(b.tokens.view(), b.types.view(), b.mask.view(), b.mlm.view(), b.sop.view()), Backward::kYes, scale);
  auto lg = (*gm)->ForwardBackward(Step(&gec, 1), BertBatch(b.tokens.view(), b.types.view(), b.mask.view(), b.mlm.view(), b.sop.view()), Backward::kYes, scale);
  ASSERT_TRUE(lc.ok()) << lc.status();
  ASSERT_TRUE(lg.ok()) << lg.status();
  std::printf("%s pretraining: mlm cpu %.9g gpu %.9g, sop cpu %.9g gpu %.9g\n", label.c_str(),
              lc->parts[0], lg->parts[0], lc->parts[1], lg->parts[1]);
  ExpectLossClose(lg->parts[0], lc->parts[0], dtype, label + " mlm");
  ExpectLossClose(lg->parts[1], lc->parts[1], dtype, label + " sop");
  ExpectGradsClose(gs, gec, scale, cs, scale, GradBound(dtype), label + " pretraining");

  // Multiple choice (Q questions of C choices), inputs already on the device.
  const int Q = 3, C = 2;
  Batch m = MakeBatch(Q * C, T, V, 1);
  Tensor labels = I32({1, 0, 1}, {Q});
  absl::StatusOr<Tensor> tokens = CopyToDevice(gec, m.tokens.view());
  absl::StatusOr<Tensor> types = CopyToDevice(gec, m.types.view());
  absl::StatusOr<Tensor> mask = CopyToDevice(gec, m.mask.view());
  absl::StatusOr<Tensor> dlabels = CopyToDevice(gec, labels.view());
  ASSERT_TRUE(tokens.ok() && types.ok() && mask.ok() && dlabels.ok());
  cs.ZeroGrads();
  ASSERT_TRUE(gs.ZeroGrads(gec).ok());
  auto mc = (*cm)->MultipleChoice(Step(&cec, 2), MultipleChoiceBatch(m.tokens.view(), m.types.view(), m.mask.view(), labels.view()), Backward::kYes, scale);
  auto mg = (*gm)->MultipleChoice(Step(&gec, 2), MultipleChoiceBatch(tokens->view(), types->view(), mask->view(), dlabels->view()), Backward::kYes, scale);
  ASSERT_TRUE(mc.ok()) << mc.status();
  ASSERT_TRUE(mg.ok()) << mg.status();
  ExpectLossClose(mg->loss, mc->loss, dtype, label + " multiple choice");
  // 16-bit scores of close choices may rank differently; f32 ones may not.
  if (dtype == DType::kF32) {
    EXPECT_EQ(mg->predictions, mc->predictions) << label;
  }
  EXPECT_EQ(mg->predictions.size(), static_cast<size_t>(Q));
  // multiple_choice_head.bias adds the same constant to every choice: its gradient is zero up to
  // rounding (bert.h), i.e. rounding noise on both devices; ExpectGradsClose measures it against
  // 1e-6 of the largest gradient, too tight for that noise, so it is left out.
  ExpectGradsClose(gs, gec, scale, cs, scale, GradBound(dtype), label + " multiple choice",
                   {"multiple_choice_head.bias"});
}

INSTANTIATE_TEST_SUITE_P(
    DtypesAndNorms, BertCudaTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::Values(nn::NormPosition::kPreNorm, nn::NormPosition::kPostNorm)),
    [](const ::testing::TestParamInfo<Param>& info) {
      return std::string(DTypeName(std::get<0>(info.param))) +
             (std::get<1>(info.param) == nn::NormPosition::kPreNorm ? "_pre" : "_post");
    });

TEST(BertDeviceTest, AStepOnAnotherDeviceThanTheStoreIsRefused) {
  const ModelConfig c = SmallConfig(nn::NormPosition::kPreNorm);
  Batch b = MakeBatch(2, 6, static_cast<int>(c.vocab_size), 0);
  nn::ParameterStore gs(0, 1, DType::kF32, Device::Cuda(0));  // Not allocated: checked first.
  auto gm = BertModel::Create(c, &gs, {nn::Recompute::kNo, Heads::kAll});
  ASSERT_TRUE(gm.ok());
  ExecContext cpu;
  auto r = (*gm)->ForwardBackward(Step(&cpu, 0), BertBatch(b.tokens.view(), b.types.view(), b.mask.view(), b.mlm.view(), b.sop.view()), Backward::kYes);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("cuda:0"), std::string::npos) << r.status();
  Tensor labels = I32({0}, {1});
  auto mr = (*gm)->MultipleChoice(Step(&cpu, 0), MultipleChoiceBatch(b.tokens.view(), b.types.view(), b.mask.view(), labels.view()), Backward::kYes);
  EXPECT_EQ(mr.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mr.status().message().find("parameter store"), std::string::npos) << mr.status();

  // A CPU model refuses inputs on a GPU, and still works afterwards.
  nn::ParameterStore cs(0, 1);
  auto cm = BertModel::Create(c, &cs, {nn::Recompute::kNo, Heads::kAll});
  ASSERT_TRUE(cm.ok());
  ASSERT_TRUE(cs.Allocate(1).ok());
  int32_t fake[12] = {};
  const TensorView on_gpu(fake, {2, 6}, DType::kI32, Device::Cuda(0));  // Never dereferenced.
  r = (*cm)->ForwardBackward(Step(&cpu, 0), BertBatch(b.tokens.view(), on_gpu, b.mask.view(), b.mlm.view(), b.sop.view()), Backward::kYes);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("token_types"), std::string::npos) << r.status();
  r = (*cm)->ForwardBackward(Step(&cpu, 0), BertBatch(b.tokens.view(), b.types.view(), b.mask.view(), b.mlm.view(), b.sop.view()), Backward::kYes);
  EXPECT_TRUE(r.ok()) << r.status();
}

}  // namespace
}  // namespace models
}  // namespace mt
