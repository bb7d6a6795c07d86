// GPT-2 split into pipeline stages (ModelOptions::stage) in one process: the stages' forward and
// backward chained by hand give the whole model's loss and gradients, bit for bit (f32 and bf16,
// dropout on, with and without activation checkpointing, 2 and 4 stages); the tied word
// embedding's gradient is the sum of the first and last stage's copies (models/testing/
// stage_testutil.h); argument errors.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2.h"
#include "models/registry.h"
#include "models/testing/stage_testutil.h"

namespace mt {
namespace models {
namespace {

ModelConfig StageConfig() {
  ModelConfig c;
  c.num_layers = 4;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.vocab_size = 37;
  c.make_vocab_size_divisible_by = 4;
  c.max_position_embeddings = 8;
  c.hidden_dropout =
      0.2f;  // Masks keyed by the global layer index must agree with the whole model.
  c.attention_dropout = 0.1f;
  c.init_std = 0.3;
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

TEST(GptStageTest, ArgumentErrors) {
  const ModelConfig c = StageConfig();
  ThreadPool pool(1);
  ExecContext ec;
  ec.pool = &pool;
  nn::StepContext sc;
  sc.exec = &ec;
  const StageBatch data;
  nn::ParameterStore bad_store(0, 1);
  ModelOptions bad;
  bad.stage = StageOptions{3, 2, false, true};  // Layers [3, 5) of 4.
  auto m = CreateModel(c, &bad_store, bad);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("layers [3, 5)"), std::string::npos) << m.status();

  Built middle = BuildStage(c, DType::kF32, nn::Recompute::kNo, StageOptions{1, 2, false, false});
  EXPECT_FALSE(middle.store->Find("embedding.word").ok());
  EXPECT_FALSE(middle.store->Find("final_layernorm.weight").ok());
  EXPECT_TRUE(middle.store->Find("layers.2.ln1.weight").ok());
  EXPECT_EQ(middle.model->tied_embedding_handle(), -1);
  EXPECT_EQ(middle.model->ForwardBackward(sc, data.batch(), Backward::kNo).status().code(),
            absl::StatusCode::kFailedPrecondition);
  Tensor x = Tensor::Host({2, 6, 8}, DType::kF32);
  Tensor wrong = Tensor::Host({2, 5, 8}, DType::kF32);
  EXPECT_EQ(middle.model->StageBackward(sc, x.view(), x.view()).code(),
            absl::StatusCode::kFailedPrecondition);
  std::memset(x.data(), 0, x.nbytes());
  auto l = middle.model->StageForward(sc, data.batch(), wrong.view(), x.view());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("input"), std::string::npos) << l.status();
  ASSERT_TRUE(middle.model->StageForward(sc, data.batch(), x.view(), x.view()).ok());
  EXPECT_EQ(middle.model->StageBackward(sc, wrong.view(), x.view()).code(),
            absl::StatusCode::kInvalidArgument);
  // The whole model reports no tied copy.
  Built whole = BuildStage(c, DType::kF32, nn::Recompute::kNo, StageOptions());
  EXPECT_EQ(whole.model->tied_embedding_handle(), -1);
}

}  // namespace
}  // namespace models
}  // namespace mt
