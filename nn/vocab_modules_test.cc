// Float64 gradient checks of the vocabulary modules at TP = 1 (module_testutil.h describes the
// checks): the vocab-parallel embedding (lookup, tied logits, both into one table), the replicated
// (position) embedding, and the vocab-parallel cross-entropy with a padded vocabulary and ignored
// targets; plus their argument errors.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/ops/testutil.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "nn/context.h"
#include "nn/cross_entropy.h"
#include "nn/embedding.h"
#include "nn/module_testutil.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {
namespace {

using ::mt::testing::FromDoubles;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;
using testing::AllocateRandomized;
using testing::CheckModule;
using testing::ModuleResult;
using testing::ModuleUnderTest;
using testing::ParamMap;
using testing::RandomValues;
using testing::RefLookup;
using testing::RefTiedLogits;
using testing::Vec;

constexpr int64_t kValidVocab = 11, kPaddedVocab = 16;

// An embedding lookup of `ids` (i32, not differentiable) into [ids, H] rows of `table`.
template <typename Embedding>
ModuleUnderTest Lookup(Embedding* emb, const std::string& table, Shape ids_shape, Vec ids,
                       int64_t H) {
  ModuleUnderTest m;
  m.x_dtype = DType::kI32;
  m.y_shape = {static_cast<int64_t>(ids.size()), H};
  m.x_shape = std::move(ids_shape);
  m.x = std::move(ids);
  m.forward = [=](const StepContext& sc, const TensorView& ids, const TensorView& y) {
    return emb->Forward(sc, ids, y);
  };
  m.backward = [=](const StepContext& sc, const TensorView& ids, const TensorView& dy,
                   const TensorView&) { return emb->Backward(sc, ids, dy); };
  m.reference = [=](const ParamMap& p, const Vec& ids) { return RefLookup(p.at(table), ids, H); };
  return m;
}

// A vocab-parallel table of kPaddedVocab rows (kValidVocab valid) at TP = 1.
class VocabParallelEmbeddingTest : public ::testing::Test {
 protected:
  // Declares the [kPaddedVocab, H] table "emb.weight", allocates it, values from `seed`.
  void Make(int64_t H, uint64_t seed) {
    auto emb = VocabParallelEmbedding::Create(&store_, "emb", kValidVocab, kPaddedVocab, H, 0.3);
    ASSERT_TRUE(emb.ok()) << emb.status();
    emb_.emplace(std::move(emb).value());
    ASSERT_TRUE(AllocateRandomized(&store_, seed));
  }

