// GPT-2 on a GPU against the same model on the CPU (skipped without a GPU): the CUDA store holds
// the CPU store's masters bit for bit; the loss and every gradient agree within the compute
// dtype's rounding (f32, bf16, and f16 with a loss scale), with dropout on, with and without
// activation checkpointing; a second step with device-resident inputs and re-zeroed gradients
// agrees too; Logits gathers into a host buffer. Everywhere (no GPU needed): a step whose
// ExecContext runs on another device than the store is refused with InvalidArgument.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2.h"
#include "models/testing/cuda_model_testutil.h"

namespace mt {
namespace models {
namespace {

using ::mt::models::testing::CpuAndGpuModel;
using ::mt::models::testing::GpuContext;
using ::mt::models::testing::GpuGradBound;
using ::mt::models::testing::MakeGpuContext;
using ::mt::models::testing::SmallGpuTestConfig;
using ::mt::models::testing::UploadBatch;
using ::mt::testing::ToDoubles;

// Padded to 208: padded columns exercise the mask.
ModelConfig SmallConfig() { return SmallGpuTestConfig(Family::kGpt2, 203); }

// Host i32 [B, T] tokens and labels (every seventh ignored), varied by `salt`.
struct Inputs {
  Tensor tokens, labels;
  Batch view() const { return LanguageModelBatch(tokens.view(), labels.view()); }
};

Inputs MakeInputs(int B, int T, int V, int salt) {
  Inputs b;
  b.tokens = Tensor::Host({B, T}, DType::kI32);
  b.labels = Tensor::Host({B, T}, DType::kI32);
  for (int i = 0; i < B * T; ++i) {
    b.tokens.data_as<int32_t>()[i] = (i * 37 + 11 * salt + 2) % V;
    b.labels.data_as<int32_t>()[i] = i % 7 == 3 ? -100 : (i * 53 + 5 * salt + 1) % V;
  }
  return b;
}

nn::StepContext Step(const ExecContext* ec, uint64_t micro_step) {
  return nn::StepContext::Train(ec, nullptr, 2024, micro_step, 5);
}

// The logits (eval: no dropout) of `tokens` gathered into a host buffer agree with the CPU
// model's within the gradient bound times the largest logit, and a device buffer receives the
// same values as the host one.
void ExpectLogitsMatch(CpuAndGpuModel& m, const Tensor& tokens, DType dtype,
                       const std::string& label) {
  nn::StepContext ce = Step(&m.cpu_exec(), 3), ge = Step(&m.gpu_exec(), 3);
  ce.mode = ge.mode = nn::Mode::kEval;
  const int64_t N = tokens.numel(), Vp = m.cpu().padded_vocab(), V = m.cpu().config().vocab_size;
  Tensor full_c = Tensor::Host({N, Vp}, DType::kF32);
  Tensor full_g = Tensor::Host({N, Vp}, DType::kF32);
  ASSERT_TRUE(m.cpu().Logits(ce, tokens.view(), full_c.view()).ok());
  const absl::Status s = m.gpu().Logits(ge, tokens.view(), full_g.view());
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<double> want = ToDoubles(full_c.view()), got = ToDoubles(full_g.view());
  double scale = 0;
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t v = 0; v < V; ++v) scale = std::max(scale, std::fabs(want[i * Vp + v]));
  }
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t v = 0; v < V; ++v) {  // Padded columns are unspecified.
      ASSERT_LE(std::fabs(got[i * Vp + v] - want[i * Vp + v]), GpuGradBound(dtype) * scale)
          << label << " logit [" << i << ", " << v << "]";
    }
  }
  absl::StatusOr<Tensor> full_dev = Alloc(m.gpu_exec(), {N, Vp}, DType::kF32);
  ASSERT_TRUE(full_dev.ok()) << full_dev.status();
  ASSERT_TRUE(m.gpu().Logits(ge, tokens.view(), full_dev->view()).ok());
  absl::StatusOr<Tensor> back = CopyToHost(m.gpu_exec(), full_dev->view());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ToDoubles(back->view()), got) << "host and device outputs of the same logits";
}

