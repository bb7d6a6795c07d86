// The models' gradient-ready reports (nn::GradReadyListener) are true: when a model says that the
// gradients of parameter h and every later one are final, they are bit-identical to the gradients
// at the end of backward. Also checked: reports come with decreasing handles and end with handle 0,
// for GPT-2 and BERT (pre- and post-norm, the pretraining and the multiple-choice heads), with and
// without activation recomputation, over two accumulated micro-batches.
#include <memory>
#include <vector>

#include "core/exec_context.h"
#include "core/ops/testutil.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"
#include "models/bert/bert.h"
#include "models/config.h"
#include "models/gpt2/gpt2.h"
#include "nn/context.h"
#include "nn/parameter.h"

namespace mt {
namespace train {
namespace {

using ::mt::testing::I32;

// Records, at every report, a copy of the gradients the report declares final.
class RecordingListener : public nn::GradReadyListener {
 public:
  explicit RecordingListener(const nn::ParameterStore* store) : store_(store) {}

  absl::Status GradsReady(int first_handle) override {
    const float* base = store_->flat_grads().data_as<float>();
    const int64_t offset = store_->grad(first_handle).data_as<float>() - base;
    handles_.push_back(first_handle);
    snapshots_.emplace_back(base + offset, base + store_->NumLocalElements());
    return absl::OkStatus();
  }

  // Every snapshot equals the final gradients over its range; handles decrease and end at 0.
  void Check(const char* what) const {
    ASSERT_FALSE(handles_.empty()) << what;
    EXPECT_EQ(handles_.back(), 0) << what;
    const float* base = store_->flat_grads().data_as<float>();
    const int64_t n = store_->NumLocalElements();
    for (size_t i = 0; i < handles_.size(); ++i) {
      if (i > 0) {
        EXPECT_LT(handles_[i], handles_[i - 1]) << what;
      }
      const std::vector<float>& snap = snapshots_[i];
      const float* now = base + (n - static_cast<int64_t>(snap.size()));
      EXPECT_EQ(std::memcmp(snap.data(), now, snap.size() * sizeof(float)), 0)
          << what << ": gradients declared final at handle " << handles_[i] << " ("
          << store_->spec(handles_[i]).name << ") changed later";
    }
  }
  size_t reports() const { return handles_.size(); }

