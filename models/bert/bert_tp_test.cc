// Tensor-parallel invariance of BERT (run under mpirun with 1, 2 and 4 ranks; every rank is one TP
// rank): with the same seed, the TP model holds the serial model's weight slices and gives the
// serial model's losses and gradients within float32 rounding, with dropout on, for pre-norm and
// post-norm, the pretraining heads and the multiple-choice head; a transformer layer costs exactly
// two all-reduces forward and two backward.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "comm/mpi_testutil.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"
#include "models/bert/bert.h"

namespace mt {
namespace models {
namespace {

using ::mt::comm::testing::MpiTest;

ModelConfig SmallConfig(int layers, nn::NormPosition norm) {
  ModelConfig c;
  c.family = Family::kBert;
  c.num_layers = layers;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.vocab_size = 37;
  c.make_vocab_size_divisible_by = 8;  // Padded to 40 (TP 1), 48 (TP 2), 64 (TP 4).
  c.max_position_embeddings = 8;
  c.num_token_types = 2;
  c.norm = norm;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.init_std = 0.2;
  return c;
}

// rows sequences of length T; row r has r % 3 padded positions at its end; about a third of the
// real positions after [CLS] are scored by the MLM.
struct Batch {
  Tensor tokens, types, mask, mlm, sop;
};

Batch MakeBatch(int rows, int T, int V) {
  Batch b;
  b.tokens = Tensor::Host({rows, T}, DType::kI32);
  b.types = Tensor::Host({rows, T}, DType::kI32);
  b.mask = Tensor::Host({rows, T}, DType::kI32);
  b.mlm = Tensor::Host({rows, T}, DType::kI32);
  b.sop = Tensor::Host({rows}, DType::kI32);
  for (int r = 0; r < rows; ++r) {
    const int real = T - r % 3;
    for (int t = 0; t < T; ++t) {
      const int i = r * T + t;
      b.tokens.data_as<int32_t>()[i] = (i * 11 + 2) % V;
      b.types.data_as<int32_t>()[i] = t >= T / 2 ? 1 : 0;
      b.mask.data_as<int32_t>()[i] = t < real ? 1 : 0;
      b.mlm.data_as<int32_t>()[i] = t > 0 && t < real && i % 3 != 0 ? (i * 13 + 5) % V : -100;
    }
    b.sop.data_as<int32_t>()[r] = (r + 1) % 2;
  }
  return b;
}

nn::StepContext Context(const ExecContext* ec, comm::Communicator* tp) {
  nn::StepContext sc;
  sc.exec = ec;
  sc.tp = tp;
  sc.dropout_seed = 1234;
  sc.micro_step = 3;
  sc.sample_offset = 6;
  return sc;
}

// Every local value and gradient of `store` (TP rank `rank`) is the serial one's slice (real
// vocabulary rows / entries only): values exactly, gradients within 1e-5 * max|serial gradient|.
void ExpectSlicesOfSerial(const nn::ParameterStore& store, const nn::ParameterStore& serial_store,
                          const ModelConfig& c, int rank, const std::string& what) {
  const int tp = store.tp_size();
  for (int i = 0; i < store.size(); ++i) {
    const nn::ParamSpec& spec = store.spec(i);
    auto si = serial_store.Find(spec.name);
    ASSERT_TRUE(si.ok()) << spec.name;
    const TensorView lv = store.value(i), lg = store.grad(i);
    const TensorView sv = serial_store.value(*si), sg = serial_store.grad(*si);
    int64_t inner = 1;
    if (spec.split_dim >= 0) {
      for (int d = spec.split_dim + 1; d < lv.rank(); ++d) inner *= lv.shape[d];
    }
    double gmax = 0;
    for (int64_t j = 0; j < sg.numel(); ++j) {
      gmax = std::max(gmax, std::fabs(double{sg.data_as<float>()[j]}));
    }
    // The softmax over the choices is shift-invariant, so the multiple-choice bias has zero
    // gradient in exact arithmetic: both sides are rounding noise, compared against the scale of
    // the head's weight gradient instead.
    const bool zero_in_exact_arithmetic = spec.name == "multiple_choice_head.bias";
    if (zero_in_exact_arithmetic) {
      auto wi = serial_store.Find("multiple_choice_head.weight");
      ASSERT_TRUE(wi.ok());
      const TensorView wg = serial_store.grad(*wi);
      double wmax = 0;
      for (int64_t j = 0; j < wg.numel(); ++j) {
        wmax = std::max(wmax, std::fabs(double{wg.data_as<float>()[j]}));
      }
      EXPECT_LE(gmax, 1e-5 * wmax) << what << " " << spec.name;
      gmax = wmax;
    }
    int mismatched_values = 0, mismatched_grads = 0;
    for (int64_t j = 0; j < lv.numel(); ++j) {
      int64_t sj = j;
      if (spec.split_dim >= 0) {
        const int64_t local_extent = lv.shape[spec.split_dim];
        const int64_t outer = j / (local_extent * inner), mid = (j / inner) % local_extent;
        sj = (outer * sv.shape[spec.split_dim] + rank * local_extent + mid) * inner + j % inner;
      }
      // The vocabulary padding differs between TP degrees.
      if (spec.name == "embedding.word.weight" && sj / c.hidden_size >= c.vocab_size) continue;
      if (spec.name == "lm_head.bias" && sj >= c.vocab_size) continue;
      if (lv.data_as<float>()[j] != sv.data_as<float>()[sj]) ++mismatched_values;
      if (std::fabs(lg.data_as<float>()[j] - sg.data_as<float>()[sj]) > 1e-5 * gmax + 1e-9) {
        ++mismatched_grads;
      }
    }
    EXPECT_EQ(mismatched_values, 0) << what << " " << spec.name << " tp=" << tp;
    EXPECT_EQ(mismatched_grads, 0) << what << " " << spec.name << " tp=" << tp << " (max |g| "
                                   << gmax << ")";
    EXPECT_GT(gmax, 0) << what << " " << spec.name << ": the check would be vacuous";
  }
}

TEST_F(MpiTest, TensorParallelBertPretrainingMatchesSerialWithDropout) {
  const int tp = comm_->size(), rank = comm_->rank();
  for (nn::NormPosition norm : {nn::NormPosition::kPreNorm, nn::NormPosition::kPostNorm}) {
    const std::string what = norm == nn::NormPosition::kPreNorm ? "pre-norm" : "post-norm";
    const ModelConfig c = SmallConfig(2, norm);
    Batch b = MakeBatch(3, 7, static_cast<int>(c.vocab_size));
    ExecContext ec;

    // The serial model, on every rank.
    nn::ParameterStore serial_store(0, 1);
    auto serial = BertModel::Create(c, &serial_store);
    ASSERT_TRUE(serial.ok()) << serial.status();
    ASSERT_TRUE(serial_store.Allocate(7).ok());
    nn::StepContext ssc = Context(&ec, nullptr);
    auto serial_loss = (*serial)->ForwardBackward(ssc, BertBatch(b.tokens.view(), b.types.view(), b.mask.view(), b.mlm.view(), b.sop.view()), Backward::kYes);
    ASSERT_TRUE(serial_loss.ok()) << serial_loss.status();

    // The TP model over all ranks.
    nn::ParameterStore store(rank, tp);
    auto model = BertModel::Create(c, &store);
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_TRUE(store.Allocate(7).ok());
    nn::StepContext sc = Context(&ec, comm_.get());
    auto loss = (*model)->ForwardBackward(sc, BertBatch(b.tokens.view(), b.types.view(), b.mask.view(), b.mlm.view(), b.sop.view()), Backward::kYes);
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_NEAR(loss->parts[0], serial_loss->parts[0], 1e-5 * std::fabs(serial_loss->parts[0])) << what;
    EXPECT_NEAR(loss->parts[1], serial_loss->parts[1], 1e-5 * std::fabs(serial_loss->parts[1])) << what;
    EXPECT_NEAR(loss->total, serial_loss->total, 1e-5 * std::fabs(serial_loss->total)) << what;

    // Dropout is really on: evaluation mode gives another loss.
    nn::StepContext eval = ssc;
    eval.mode = nn::Mode::kEval;
    auto eval_loss = (*serial)->ForwardBackward(eval, BertBatch(b.tokens.view(), b.types.view(), b.mask.view(), b.mlm.view(), b.sop.view()), Backward::kNo);
    ASSERT_TRUE(eval_loss.ok());
    EXPECT_GT(std::fabs(eval_loss->total - serial_loss->total), 1e-4) << what;

    ExpectSlicesOfSerial(store, serial_store, c, rank, what);
  }
}

TEST_F(MpiTest, TensorParallelBertMultipleChoiceMatchesSerialWithDropout) {
  const int tp = comm_->size(), rank = comm_->rank();
  const ModelConfig c = SmallConfig(2, nn::NormPosition::kPreNorm);
  const int Q = 2, C = 4;
  Batch b = MakeBatch(Q * C, 6, static_cast<int>(c.vocab_size));
  Tensor labels = Tensor::Host({Q}, DType::kI32);
  labels.data_as<int32_t>()[0] = 3;
  labels.data_as<int32_t>()[1] = 1;
  ExecContext ec;
  nn::ParameterStore serial_store(0, 1), store(rank, tp);
  auto serial = BertModel::Create(c, &serial_store, {nn::Recompute::kNo, Heads::kMultipleChoice});
  auto model = BertModel::Create(c, &store, {nn::Recompute::kNo, Heads::kMultipleChoice});
  ASSERT_TRUE(serial.ok() && model.ok());
  ASSERT_TRUE(serial_store.Allocate(9).ok() && store.Allocate(9).ok());
  nn::StepContext ssc = Context(&ec, nullptr), sc = Context(&ec, comm_.get());
  auto want = (*serial)->MultipleChoice(ssc, MultipleChoiceBatch(b.tokens.view(), b.types.view(), b.mask.view(), labels.view()), Backward::kYes);
  auto got = (*model)->MultipleChoice(sc, MultipleChoiceBatch(b.tokens.view(), b.types.view(), b.mask.view(), labels.view()), Backward::kYes);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_NEAR(got->loss, want->loss, 1e-5 * std::fabs(want->loss)) << "tp=" << tp;
  EXPECT_EQ(got->predictions, want->predictions) << "tp=" << tp;
  ExpectSlicesOfSerial(store, serial_store, c, rank, "multiple choice");
}

TEST_F(MpiTest, TwoAllReducesForwardAndTwoBackwardPerLayer) {
  const int tp = comm_->size(), rank = comm_->rank();
  if (tp == 1) GTEST_SKIP() << "counts need TP > 1";
  for (nn::NormPosition norm : {nn::NormPosition::kPreNorm, nn::NormPosition::kPostNorm}) {
    int64_t forward[3] = {0, 0, 0}, backward[3] = {0, 0, 0};
    int64_t mc_forward[3] = {0, 0, 0}, mc_backward[3] = {0, 0, 0};
    for (int layers : {1, 2}) {
      const ModelConfig c = SmallConfig(layers, norm);
      Batch b = MakeBatch(4, 5, static_cast<int>(c.vocab_size));
      Tensor mc_labels = Tensor::Zeros({2}, DType::kI32);
      nn::ParameterStore store(rank, tp);
      auto model = BertModel::Create(c, &store, {nn::Recompute::kNo, Heads::kAll});
      ASSERT_TRUE(model.ok());
      ASSERT_TRUE(store.Allocate(1).ok());
      ExecContext ec;
      nn::StepContext sc = Context(&ec, comm_.get());
      BertModel& m = **model;
      comm_->ResetCounters();
      ASSERT_TRUE(m.ForwardBackward(sc, BertBatch(b.tokens.view(), b.types.view(), b.mask.view(), b.mlm.view(), b.sop.view()), Backward::kNo)
                      .ok());
      const comm::CommCounters f = comm_->ResetCounters();
      ASSERT_TRUE(m.ForwardBackward(sc, BertBatch(b.tokens.view(), b.types.view(), b.mask.view(), b.mlm.view(), b.sop.view()), Backward::kYes)
                      .ok());
      const comm::CommCounters fb = comm_->ResetCounters();
      forward[layers] = f.all_reduce;
      backward[layers] = fb.all_reduce - f.all_reduce;
      EXPECT_EQ(f.all_gather + f.reduce_scatter + f.broadcast + f.send + f.recv, 0);
      EXPECT_EQ(fb.all_gather + fb.reduce_scatter + fb.broadcast + fb.send + fb.recv, 0);

      ASSERT_TRUE(m.MultipleChoice(sc, MultipleChoiceBatch(b.tokens.view(), b.types.view(), b.mask.view(), mc_labels.view()), Backward::kNo)
                      .ok());
      const comm::CommCounters mf = comm_->ResetCounters();
      ASSERT_TRUE(m.MultipleChoice(sc, MultipleChoiceBatch(b.tokens.view(), b.types.view(), b.mask.view(), mc_labels.view()), Backward::kYes)
                      .ok());
      const comm::CommCounters mfb = comm_->ResetCounters();
      mc_forward[layers] = mf.all_reduce;
      mc_backward[layers] = mfb.all_reduce - mf.all_reduce;
    }
    // Per layer: exactly two each way.
    EXPECT_EQ(forward[2] - forward[1], 2);
    EXPECT_EQ(backward[2] - backward[1], 2);
    EXPECT_EQ(mc_forward[2] - mc_forward[1], 2);
    EXPECT_EQ(mc_backward[2] - mc_backward[1], 2);
    // Whole model: embedding (1) + 2 per layer + the MLM cross-entropy (max, then [target,
    // sum-exp]) forward; 2 per layer + the tied decoder's input gradient (1) backward. The pooler,
    // SOP and multiple-choice heads are replicated and communicate nothing.
    EXPECT_EQ(forward[2], 1 + 2 * 2 + 2);
    EXPECT_EQ(backward[2], 2 * 2 + 1);
    EXPECT_EQ(mc_forward[2], 1 + 2 * 2);
    EXPECT_EQ(mc_backward[2], 2 * 2);
  }
}

}  // namespace
}  // namespace models
}  // namespace mt
