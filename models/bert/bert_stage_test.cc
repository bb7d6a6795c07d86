// BERT split into pipeline stages (ModelOptions::stage) in one process: the stages' forward and
// backward chained by hand give the whole model's losses (MLM and SOP) and gradients, bit for bit
// (pre-norm and post-norm, f32 and bf16, dropout on, with and without activation checkpointing, 2
// and 4 stages, padded rows); the tied word embedding's gradient is the sum of the first and last
// stage's copies; what each stage declares; argument errors.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/testutil.h"
#include "core/status_testutil.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "models/bert/bert.h"
#include "models/registry.h"
#include "models/testing/model_testutil.h"
#include "models/testing/stage_testutil.h"

namespace mt {
namespace models {
namespace {

using ::mt::testing::I32;

constexpr int kVocab = 61, kRows = 2, kT = 8;

ModelConfig StageConfig(nn::NormPosition norm) {
  ModelConfig c = testing::TinyConfig(Family::kBert, norm, /*layers=*/4, kVocab, kT);
  c.hidden_dropout = 0.2f;  // Masks keyed by the global layer index must agree with the whole.
  c.attention_dropout = 0.1f;
  return c;
}

// kRows * kT = 16 distinct tokens (each word-embedding row gets at most one lookup gradient, so
// the sum of the two stages' copies is the whole model's gradient exactly); row 1 has two padded
// positions; segment B from kT / 2.
struct StageBatch {
  Tensor tokens, types, mask, mlm, sop;
  StageBatch() {
    std::vector<int> t, ty, m, l;
    for (int r = 0; r < kRows; ++r) {
      const int real = kT - 2 * r;
      for (int p = 0; p < kT; ++p) {
        const int i = r * kT + p;
        t.push_back((i * 7 + 3) % kVocab);
        ty.push_back(p >= kT / 2 ? 1 : 0);
        m.push_back(p < real ? 1 : 0);
        l.push_back(p > 0 && p < real && i % 2 == 1 ? (i * 5 + 1) % kVocab : -100);
      }
    }
    tokens = I32(t, {kRows, kT});
    types = I32(ty, {kRows, kT});
    mask = I32(m, {kRows, kT});
    mlm = I32(l, {kRows, kT});
    sop = I32({1, 0}, {kRows});
  }
  Batch batch() const {
    return BertBatch(tokens.view(), types.view(), mask.view(), mlm.view(), sop.view());
  }
};

using Built = testing::BuiltModel;
using testing::BuildStage;

void RunStagesAndCompare(nn::NormPosition norm, int stages, DType dtype, nn::Recompute recompute) {
  const std::string what = absl::StrCat(
      norm == nn::NormPosition::kPreNorm ? "pre-norm, " : "post-norm, ", stages, " stages, ",
      DTypeName(dtype), recompute == nn::Recompute::kYes ? ", recompute" : "");
  const StageBatch data;
  testing::ExpectStagesEqualWholeModel(StageConfig(norm), stages, dtype, recompute, data.batch(),
                                       what);
}

TEST(BertStageTest, StagesTogetherAreTheWholeModel) {
  for (nn::NormPosition norm : {nn::NormPosition::kPreNorm, nn::NormPosition::kPostNorm}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (nn::Recompute r : {nn::Recompute::kNo, nn::Recompute::kYes}) {
        RunStagesAndCompare(norm, 2, dtype, r);
      }
    }
    RunStagesAndCompare(norm, 4, DType::kF32, nn::Recompute::kNo);
  }
}

TEST(BertStageTest, WhatEachStageDeclaresAndArgumentErrors) {
  const ModelConfig c = StageConfig(nn::NormPosition::kPostNorm);
  ThreadPool pool(1);
  ExecContext ec;
  ec.pool = &pool;
  const nn::StepContext sc = nn::StepContext::Train(&ec);
  const StageBatch data;
  testing::ExpectStageArgumentErrors(c, data.batch());
  // Pipeline stages are for pretraining: the multiple-choice head and sequence parallelism
  // are refused.
  nn::ParameterStore mc_store(0, 1);
  ModelOptions mc;
  mc.stage = StageOptions{0, 2, true, false};
  mc.heads = Heads::kMultipleChoice;
  const absl::Status no = CreateModel(c, &mc_store, mc).status();
  EXPECT_EQ(no.code(), absl::StatusCode::kUnimplemented) << no;

  ASSERT_OK_AND_ASSIGN(
      Built first, BuildStage(c, DType::kF32, nn::Recompute::kNo, StageOptions{0, 2, true, false}));
  EXPECT_TRUE(first.store->Find("embedding.token_type.weight").ok());
  EXPECT_TRUE(first.store->Find("embedding.layernorm.weight").ok());
  EXPECT_FALSE(first.store->Find("pooler.dense.weight").ok());
  ASSERT_OK_AND_ASSIGN(
      Built last, BuildStage(c, DType::kF32, nn::Recompute::kNo, StageOptions{2, 2, false, true}));
  EXPECT_TRUE(last.store->Find("embedding.word.weight").ok());
  EXPECT_FALSE(last.store->Find("embedding.position.weight").ok());
  EXPECT_TRUE(last.store->Find("sop_head.weight").ok());
  ASSERT_OK_AND_ASSIGN(Built middle, BuildStage(c, DType::kF32, nn::Recompute::kNo,
                                                StageOptions{1, 2, false, false}));
  EXPECT_FALSE(middle.store->Find("embedding.word.weight").ok());
  EXPECT_FALSE(middle.store->Find("lm_head.bias").ok());
  EXPECT_TRUE(middle.store->Find("layers.2.ln1.weight").ok());
  EXPECT_FALSE(middle.store->Find("layers.0.ln1.weight").ok());
  // The last stage checks the labels.
  Tensor x = Tensor::Zeros({kRows, kT, 8}, DType::kF32);
  Tensor bad_sop = I32({2, 0}, {kRows});
  Batch b = data.batch();
  b.sop_labels = bad_sop.view();
  EXPECT_EQ(last.stage->StageForward(sc, b, x.view(), TensorView()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace models
}  // namespace mt
