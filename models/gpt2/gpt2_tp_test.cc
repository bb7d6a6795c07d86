// Tensor-parallel invariance of GPT-2 (run under mpirun with 1, 2 and 4 ranks; every rank is one
// TP rank): with the same seed, the TP model holds the serial model's weight slices, and gives the
// serial model's loss, gradients and gathered logits within float32 rounding, with dropout on
// (models/testing/model_testutil); a transformer layer costs exactly two all-reduces forward and
// two backward. In bf16 compute (f32 masters), the TP model gives the serial bf16 model's loss and
// gradients within bf16 rounding.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "comm/mpi_testutil.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2.h"
#include "models/testing/model_testutil.h"
#include "nn/parameter_testutil.h"

namespace mt {
namespace models {
namespace {

using ::mt::comm::testing::MpiTest;
using ::mt::models::testing::AllReduces;
using ::mt::models::testing::ExpectTensorParallelMatchesSerial;
using ::mt::models::testing::LmBatch;
using ::mt::models::testing::MakeLmBatch;
using ::mt::models::testing::TensorParallelCheck;

ModelConfig SmallConfig(int layers) {
  ModelConfig c = ModelConfig::Sized(Family::kGpt2, layers, 16, 4, 37, 8);
  c.make_vocab_size_divisible_by = 8;  // Padded to 40 (TP 1), 48 (TP 2), 64 (TP 4).
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.init_std = 0.2;
  return c;
}

nn::StepContext Context(const ExecContext* ec, comm::Communicator* tp) {
  return nn::StepContext::Train(ec, tp, 1234, 3);
}

// Loss, slices of the weights and gradients, and the gathered logits (model_testutil).
TEST_F(MpiTest, TensorParallelGptMatchesSerialWithDropout) {
  const LmBatch batch = MakeLmBatch(3, 7, 37);
  ExpectTensorParallelMatchesSerial(*comm_, SmallConfig(2), batch.view());
}

TEST_F(MpiTest, TensorParallelBf16GptMatchesSerialBf16WithDropout) {
  const int tp = comm_->size(), rank = comm_->rank();
  const ModelConfig c = SmallConfig(2);
  const LmBatch batch = MakeLmBatch(3, 7, c.vocab_size);
  ExecContext ec;
  nn::ParameterStore serial_store(0, 1, DType::kBF16), store(rank, tp, DType::kBF16);
  auto serial = GptModel::Create(c, &serial_store);
  auto model = GptModel::Create(c, &store);
  ASSERT_TRUE(serial.ok() && model.ok());
  ASSERT_TRUE(serial_store.Allocate(7).ok() && store.Allocate(7).ok());
  nn::StepContext ssc = Context(&ec, nullptr), sc = Context(&ec, comm_.get());
  auto serial_loss = (*serial)->ForwardBackward(ssc, batch.view(), Backward::kYes);
  auto loss = (*model)->ForwardBackward(sc, batch.view(), Backward::kYes);
  ASSERT_TRUE(serial_loss.ok() && loss.ok());
  // The TP model rounds different partial results to bf16 (each rank's share of a row-parallel
  // product before the all-reduce, the embedding's zero-padded shards...), so it agrees with the
  // serial bf16 model to a few bf16 roundings: 8 u relative for the loss, 32 u (norm-wise) for
  // each gradient slice.
  const double u = ::mt::testing::UnitRoundoff(DType::kBF16);
  const double loss_err =
      std::fabs(loss->total - serial_loss->total) / std::fabs(serial_loss->total);
  EXPECT_LE(loss_err, 8 * u) << "tp=" << tp;
  double worst = 0;
  for (int i = 0; i < store.size(); ++i) {
    const nn::ParamSpec& spec = store.spec(i);
    auto si = serial_store.Find(spec.name);
    ASSERT_TRUE(si.ok()) << spec.name;
    const TensorView lv = store.value(i), lg = store.grad(i), lc = store.compute_value(i);
    const TensorView sv = serial_store.value(*si), sg = serial_store.grad(*si);
    const TensorView scv = serial_store.compute_value(*si);
    double diff = 0, norm = 0;
    int mismatched_values = 0;
    for (int64_t j = 0; j < lv.numel(); ++j) {
      const int64_t sj = nn::testing::GlobalIndexOf(spec, lv.shape, rank, j);
      if (spec.name == "embedding.word.weight" && sj / c.hidden_size >= c.vocab_size) continue;
      if (sj >= sv.numel()) continue;
      // Masters and their bf16 copies are the serial model's slices, bit for bit.
      if (lv.data_as<float>()[j] != sv.data_as<float>()[sj]) ++mismatched_values;
      if (lc.data_as<bf16>()[j].bits != scv.data_as<bf16>()[sj].bits) ++mismatched_values;
      const double g = lg.data_as<float>()[j], want = sg.data_as<float>()[sj];
      diff += (g - want) * (g - want);
      norm += want * want;
    }
    EXPECT_EQ(mismatched_values, 0) << spec.name << " tp=" << tp;
    const double err = std::sqrt(diff / std::max(norm, 1e-300));
    worst = std::max(worst, err);
    EXPECT_LE(err, 32 * u) << spec.name << " tp=" << tp;
  }
  if (rank == 0) {
    std::printf(
        "bf16 TP=%d vs serial bf16: relative loss error %.3g (%.2f u), worst relative "
        "gradient error %.3g (%.2f u)\n",
        tp, loss_err, loss_err / u, worst, worst / u);
  }
}

TEST_F(MpiTest, TwoAllReducesForwardAndTwoBackwardPerLayer) {
  if (comm_->size() == 1) GTEST_SKIP() << "counts need TP > 1";
  const LmBatch batch = MakeLmBatch(2, 5, 37);
  const AllReduces one = ExpectTensorParallelMatchesSerial(*comm_, SmallConfig(1), batch.view());
  const AllReduces two = ExpectTensorParallelMatchesSerial(*comm_, SmallConfig(2), batch.view());
  EXPECT_EQ(one.others, 0);
  EXPECT_EQ(two.others, 0);
  // Per layer: exactly two each way.
  EXPECT_EQ(two.forward - one.forward, 2);
  EXPECT_EQ(two.backward - one.backward, 2);
  // Whole model: embedding (1) + 2 per layer + cross-entropy (max, then [target, sum-exp]) forward;
  // 2 per layer + the tied output layer's input gradient (1) backward.
  EXPECT_EQ(two.forward, 1 + 2 * 2 + 2);
  EXPECT_EQ(two.backward, 2 * 2 + 1);
}

// Grouped-query attention with G = 1 (multi-query), 2 and 4 (= heads) key/value groups: each TP
// rank holds heads / TP query heads and G / TP groups, and the model is the serial one (loss,
// weight and gradient slices, logits). A G that TP does not divide is refused.
TEST_F(MpiTest, GroupedQueryAttentionMatchesSerial) {
  const int tp = comm_->size();
  const LmBatch batch = MakeLmBatch(3, 7, 37);
  for (int groups : {1, 2, 4}) {
    SCOPED_TRACE(::testing::Message() << "G=" << groups << " tp=" << tp);
    ModelConfig c = SmallConfig(2);
    c.group_query_attention = true;
    c.num_query_groups = groups;
    if (groups % tp != 0) {
      nn::ParameterStore store(comm_->rank(), tp);
      const absl::Status s = GptModel::Create(c, &store).status();
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_NE(s.message().find("num_query_groups"), std::string::npos) << s;
      continue;
    }
    ExpectTensorParallelMatchesSerial(*comm_, c, batch.view());
  }
}

// One layer, another seed: the logits gathered over the TP ranks are the serial ones (as well as
// the losses and gradients).
TEST_F(MpiTest, GatheredLogitsMatchSerial) {
  const LmBatch batch = MakeLmBatch(2, 4, 37);
  TensorParallelCheck check;
  check.seed = 5;
  ExpectTensorParallelMatchesSerial(*comm_, SmallConfig(1), batch.view(), check);
}

// Sequence parallelism (ModelOptions::sequence_parallel): the serial model's loss, gradient slices
// and gathered logits, dropout on. Per layer, the TP model's two all-reduces each way become
// all-gathers and reduce-scatters (2 + 2 forward; backward 4 all-gathers, two of them gathering the
// branch inputs again, and 2 reduce-scatters), plus one all-reduce of the layer's LayerNorm
// gradients; the rest of the model keeps its all-reduces, and the final LayerNorm's gradients add
// one.
TEST_F(MpiTest, SequenceParallelGptMatchesSerial) {
  const int tp = comm_->size();
  if (tp == 1) GTEST_SKIP() << "sequence parallelism needs TP > 1";
  const LmBatch batch = MakeLmBatch(3, 8, 37);  // T = 8: divisible by TP 2 and 4.
  TensorParallelCheck check;
  check.options.sequence_parallel = true;
  const AllReduces one =
      ExpectTensorParallelMatchesSerial(*comm_, SmallConfig(1), batch.view(), check);
  const AllReduces two =
      ExpectTensorParallelMatchesSerial(*comm_, SmallConfig(2), batch.view(), check);
  EXPECT_EQ(two.forward - one.forward, 0);
  EXPECT_EQ(two.backward - one.backward, 1);
  // A forward-only step and a step with backward: (2 + 2) + (2 + 2) + (4 + 2) per layer.
  EXPECT_EQ(two.others - one.others, 14);
  EXPECT_EQ(two.forward, 1 + 2);
  EXPECT_EQ(two.backward, 2 + 1 + 1);
  // Embedding scatter (none) and gather before the output layer (1 all-gather) in each forward;
  // in backward the gather's adjoint is a slice (the output layer's gradient is complete) and the
  // scatter's an all-gather (1).
  EXPECT_EQ(two.others, 2 * 14 + 1 + 1 + 1);
  // Sequence parallelism at TP = 1 is refused.
  nn::ParameterStore store(0, 1);
  ModelOptions options;
  options.sequence_parallel = true;
  EXPECT_EQ(GptModel::Create(SmallConfig(1), &store, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace models
}  // namespace mt
