// GPT-2 on a GPU against the same model on the CPU (skipped without a GPU): the CUDA store holds
// the CPU store's masters bit for bit; the loss and every gradient agree within the compute
// dtype's rounding (f32, bf16, and f16 with a loss scale), with dropout on, with and without
// activation checkpointing; a second step with device-resident inputs and re-zeroed gradients
// agrees too; Logits gathers into a host buffer. Everywhere (no GPU needed): a step whose
// ExecContext runs on another device than the store is refused with InvalidArgument.
#include <algorithm>
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
#include "models/gpt2/gpt2.h"
#include "models/testing/cuda_model_testutil.h"

namespace mt {
namespace models {
namespace {

using ::mt::models::testing::ExpectGradsClose;
using ::mt::models::testing::GpuContext;
using ::mt::models::testing::HostValues;
using ::mt::models::testing::MakeGpuContext;
using ::mt::models::testing::NonTrivialMasters;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;

ModelConfig SmallConfig() {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.vocab_size = 203;
  c.make_vocab_size_divisible_by = 8;  // Padded to 208: padded columns exercise the mask.
  c.max_position_embeddings = 16;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.init_std = 0.2;
  return c;
}

struct Batch {
  Tensor tokens, labels;  // Host, i32 [B, T].
};

Batch MakeBatch(int B, int T, int V, int salt) {
  Batch b;
  b.tokens = Tensor::Host({B, T}, DType::kI32);
  b.labels = Tensor::Host({B, T}, DType::kI32);
  for (int i = 0; i < B * T; ++i) {
    b.tokens.data_as<int32_t>()[i] = (i * 37 + 11 * salt + 2) % V;
    b.labels.data_as<int32_t>()[i] = i % 7 == 3 ? -100 : (i * 53 + 5 * salt + 1) % V;
  }
  return b;
}

nn::StepContext Step(const ExecContext* ec, uint64_t micro_step) {
  nn::StepContext sc;
  sc.exec = ec;
  sc.dropout_seed = 2024;
  sc.micro_step = micro_step;
  sc.sample_offset = 5;
  return sc;
}

// The loss bound relative to the loss, and the norm-wise gradient bound per tensor: f32 differs
// only by the order of the sums inside the ops (cuBLAS vs Eigen, block reductions); 16-bit
// compute by which intermediate results round up or down, which the mixed-precision tests bound
// by 16 u (loss) and 32 u (gradients) against f32 (gpt2_test.cc) -- the same bounds hold between
// two 16-bit runs whose errors are each well inside them.
double LossBound(DType dt) { return dt == DType::kF32 ? 1e-5 : 16 * UnitRoundoff(dt); }
double GradBound(DType dt) { return dt == DType::kF32 ? 1e-4 : 32 * UnitRoundoff(dt); }

using Param = std::tuple<DType, nn::Recompute>;
class GptCudaTest : public ::testing::TestWithParam<Param> {};

TEST_P(GptCudaTest, LossAndGradientsMatchTheCpuModel) {
  absl::StatusOr<std::unique_ptr<GpuContext>> gpu = MakeGpuContext();
  if (!gpu.ok()) GTEST_SKIP() << gpu.status().message();
  const auto [dtype, recompute] = GetParam();
  const ExecContext& gec = (*gpu)->exec;
  ThreadPool pool(3);
  ExecContext cec;
  cec.pool = &pool;
  const ModelConfig c = SmallConfig();
  const double scale = dtype == DType::kF16 ? 1024.0 : 1.0;  // As f16 training runs.
  const std::string label =
      absl::StrCat(DTypeName(dtype), recompute == nn::Recompute::kYes ? " recompute" : "");

  nn::ParameterStore cs(0, 1, dtype), gs(0, 1, dtype, Device::Cuda(0));
  auto cm = GptModel::Create(c, &cs, {recompute});
  auto gm = GptModel::Create(c, &gs, {recompute});
  ASSERT_TRUE(cm.ok() && gm.ok());
  ASSERT_TRUE(cs.Allocate(42).ok());
  absl::Status allocated = gs.Allocate(42);
  ASSERT_TRUE(allocated.ok()) << allocated;
  EXPECT_EQ(HostValues(gs, gec), HostValues(cs, cec)) << "the initial masters differ";
  // Non-trivial LayerNorm and bias masters, loaded into both (compute copies refreshed).
  const Tensor masters = NonTrivialMasters(cs, 7);
  ASSERT_TRUE(cs.CopyValuesFromHost(cec, masters.view()).ok());
  ASSERT_TRUE(gs.CopyValuesFromHost(gec, masters.view()).ok());

  // Step 1: host inputs (as the data loaders give them).
  const int B = 3, T = 11, V = static_cast<int>(c.vocab_size);
  Batch b1 = MakeBatch(B, T, V, 1);
  auto lc = (*cm)->ForwardBackward(Step(&cec, 1), LanguageModelBatch(b1.tokens.view(), b1.labels.view()), Backward::kYes, scale);
  auto lg = (*gm)->ForwardBackward(Step(&gec, 1), LanguageModelBatch(b1.tokens.view(), b1.labels.view()), Backward::kYes, scale);
  ASSERT_TRUE(lc.ok()) << lc.status();
  ASSERT_TRUE(lg.ok()) << lg.status();
  std::printf("%s step 1: loss cpu %.9g gpu %.9g\n", label.c_str(), lc->total, lg->total);
  EXPECT_LE(std::fabs(lg->total - lc->total), LossBound(dtype) * std::fabs(lc->total)) << label;
  ExpectGradsClose(gs, gec, scale, cs, scale, GradBound(dtype), label + " step 1");

  // Step 2: inputs already on the device, gradients zeroed, other dropout masks.
  Batch b2 = MakeBatch(B, T, V, 2);
  absl::StatusOr<Tensor> tokens = CopyToDevice(gec, b2.tokens.view());
  absl::StatusOr<Tensor> labels = CopyToDevice(gec, b2.labels.view());
  ASSERT_TRUE(tokens.ok() && labels.ok());
  cs.ZeroGrads();
  ASSERT_TRUE(gs.ZeroGrads(gec).ok());
  lc = (*cm)->ForwardBackward(Step(&cec, 2), LanguageModelBatch(b2.tokens.view(), b2.labels.view()), Backward::kYes, scale);
  lg = (*gm)->ForwardBackward(Step(&gec, 2), LanguageModelBatch(tokens->view(), labels->view()), Backward::kYes, scale);
  ASSERT_TRUE(lc.ok()) << lc.status();
  ASSERT_TRUE(lg.ok()) << lg.status();
  EXPECT_LE(std::fabs(lg->total - lc->total), LossBound(dtype) * std::fabs(lc->total)) << label;
  ExpectGradsClose(gs, gec, scale, cs, scale, GradBound(dtype), label + " step 2");

  // Logits (eval: no dropout) gathered into a host buffer and into a device buffer.
  nn::StepContext ce = Step(&cec, 3), ge = Step(&gec, 3);
  ce.mode = ge.mode = nn::Mode::kEval;
  const int64_t Vp = (*cm)->padded_vocab();
  Tensor full_c = Tensor::Host({B * T, Vp}, DType::kF32);
  Tensor full_g = Tensor::Host({B * T, Vp}, DType::kF32);
  ASSERT_TRUE((*cm)->Logits(ce, b1.tokens.view(), full_c.view()).ok());
  absl::Status s = (*gm)->Logits(ge, b1.tokens.view(), full_g.view());
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<double> want = ToDoubles(full_c.view()), got = ToDoubles(full_g.view());
  double scale_logits = 0;
  for (int64_t i = 0; i < B * T; ++i) {
    for (int64_t v = 0; v < c.vocab_size; ++v) {
      scale_logits = std::max(scale_logits, std::fabs(want[i * Vp + v]));
    }
  }
  for (int64_t i = 0; i < B * T; ++i) {
    for (int64_t v = 0; v < c.vocab_size; ++v) {  // Padded columns are unspecified.
      ASSERT_LE(std::fabs(got[i * Vp + v] - want[i * Vp + v]), GradBound(dtype) * scale_logits)
          << label << " logit [" << i << ", " << v << "]";
    }
  }
  absl::StatusOr<Tensor> full_dev = Alloc(gec, {B * T, Vp}, DType::kF32);
  ASSERT_TRUE(full_dev.ok());
  ASSERT_TRUE((*gm)->Logits(ge, b1.tokens.view(), full_dev->view()).ok());
  absl::StatusOr<Tensor> back = CopyToHost(gec, full_dev->view());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(ToDoubles(back->view()), got) << "host and device outputs of the same logits";
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
  Batch b = MakeBatch(2, 4, static_cast<int>(c.vocab_size), 0);
  // A GPU store (not allocated: the check comes first) driven by a CPU context.
  nn::ParameterStore gs(0, 1, DType::kF32, Device::Cuda(0));
  auto gm = GptModel::Create(c, &gs);
  ASSERT_TRUE(gm.ok());
  ExecContext cpu;
  auto r = (*gm)->ForwardBackward(Step(&cpu, 0), LanguageModelBatch(b.tokens.view(), b.labels.view()), Backward::kYes);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("cuda:0"), std::string::npos) << r.status();
  // A CPU store driven by a GPU context.
  nn::ParameterStore cs(0, 1);
  auto cm = GptModel::Create(c, &cs);
  ASSERT_TRUE(cm.ok());
  ASSERT_TRUE(cs.Allocate(1).ok());
  ExecContext gpu;
  gpu.device = Device::Cuda(0);
  r = (*cm)->ForwardBackward(Step(&gpu, 0), LanguageModelBatch(b.tokens.view(), b.labels.view()), Backward::kYes);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("parameter store"), std::string::npos) << r.status();
  // Inputs on a GPU for a CPU model.
  int32_t fake[8] = {};
  const TensorView on_gpu(fake, {2, 4}, DType::kI32, Device::Cuda(0));  // Never dereferenced.
  r = (*cm)->ForwardBackward(Step(&cpu, 0), LanguageModelBatch(on_gpu, b.labels.view()), Backward::kYes);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tokens"), std::string::npos) << r.status();
  // The CPU model still works after the refusals.
  r = (*cm)->ForwardBackward(Step(&cpu, 0), LanguageModelBatch(b.tokens.view(), b.labels.view()), Backward::kYes);
  EXPECT_TRUE(r.ok()) << r.status();
}

}  // namespace
}  // namespace models
}  // namespace mt
