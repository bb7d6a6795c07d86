#include "models/testing/stage_testutil.h"

#include <vector>

#include "core/status.h"
#include "core/status_testutil.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "models/registry.h"

namespace mt {
namespace models {
namespace testing {
namespace {

std::vector<float> Grad(const nn::ParameterStore& s, int handle) {
  const TensorView g = s.grad(handle);
  const float* p = g.data_as<float>();
  return std::vector<float>(p, p + g.numel());
}

}  // namespace

absl::StatusOr<BuiltModel> BuildStage(const ModelConfig& config, DType dtype,
                                      nn::Recompute recompute, const StageOptions& stage) {
  BuiltModel b;
  b.store = std::make_unique<nn::ParameterStore>(0, 1, dtype);
  ModelOptions options;
  options.recompute = recompute;
  options.stage = stage;
  ASSIGN_OR_RETURN(b.model, CreateModel(config, b.store.get(), options));
  ASSIGN_OR_RETURN(b.stage, PipelineStageOf(*b.model));
  RETURN_IF_ERROR(b.store->Allocate(/*seed=*/5));
  return b;
}

void ExpectStagesEqualWholeModel(const ModelConfig& config, int stages, DType dtype,
                                 nn::Recompute recompute, const Batch& batch,
                                 const std::string& what) {
  ThreadPool pool(2);
  ExecContext ec;
  ec.pool = &pool;
  const nn::StepContext sc = nn::StepContext::Train(&ec, nullptr, 9, 3, 4);
  const int64_t B = batch.tokens.dim(0), T = batch.tokens.dim(1);
  ASSERT_OK_AND_ASSIGN(BuiltModel whole, BuildStage(config, dtype, recompute, StageOptions()));
  auto want = whole.model->ForwardBackward(sc, batch, Backward::kYes, /*loss_scale=*/8.0);
  ASSERT_TRUE(want.ok()) << what << ": " << want.status();

  std::vector<BuiltModel> st;
  const int per = config.num_layers / stages;
  for (int s = 0; s < stages; ++s) {
    ASSERT_OK_AND_ASSIGN(
        BuiltModel b,
        BuildStage(config, dtype, recompute, StageOptions{s * per, per, s == 0, s == stages - 1}));
    st.push_back(std::move(b));
  }
  std::vector<Tensor> act, grad;  // act[s]: stage s's output; grad[s]: d loss / d act[s].
  for (int s = 0; s < stages; ++s) {
    act.push_back(Tensor::Host({B, T, config.hidden_size}, dtype));
    grad.push_back(Tensor::Host({B, T, config.hidden_size}, dtype));
  }
  Losses got;
  for (int s = 0; s < stages; ++s) {
    const TensorView in = s == 0 ? TensorView() : act[s - 1].view();
    auto l = st[s].stage->StageForward(sc, batch, in, act[s].view());
    ASSERT_TRUE(l.ok()) << what << ": " << l.status();
    if (s == stages - 1) {
      got = *l;
    } else {
      EXPECT_TRUE(l->parts.empty()) << what;
    }
  }
  for (int s = stages - 1; s >= 0; --s) {
    const TensorView out_grad = s == stages - 1 ? TensorView() : grad[s].view();
    const TensorView in_grad = s == 0 ? TensorView() : grad[s - 1].view();
    const absl::Status b = st[s].stage->StageBackward(sc, out_grad, in_grad, 8.0);
    ASSERT_TRUE(b.ok()) << what << ": " << b;
  }
  EXPECT_EQ(got.total, want->total) << what;
  EXPECT_EQ(got.parts, want->parts) << what;
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
      EXPECT_EQ(st[s].stage->tied_embedding_handle() == *h, name == "embedding.word.weight")
          << what << ": " << name;
    }
    EXPECT_EQ(holders, name == "embedding.word.weight" ? 2 : 1) << what << ": " << name;
    EXPECT_EQ(sum, Grad(*whole.store, i)) << what << ": " << name;
  }
  double flops = 0;
  for (const BuiltModel& b : st) flops += b.model->TrainingFlops(B, T, got.scored);
  EXPECT_DOUBLE_EQ(flops, whole.model->TrainingFlops(B, T, got.scored)) << what;
}

void ExpectStageArgumentErrors(const ModelConfig& config, const Batch& batch) {
  ThreadPool pool(1);
  ExecContext ec;
  ec.pool = &pool;
  const nn::StepContext sc = nn::StepContext::Train(&ec);
  nn::ParameterStore bad_store(0, 1);
  ModelOptions bad;
  bad.stage = StageOptions{3, 2, false, true};  // Layers [3, 5) of 4.
  auto m = CreateModel(config, &bad_store, bad);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("layers [3, 5)"), std::string::npos) << m.status();

  ASSERT_OK_AND_ASSIGN(BuiltModel middle, BuildStage(config, DType::kF32, nn::Recompute::kNo,
                                                     StageOptions{1, 2, false, false}));
  EXPECT_EQ(middle.stage->tied_embedding_handle(), -1);
  EXPECT_EQ(middle.model->ForwardBackward(sc, batch, Backward::kNo).status().code(),
            absl::StatusCode::kFailedPrecondition);
  const int64_t B = batch.tokens.dim(0), T = batch.tokens.dim(1), h = config.hidden_size;
  Tensor x = Tensor::Zeros({B, T, h}, DType::kF32);
  Tensor wrong = Tensor::Zeros({B, T - 1, h}, DType::kF32);
  EXPECT_EQ(middle.stage->StageBackward(sc, x.view(), x.view()).code(),
            absl::StatusCode::kFailedPrecondition);
  auto l = middle.stage->StageForward(sc, batch, wrong.view(), x.view());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("input"), std::string::npos) << l.status();
  ASSERT_TRUE(middle.stage->StageForward(sc, batch, x.view(), x.view()).ok());
  EXPECT_EQ(middle.stage->StageBackward(sc, wrong.view(), x.view()).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(BuiltModel whole,
                       BuildStage(config, DType::kF32, nn::Recompute::kNo, StageOptions()));
  EXPECT_EQ(whole.stage->tied_embedding_handle(), -1);
}

}  // namespace testing
}  // namespace models
}  // namespace mt
