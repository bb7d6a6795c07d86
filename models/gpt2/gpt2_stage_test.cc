// GPT-2 split into pipeline stages (ModelOptions::stage) in one process: the stages' forward and
// backward chained by hand give the whole model's loss and gradients, bit for bit (f32 and bf16,
// dropout on, with and without activation checkpointing, 2 and 4 stages); the tied word
// embedding's gradient is the sum of the first and last stage's copies (models/testing/
// stage_testutil.h); argument errors.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_testutil.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2.h"
#include "models/registry.h"
#include "models/testing/model_testutil.h"
#include "models/testing/stage_testutil.h"

namespace mt {
namespace models {
namespace {

ModelConfig StageConfig() {
  ModelConfig c = testing::TinyConfig(Family::kGpt2, nn::NormPosition::kPreNorm, /*layers=*/4,
                                      /*vocab=*/37, /*positions=*/8);
  // Masks keyed by the global layer index must agree with the whole model.
  c.hidden_dropout = 0.2f;
  c.attention_dropout = 0.1f;
  return c;
}

// B * T = 12 distinct tokens: each word-embedding row gets at most one lookup gradient, so the sum
// of the two stages' copies is the whole model's gradient exactly (no reassociation).
struct StageBatch {
  Tensor tokens = Tensor::Host({2, 6}, DType::kI32);
  Tensor labels = Tensor::Host({2, 6}, DType::kI32);
  StageBatch() {
    for (int i = 0; i < 12; ++i) {
      tokens.data_as<int32_t>()[i] = (i * 5 + 2) % 37;
      labels.data_as<int32_t>()[i] = i % 4 == 3 ? -100 : (i * 11 + 7) % 37;
    }
  }
  Batch batch() const { return LanguageModelBatch(tokens.view(), labels.view()); }
};

using Built = testing::BuiltModel;
using testing::BuildStage;

void RunStagesAndCompare(int stages, DType dtype, nn::Recompute recompute) {
  const std::string what = absl::StrCat(stages, " stages, ", DTypeName(dtype),
                                        recompute == nn::Recompute::kYes ? ", recompute" : "");
  const StageBatch data;
  testing::ExpectStagesEqualWholeModel(StageConfig(), stages, dtype, recompute, data.batch(), what);
}

TEST(GptStageTest, StagesTogetherAreTheWholeModel) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (nn::Recompute r : {nn::Recompute::kNo, nn::Recompute::kYes}) {
      RunStagesAndCompare(2, dtype, r);
    }
  }
  RunStagesAndCompare(4, DType::kF32, nn::Recompute::kNo);
}

TEST(GptStageTest, WhatTheMiddleStageDeclaresAndArgumentErrors) {
  const ModelConfig c = StageConfig();
  const StageBatch data;
  ASSERT_OK_AND_ASSIGN(Built middle, BuildStage(c, DType::kF32, nn::Recompute::kNo,
                                                StageOptions{1, 2, false, false}));
  EXPECT_FALSE(middle.store->Find("embedding.word").ok());
  EXPECT_FALSE(middle.store->Find("final_layernorm.weight").ok());
  EXPECT_TRUE(middle.store->Find("layers.2.ln1.weight").ok());
  testing::ExpectStageArgumentErrors(c, data.batch());
}

}  // namespace
}  // namespace models
}  // namespace mt
