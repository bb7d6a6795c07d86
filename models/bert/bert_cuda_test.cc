// BERT on a GPU against the same model on the CPU (skipped without a GPU), pre-norm and post-norm,
// f32/bf16/f16 compute, dropout on, a batch with padding: the pretraining losses (MLM + SOP) and
// every gradient, then a multiple-choice step (loss, gradients, predictions) on the same store,
// agree within the compute dtype's rounding; the second step takes device-resident inputs.
// Everywhere (no GPU needed): a step whose ExecContext runs on another device than the store is
// refused with InvalidArgument.
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"
#include "models/bert/bert.h"
#include "models/testing/cuda_model_testutil.h"

namespace mt {
namespace models {
namespace {

using ::mt::models::testing::CpuAndGpuModel;
using ::mt::models::testing::GpuContext;
using ::mt::models::testing::MakeGpuContext;
using ::mt::models::testing::SmallGpuTestConfig;
using ::mt::models::testing::UploadBatch;
using ::mt::testing::I32;

ModelConfig SmallConfig(nn::NormPosition norm) {
  ModelConfig c = SmallGpuTestConfig(Family::kBert, 101);  // Padded to 104.
  c.norm = norm;
  return c;
}

// `rows` sequences of length T; row r has r % 3 padded positions at its end; segment B starts at
// T / 2; about half the real positions (never [CLS]) carry an MLM label.
struct Inputs {
  Tensor tokens, types, mask, mlm, sop;
  Batch Pretraining() const {
    return BertBatch(tokens.view(), types.view(), mask.view(), mlm.view(), sop.view());
  }
  Batch Choices(const Tensor& labels) const {
    return MultipleChoiceBatch(tokens.view(), types.view(), mask.view(), labels.view());
  }
};

Inputs MakeInputs(int rows, int T, int V, int salt) {
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
  Inputs b;
  b.tokens = I32(tokens, {rows, T});
  b.types = I32(types, {rows, T});
  b.mask = I32(mask, {rows, T});
  b.mlm = I32(mlm, {rows, T});
  b.sop = I32(sop, {rows});
  return b;
}

nn::StepContext Step(const ExecContext* ec, uint64_t micro_step) {
  return nn::StepContext::Train(ec, nullptr, 77, micro_step, 3);
}

using Param = std::tuple<DType, nn::NormPosition>;
class BertCudaTest : public ::testing::TestWithParam<Param> {};

TEST_P(BertCudaTest, LossesGradientsAndPredictionsMatchTheCpuModel) {
  absl::StatusOr<std::unique_ptr<GpuContext>> gpu = MakeGpuContext();
  if (!gpu.ok()) GTEST_SKIP() << gpu.status().message();
  const auto [dtype, norm] = GetParam();
  const std::string label = absl::StrCat(
      DTypeName(dtype), norm == nn::NormPosition::kPreNorm ? " pre-norm" : " post-norm");
  const ModelConfig c = SmallConfig(norm);
  CpuAndGpuModel m(**gpu, c, {nn::Recompute::kNo, Heads::kAll}, dtype, /*seed=*/5,
                   /*masters_seed=*/13);
  ASSERT_TRUE(m.ok());

  // Pretraining, host inputs.
  const int B = 4, T = 12, V = static_cast<int>(c.vocab_size);
  const Inputs b = MakeInputs(B, T, V, 0);
  ASSERT_TRUE(m.ExpectStepsMatch(Step(nullptr, 1), b.Pretraining(), b.Pretraining(),
                                 label + " pretraining"));

  // Multiple choice (Q questions of C choices), inputs already on the device.
  const int Q = 3, C = 2;
  const Inputs mc = MakeInputs(Q * C, T, V, 1);
  const Tensor labels = I32({1, 0, 1}, {Q});
  std::vector<Tensor> on_device;
  absl::StatusOr<Batch> choices = UploadBatch(m.gpu_exec(), mc.Choices(labels), &on_device);
  ASSERT_TRUE(choices.ok()) << choices.status();
  ASSERT_TRUE(m.ZeroGrads());
  // multiple_choice_head.bias adds the same constant to every choice: its gradient is zero up to
  // rounding (bert.h), i.e. rounding noise on both devices; ExpectGradsClose measures it against
  // 1e-6 of the largest gradient, too tight for that noise, so it is left out.
  ASSERT_TRUE(m.ExpectMultipleChoiceMatches(Step(nullptr, 2), mc.Choices(labels), *choices,
                                            label + " multiple choice",
                                            {"multiple_choice_head.bias"}));

  // The masked choice (the MLM head scores each row's labelled tokens), host inputs.
  const Batch masked = MaskedChoiceBatch(mc.tokens.view(), mc.types.view(), mc.mask.view(),
                                         mc.mlm.view(), labels.view());
  ASSERT_TRUE(m.ZeroGrads());
  ASSERT_TRUE(
      m.ExpectMultipleChoiceMatches(Step(nullptr, 3), masked, masked, label + " masked choice"));
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
  const Inputs b = MakeInputs(2, 6, static_cast<int>(c.vocab_size), 0);
  nn::ParameterStore gs(0, 1, DType::kF32, Device::Cuda(0));  // Not allocated: checked first.
  auto gm = BertModel::Create(c, &gs, {nn::Recompute::kNo, Heads::kAll});
  ASSERT_TRUE(gm.ok());
  ExecContext cpu;
  auto r = (*gm)->ForwardBackward(Step(&cpu, 0), b.Pretraining(), Backward::kYes);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("cuda:0"), std::string::npos) << r.status();
  Tensor labels = I32({0}, {1});
  auto mr = (*gm)->MultipleChoice(Step(&cpu, 0), b.Choices(labels), Backward::kYes);
  EXPECT_EQ(mr.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mr.status().message().find("parameter store"), std::string::npos) << mr.status();

  // A CPU model refuses inputs on a GPU, and still works afterwards.
  nn::ParameterStore cs(0, 1);
  auto cm = BertModel::Create(c, &cs, {nn::Recompute::kNo, Heads::kAll});
  ASSERT_TRUE(cm.ok());
  ASSERT_TRUE(cs.Allocate(1).ok());
  int32_t fake[12] = {};
  const TensorView on_gpu(fake, {2, 6}, DType::kI32, Device::Cuda(0));  // Never dereferenced.
  r = (*cm)->ForwardBackward(
      Step(&cpu, 0), BertBatch(b.tokens.view(), on_gpu, b.mask.view(), b.mlm.view(), b.sop.view()),
      Backward::kYes);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("token_types"), std::string::npos) << r.status();
  r = (*cm)->ForwardBackward(Step(&cpu, 0), b.Pretraining(), Backward::kYes);
  EXPECT_TRUE(r.ok()) << r.status();
}

}  // namespace
}  // namespace models
}  // namespace mt