 private:
  const nn::ParameterStore* store_;
  std::vector<int> handles_;
  std::vector<std::vector<float>> snapshots_;
};

models::ModelConfig Tiny(models::Family family, nn::NormPosition norm) {
  models::ModelConfig c = models::ModelConfig::Sized(family, 3, 8, 2, 13, 6);
  c.make_vocab_size_divisible_by = 4;
  c.norm = norm;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  return c;
}

class GradReadyTest : public ::testing::TestWithParam<bool> {};  // recompute

// The step context of micro-batch `micro` of two, as the trainer makes it: only the last
// micro-batch's backward reports to `listener`.
nn::StepContext MicroStep(ExecContext* ec, int micro, RecordingListener* listener) {
  nn::StepContext sc = nn::StepContext::Train(ec, nullptr, 9, 0, 2 * micro);
  if (micro == 1) sc.grads_ready = listener;
  return sc;
}

TEST_P(GradReadyTest, GptReportsAreTrue) {
  const nn::Recompute recompute = GetParam() ? nn::Recompute::kYes : nn::Recompute::kNo;
  const models::ModelConfig c = Tiny(models::Family::kGpt2, nn::NormPosition::kPreNorm);
  nn::ParameterStore store(0, 1);
  auto model = models::GptModel::Create(c, &store, {recompute});
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(store.Allocate(3).ok());
  ExecContext ec;
  std::vector<int32_t> ids, labels;
  for (int i = 0; i < 12; ++i) {
    ids.push_back((5 * i + 2) % 13);
    labels.push_back((7 * i + 1) % 13);
  }
  Tensor tokens = I32(ids, {2, 6}), targets = I32(labels, {2, 6});
  RecordingListener listener(&store);
  for (int micro = 0; micro < 2; ++micro) {
    const nn::StepContext sc = MicroStep(&ec, micro, &listener);
    auto loss = (*model)->ForwardBackward(
        sc, models::LanguageModelBatch(tokens.view(), targets.view()), models::Backward::kYes);
    ASSERT_TRUE(loss.ok()) << loss.status();
  }
  EXPECT_EQ(listener.reports(), static_cast<size_t>(c.num_layers + 2));
  listener.Check("gpt2");
}

TEST_P(GradReadyTest, BertReportsAreTrue) {
  const nn::Recompute recompute = GetParam() ? nn::Recompute::kYes : nn::Recompute::kNo;
  for (nn::NormPosition norm : {nn::NormPosition::kPreNorm, nn::NormPosition::kPostNorm}) {
    for (models::Heads heads : {models::Heads::kPretraining, models::Heads::kMultipleChoice}) {
      SCOPED_TRACE(::testing::Message()
                   << "norm " << static_cast<int>(norm) << " heads " << static_cast<int>(heads));
      const models::ModelConfig c = Tiny(models::Family::kBert, norm);
      nn::ParameterStore store(0, 1);
      auto model = models::BertModel::Create(c, &store, {recompute, heads});
      ASSERT_TRUE(model.ok()) << model.status();
      ASSERT_TRUE(store.Allocate(4).ok());
      ExecContext ec;
      std::vector<int32_t> ids, types, mask, mlm;
      for (int i = 0; i < 12; ++i) {
        ids.push_back((3 * i + 1) % 13);
        types.push_back(i % 6 >= 3);
        mask.push_back(i % 6 != 5 || i < 6);
        mlm.push_back(i % 3 == 1 ? (i * 5 + 2) % 13 : -100);
      }
      Tensor tokens = I32(ids, {2, 6}), tt = I32(types, {2, 6}), pm = I32(mask, {2, 6}),
             ml = I32(mlm, {2, 6}), sop = I32({1, 0}, {2}), choice = I32({1}, {1});
      RecordingListener listener(&store);
      for (int micro = 0; micro < 2; ++micro) {
        const nn::StepContext sc = MicroStep(&ec, micro, &listener);
        if (heads == models::Heads::kPretraining) {
          auto l = (*model)->ForwardBackward(
              sc, models::BertBatch(tokens.view(), tt.view(), pm.view(), ml.view(), sop.view()),
              models::Backward::kYes);
          ASSERT_TRUE(l.ok()) << l.status();
        } else {
          auto l = (*model)->MultipleChoice(
              sc, models::MultipleChoiceBatch(tokens.view(), tt.view(), pm.view(), choice.view()),
              models::Backward::kYes);
          ASSERT_TRUE(l.ok()) << l.status();
        }
      }
      EXPECT_EQ(listener.reports(), static_cast<size_t>(c.num_layers + 2));
      listener.Check("bert");
    }
  }
}

// The check can fail: a report made before the last backward pass (claiming every gradient is
// final while backward will still add to them) is caught.
TEST(GradReadyCheckTest, CatchesAFalseReport) {
  const models::ModelConfig c = Tiny(models::Family::kGpt2, nn::NormPosition::kPreNorm);
  nn::ParameterStore store(0, 1);
  auto model = models::GptModel::Create(c, &store);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(store.Allocate(3).ok());
  ExecContext ec;
  Tensor tokens = I32({1, 2, 3, 4, 5, 6}, {1, 6}), targets = I32({2, 3, 4, 5, 6, 7}, {1, 6});
  const nn::StepContext sc = nn::StepContext::Train(&ec);
  ASSERT_TRUE((*model)
                  ->ForwardBackward(sc, models::LanguageModelBatch(tokens.view(), targets.view()),
                                    models::Backward::kYes)
                  .ok());
  RecordingListener listener(&store);
  ASSERT_TRUE(listener.GradsReady(0).ok());  // False: another backward pass follows.
  ASSERT_TRUE((*model)
                  ->ForwardBackward(sc, models::LanguageModelBatch(tokens.view(), targets.view()),
                                    models::Backward::kYes)
                  .ok());
  EXPECT_NONFATAL_FAILURE(listener.Check("false report"), "changed later");
}

INSTANTIATE_TEST_SUITE_P(Recompute, GradReadyTest, ::testing::Bool());

}  // namespace
}  // namespace train
}  // namespace mt
