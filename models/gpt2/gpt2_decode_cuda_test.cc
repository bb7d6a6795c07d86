// Incremental decoding on a GPU (skipped without one; on the CUDA emulator in CI): greedy decoding
// through the key/value cache equals recomputing the prefix on the device, in f32 and bf16, for
// GPT-2 and for the rotary TransformerStack model (TinyLm); in f32 the GPU picks the CPU model's
// tokens; tokens and logits may live on the device.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2.h"
#include "models/testing/cuda_model_testutil.h"
#include "models/testing/decode_testutil.h"

namespace mt {
namespace models {
namespace {

using ::mt::models::testing::DecodingBound;
using ::mt::models::testing::ExpectGreedyDecodingMatchesRecompute;
using ::mt::models::testing::ForModel;
using ::mt::models::testing::GpuContext;
using ::mt::models::testing::MakeGpuContext;
using ::mt::models::testing::RandomPrompts;
using ::mt::models::testing::TinyLm;
using ::mt::testing::ToDoubles;

ModelConfig SmallConfig() { return testing::SmallDecodingConfig(20); }

class GptDecodeCudaTest : public ::testing::TestWithParam<DType> {};

TEST_P(GptDecodeCudaTest, GreedyDecodingMatchesRecomputingOnTheDevice) {
  absl::StatusOr<std::unique_ptr<GpuContext>> gpu = MakeGpuContext();
  if (!gpu.ok()) GTEST_SKIP() << gpu.status().message();
  const DType dtype = GetParam();
  const ExecContext& gec = (*gpu)->exec;
  const ExecContext cec;
  nn::ParameterStore gs(0, 1, dtype, Device::Cuda(0)), cs(0, 1, dtype);
  auto gm = GptModel::Create(SmallConfig(), &gs);
  auto cm = GptModel::Create(SmallConfig(), &cs);
  ASSERT_TRUE(gm.ok() && cm.ok());
  ASSERT_TRUE(gs.Allocate(31).ok() && cs.Allocate(31).ok());
  const nn::StepContext gsc = nn::StepContext::Eval(&gec), csc = nn::StepContext::Eval(&cec);
  const auto prompts = RandomPrompts(3, 4, 203, 32);
  const std::string label = absl::StrCat("gpt2 cuda ", DTypeName(dtype));
  auto gpu_run = ExpectGreedyDecodingMatchesRecompute(ForModel(gm->get(), &gsc), prompts, 8,
                                                      DecodingBound(dtype), label);
  if (dtype == DType::kF32) {
    auto cpu_run = ExpectGreedyDecodingMatchesRecompute(ForModel(cm->get(), &csc), prompts, 8,
                                                        DecodingBound(dtype), "gpt2 cpu f32");
    EXPECT_EQ(gpu_run.tokens, cpu_run.tokens);
  }

  // Device-resident tokens and logits give the host path's logits bit for bit.
  GptModel& m = **gm;
  const int64_t Vp = m.padded_vocab();
  Tensor tokens = Tensor::Host({3, 4}, DType::kI32);
  for (int b = 0; b < 3; ++b) {
    for (int t = 0; t < 4; ++t) tokens.data_as<int32_t>()[b * 4 + t] = prompts[b][t];
  }
  Tensor host_logits = Tensor::Host({3, Vp}, DType::kF32);
  ASSERT_TRUE(m.StartDecoding(gsc, 3, 4).ok());
  ASSERT_TRUE(m.DecodeStep(gsc, tokens.view(), host_logits.view()).ok());
  auto device_tokens = CopyToDevice(gec, tokens.view());
  auto device_logits = Alloc(gec, {3, Vp}, DType::kF32);
  ASSERT_TRUE(device_tokens.ok() && device_logits.ok());
  ASSERT_TRUE(m.StartDecoding(gsc, 3, 4).ok());
  ASSERT_TRUE(m.DecodeStep(gsc, device_tokens->view(), device_logits->view()).ok());
  auto back = CopyToHost(gec, device_logits->view());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(ToDoubles(back->view()), ToDoubles(host_logits.view()));
}

TEST_P(GptDecodeCudaTest, RotaryStackGreedyDecodingMatchesRecomputing) {
  absl::StatusOr<std::unique_ptr<GpuContext>> gpu = MakeGpuContext();
  if (!gpu.ok()) GTEST_SKIP() << gpu.status().message();
  const DType dtype = GetParam();
  nn::ParameterStore store(0, 1, dtype, Device::Cuda(0));
  auto lm = TinyLm::Create(&store, testing::RotarySpec(), 2, 203, 208);
  ASSERT_TRUE(lm.ok());
  ASSERT_TRUE(store.Allocate(33).ok());
  const nn::StepContext sc = nn::StepContext::Eval(&(*gpu)->exec);
  ExpectGreedyDecodingMatchesRecompute((*lm)->Calls(&sc), RandomPrompts(2, 3, 203, 34), 8,
                                       DecodingBound(dtype),
                                       absl::StrCat("rotary cuda ", DTypeName(dtype)));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GptDecodeCudaTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace models
}  // namespace mt