using Param = std::tuple<DType, nn::Recompute>;
class GptCudaTest : public ::testing::TestWithParam<Param> {};

TEST_P(GptCudaTest, LossAndGradientsMatchTheCpuModel) {
  absl::StatusOr<std::unique_ptr<GpuContext>> gpu = MakeGpuContext();
  if (!gpu.ok()) GTEST_SKIP() << gpu.status().message();
  const auto [dtype, recompute] = GetParam();
  const std::string label =
      absl::StrCat(DTypeName(dtype), recompute == nn::Recompute::kYes ? " recompute" : "");
  const ModelConfig c = SmallConfig();
  CpuAndGpuModel m(**gpu, c, {recompute}, dtype, /*seed=*/42, /*masters_seed=*/7);
  ASSERT_TRUE(m.ok());
  const int B = 3, T = 11, V = static_cast<int>(c.vocab_size);

  // Step 1: host inputs (as the data loaders give them).
  const Inputs b1 = MakeInputs(B, T, V, 1);
  ASSERT_TRUE(m.ExpectStepsMatch(Step(nullptr, 1), b1.view(), b1.view(), label + " step 1"));

  // Step 2: inputs already on the device, gradients zeroed, other dropout masks.
  const Inputs b2 = MakeInputs(B, T, V, 2);
  std::vector<Tensor> on_device;
  absl::StatusOr<Batch> d2 = UploadBatch(m.gpu_exec(), b2.view(), &on_device);
  ASSERT_TRUE(d2.ok()) << d2.status();
  ASSERT_TRUE(m.ZeroGrads());
  ASSERT_TRUE(m.ExpectStepsMatch(Step(nullptr, 2), b2.view(), *d2, label + " step 2"));

  ExpectLogitsMatch(m, b1.tokens, dtype, label);
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, GptCudaTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::Values(nn::Recompute::kNo, nn::Recompute::kYes)),
    [](const ::testing::TestParamInfo<Param>& info) {
      return std::string(DTypeName(std::get<0>(info.param))) +
             (std::get<1>(info.param) == nn::Recompute::kYes ? "_recompute" : "");
    });

TEST(GptDeviceTest, AStepOnAnotherDeviceThanTheStoreIsRefused) {
  const ModelConfig c = SmallConfig();
  const Inputs b = MakeInputs(2, 4, static_cast<int>(c.vocab_size), 0);
  // A GPU store (not allocated: the check comes first) driven by a CPU context.
  nn::ParameterStore gs(0, 1, DType::kF32, Device::Cuda(0));
  auto gm = GptModel::Create(c, &gs);
  ASSERT_TRUE(gm.ok());
  ExecContext cpu;
  auto r = (*gm)->ForwardBackward(Step(&cpu, 0), b.view(), Backward::kYes);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("cuda:0"), std::string::npos) << r.status();
  // A CPU store driven by a GPU context.
  nn::ParameterStore cs(0, 1);
  auto cm = GptModel::Create(c, &cs);
  ASSERT_TRUE(cm.ok());
  ASSERT_TRUE(cs.Allocate(1).ok());
  ExecContext gpu;
  gpu.device = Device::Cuda(0);
  r = (*cm)->ForwardBackward(Step(&gpu, 0), b.view(), Backward::kYes);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("parameter store"), std::string::npos) << r.status();
  // Inputs on a GPU for a CPU model.
  int32_t fake[8] = {};
  const TensorView on_gpu(fake, {2, 4}, DType::kI32, Device::Cuda(0));  // Never dereferenced.
  r = (*cm)->ForwardBackward(Step(&cpu, 0), LanguageModelBatch(on_gpu, b.labels.view()),
                             Backward::kYes);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tokens"), std::string::npos) << r.status();
  // The CPU model still works after the refusals.
  r = (*cm)->ForwardBackward(Step(&cpu, 0), b.view(), Backward::kYes);
  EXPECT_TRUE(r.ok()) << r.status();
}

}  // namespace
}  // namespace models
}  // namespace mt