  ParameterStore store_{0, 1};
  std::optional<VocabParallelEmbedding> emb_;
};

TEST_F(VocabParallelEmbeddingTest, LookupMatchesFloat64Reference) {
  const int64_t H = 5;
  ASSERT_NO_FATAL_FAILURE(Make(H, 20));
  EXPECT_EQ(emb_->local_vocab(), kPaddedVocab);
  // Repeats: the backward scatter-adds.
  const ModuleUnderTest m =
      Lookup(&*emb_, "emb.weight", {2, 7}, {0, 3, 10, 3, 5, 5, 1, 9, 10, 3, 0, 2, 7, 3}, H);
  const std::optional<ModuleResult> r = CheckModule(&store_, m, 21);
  ASSERT_TRUE(r.has_value());
  // The lookup is an exact copy, and rows of unused (or padded) ids get exactly zero gradient.
  EXPECT_EQ(r->y, m.reference(testing::Values(store_), m.x));
  for (int64_t v : {4, 6, 8, 11, 12, 15}) {
    for (int64_t h = 0; h < H; ++h) EXPECT_EQ(r->grads[0][v * H + h], 0.0) << v;
  }
  // An id of the padding is out of range.
  ExecContext ec;
  Tensor bad = FromDoubles({1}, DType::kI32, {static_cast<double>(kPaddedVocab)});
  Tensor out = Tensor::Host({1, H}, DType::kF32);
  EXPECT_FALSE(emb_->Forward(StepContext::Train(&ec), bad.view(), out.view()).ok());
}

TEST_F(VocabParallelEmbeddingTest, TiedLogitsMatchFloat64Reference) {
  const int64_t N = 5, H = 7;
  ASSERT_NO_FATAL_FAILURE(Make(H, 22));
  ModuleUnderTest m;
  m.x_shape = {N, H};
  m.y_shape = {N, kPaddedVocab};
  m.x = RandomValues(m.x_shape, 23);
  m.forward = [&](const StepContext& sc, const TensorView& h, const TensorView& logits) {
    return emb_->LogitsForward(sc, h, logits);
  };
  m.backward = [&](const StepContext& sc, const TensorView& h, const TensorView& dlogits,
                   const TensorView& dh) { return emb_->LogitsBackward(sc, h, dlogits, dh); };
  m.reference = [&](const ParamMap& p, const Vec& h) {
    return RefTiedLogits(p.at("emb.weight"), h, N, H, kPaddedVocab);
  };
  EXPECT_TRUE(CheckModule(&store_, m, 24).has_value());
}

TEST_F(VocabParallelEmbeddingTest, LookupAndTiedOutputAccumulateIntoOneTable) {
  // ids -> embedding -> logits through the same table: the table gradient is the sum of the
  // lookup's scatter and the output layer's product.
  const int64_t N = 6, H = 4;
  ASSERT_NO_FATAL_FAILURE(Make(H, 25));
  Tensor hidden = Tensor::Host({N, H}, DType::kF32);
  ModuleUnderTest m;
  m.x_shape = {N};
  m.x_dtype = DType::kI32;
  m.x = {4, 0, 10, 4, 7, 2};
  m.y_shape = {N, kPaddedVocab};
  m.forward = [&](const StepContext& sc, const TensorView& ids, const TensorView& logits) {
    RETURN_IF_ERROR(emb_->Forward(sc, ids, hidden.view()));
    return emb_->LogitsForward(sc, hidden.view(), logits);
  };
  m.backward = [&](const StepContext& sc, const TensorView& ids, const TensorView& dlogits,
                   const TensorView&) {
    Tensor dh = Tensor::Host({N, H}, DType::kF32);
    RETURN_IF_ERROR(emb_->LogitsBackward(sc, hidden.view(), dlogits, dh.view()));
    return emb_->Backward(sc, ids, dh.view());
  };
  m.reference = [&](const ParamMap& p, const Vec& ids) {
    const Vec& e = p.at("emb.weight");
    return RefTiedLogits(e, RefLookup(e, ids, H), N, H, kPaddedVocab);
  };
  EXPECT_TRUE(CheckModule(&store_, m, 26).has_value());
}

TEST(ReplicatedEmbeddingTest, MatchesFloat64Reference) {
  const int64_t rows = 7, H = 3;
  ParameterStore store(0, 1);
  auto emb = ReplicatedEmbedding::Create(&store, "pos", rows, H, 0.3);
  ASSERT_TRUE(emb.ok()) << emb.status();
  ASSERT_TRUE(AllocateRandomized(&store, 27));
  EXPECT_EQ(store.spec(0).split_dim, -1);
  EXPECT_EQ(emb->rows(), rows);
  const ModuleUnderTest m = Lookup(&*emb, "pos.weight", {3, 3}, {0, 1, 2, 2, 6, 0, 5, 2, 1}, H);
  const std::optional<ModuleResult> r = CheckModule(&store, m, 28);
  ASSERT_TRUE(r.has_value());
  for (int64_t h = 0; h < H; ++h) {
    EXPECT_EQ(r->grads[0][3 * H + h], 0.0);  // Rows 3 and 4 are never looked up.
    EXPECT_EQ(r->grads[0][4 * H + h], 0.0);
  }
  ExecContext ec;
  Tensor bad = FromDoubles({1}, DType::kI32, {static_cast<double>(rows)});
  Tensor out = Tensor::Host({1, H}, DType::kF32);
  EXPECT_EQ(emb->Forward(StepContext::Train(&ec), bad.view(), out.view()).code(),
            absl::StatusCode::kOutOfRange);
}

TEST(PaddedVocabSizeTest, RoundsUpToMultipleTimesTp) {
  EXPECT_EQ(PaddedVocabSize(50257, 128, 1), 50304);
  EXPECT_EQ(PaddedVocabSize(50257, 128, 2), 50432);
  EXPECT_EQ(PaddedVocabSize(256, 128, 2), 256);
  EXPECT_EQ(PaddedVocabSize(1, 8, 4), 32);
}

// ------------------------------------------------------------------ cross-entropy

class CrossEntropyTest : public ::testing::TestWithParam<DType> {};

TEST_P(CrossEntropyTest, MatchesFloat64ReferenceWithPaddingAndIgnoredTargets) {
  const int64_t N = 7, V = 13, valid = 10;
  const std::vector<int64_t> targets = {3, -100, 0, 9, 9, 5, -100};
  Tensor targets_t = FromDoubles({N}, GetParam(), Vec(targets.begin(), targets.end()));
  VocabParallelCrossEntropy ce;
  const ops::VocabShard shard{/*vocab_start=*/0, /*valid_vocab=*/valid};
  ParameterStore store(0, 1);  // No parameters.
  ModuleUnderTest m;
  m.x_shape = {N, V};
  m.y_shape = {N};
  m.x = RandomValues(m.x_shape, 29, -3, 3);
  // Padded columns hold large logits: unless masked they would dominate the softmax.
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = valid; v < V; ++v) m.x[n * V + v] = 20 + v;
  }
  m.forward = [&](const StepContext& sc, const TensorView& logits, const TensorView& losses) {
    return ce.Forward(sc, logits, targets_t.view(), shard, losses);
  };
  m.backward = [&](const StepContext& sc, const TensorView&, const TensorView& dlosses,
                   const TensorView& dlogits) { return ce.Backward(sc, dlosses, dlogits); };
  m.reference = [&](const ParamMap&, const Vec& x) {
    return ::mt::testing::CrossEntropyReference(x, V, valid, targets);
  };
  const std::optional<ModuleResult> r = CheckModule(&store, m, 30);
  ASSERT_TRUE(r.has_value());
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) {
      EXPECT_EQ(r->y[n], 0.0) << n;
    }
    for (int64_t v = 0; v < V; ++v) {
      if (targets[n] < 0 || v >= valid) {
        EXPECT_EQ(r->dx[n * V + v], 0.0) << n << " " << v;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TargetTypes, CrossEntropyTest,
                         ::testing::Values(DType::kI32, DType::kI64));

TEST(CrossEntropyTest, BackwardWithoutForwardFails) {
  VocabParallelCrossEntropy ce;
  ExecContext ec;
  Tensor d = Tensor::Zeros({2}, DType::kF32), dl = Tensor::Zeros({2, 3}, DType::kF32);
  EXPECT_EQ(ce.Backward(StepContext::Train(&ec), d.view(), dl.view()).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(GatherLogitsTest, SerialGatherCopies) {
  ExecContext ec;
  const StepContext sc = StepContext::Train(&ec);
  Tensor shard = RandomTensor({3, 5}, DType::kF32, 31);
  Tensor full = Tensor::Zeros({3, 5}, DType::kF32);
  ASSERT_TRUE(GatherLogits(sc, shard.view(), full.view()).ok());
  EXPECT_EQ(ToDoubles(full.view()), ToDoubles(shard.view()));
  Tensor wrong = Tensor::Zeros({3, 4}, DType::kF32);
  EXPECT_EQ(GatherLogits(sc, shard.view(), wrong.view()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nn
}  // namespace mt
