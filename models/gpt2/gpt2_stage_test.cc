// GPT-2 split into pipeline stages (ModelOptions::stage) in one process: the stages' forward and
// backward chained by hand give the whole model's loss and gradients, bit for bit (f32 and bf16,
// dropout on, with and without activation checkpointing, 2 and 4 stages); the tied word
// embedding's gradient is the sum of the first and last stage's copies; argument errors.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2.h"
#include "models/registry.h"

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

struct Built {
  std::unique_ptr<nn::ParameterStore> store;
  std::unique_ptr<Model> model;
};

Built Build(const ModelConfig& c, DType dtype, nn::Recompute recompute, StageOptions stage) {
  Built b;
  b.store = std::make_unique<nn::ParameterStore>(0, 1, dtype);
  ModelOptions options;
  options.recompute = recompute;
  options.stage = stage;
  auto m = CreateModel(c, b.store.get(), options);
  CHECK(m.ok()) << m.status();
  b.model = std::move(m).value();
  CHECK(b.store->Allocate(/*seed=*/5).ok());
  return b;
}

std::vector<float> Grad(const nn::ParameterStore& s, int handle) {
  const TensorView g = s.grad(handle);
  const float* p = g.data_as<float>();
  return std::vector<float>(p, p + g.numel());
}

void RunStagesAndCompare(int stages, DType dtype, nn::Recompute recompute) {
  const ModelConfig c = StageConfig();
  const std::string what = absl::StrCat(stages, " stages, ", DTypeName(dtype),
                                        recompute == nn::Recompute::kYes ? ", recompute" : "");
  ThreadPool pool(2);
  ExecContext ec;
  ec.pool = &pool;
  nn::StepContext sc;
  sc.exec = &ec;
  sc.dropout_seed = 9;
  sc.micro_step = 3;
  sc.sample_offset = 4;
  const StageBatch data;
  Built whole = Build(c, dtype, recompute, StageOptions());
  auto want = whole.model->ForwardBackward(sc, data.batch(), Backward::kYes, /*loss_scale=*/8.0);
  ASSERT_TRUE(want.ok()) << want.status();

  std::vector<Built> st;
  const int per = c.num_layers / stages;
  for (int s = 0; s < stages; ++s) {
    StageOptions o{s * per, per, s == 0, s == stages - 1};
    st.push_back(Build(c, dtype, recompute, o));
  }
  std::vector<Tensor> act;   // act[s]: the output of stage s (input of s + 1).
  std::vector<Tensor> grad;  // grad[s]: d loss / d act[s].
  for (int s = 0; s < stages; ++s) {
    act.push_back(Tensor::Host({2, 6, c.hidden_size}, dtype));
    grad.push_back(Tensor::Host({2, 6, c.hidden_size}, dtype));
  }
  Losses got;
  for (int s = 0; s < stages; ++s) {
    const TensorView in = s == 0 ? TensorView() : act[s - 1].view();
    auto l = st[s].model->StageForward(sc, data.batch(), in, act[s].view());
    ASSERT_TRUE(l.ok()) << what << ": " << l.status();
    if (s == stages - 1) got = *l;
    if (s < stages - 1) {
      EXPECT_TRUE(l->parts.empty()) << what;
    }
  }
  for (int s = stages - 1; s >= 0; --s) {
    const TensorView out_grad = s == stages - 1 ? TensorView() : grad[s].view();
    const TensorView in_grad = s == 0 ? TensorView() : grad[s - 1].view();
    ASSERT_TRUE(st[s].model->StageBackward(sc, out_grad, in_grad, 8.0).ok()) << what;
  }
  EXPECT_EQ(got.total, want->total) << what;
  EXPECT_EQ(got.scored, want->scored) << what;
  // Every parameter of the whole model is on exactly one stage (the word embedding on two), with
  // the same gradient.
  for (int i = 0; i < whole.store->size(); ++i) {
    const std::string& name = whole.store->spec(i).name;
    std::vector<float> sum;
    int holders = 0;
    for (int s = 0; s < stages; ++s) {
      auto h = st[s].store->Find(name);
      if (!h.ok()) continue;
      ++holders;
      const std::vector<float> g = Grad(*st[s].store, *h);
      if (sum.empty()) sum.assign(g.size(), 0.0f);
      for (size_t k = 0; k < g.size(); ++k) sum[k] += g[k];
      EXPECT_EQ(st[s].model->tied_embedding_handle() == *h, name == "embedding.word.weight")
          << name;
    }
    EXPECT_EQ(holders, name == "embedding.word.weight" ? 2 : 1) << what << ": " << name;
    EXPECT_EQ(sum, Grad(*whole.store, i)) << what << ": " << name;
  }
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

  Built middle = Build(c, DType::kF32, nn::Recompute::kNo, StageOptions{1, 2, false, false});
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
  Built whole = Build(c, DType::kF32, nn::Recompute::kNo, StageOptions());
  EXPECT_EQ(whole.model->tied_embedding_handle(), -1);
}

}  // namespace
}  // namespace models
}  // namespace mt
