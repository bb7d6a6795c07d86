// Tensor-parallel invariance of GPT-2 (run under mpirun with 1, 2 and 4 ranks; every rank is one
// TP rank): with the same seed, the TP model holds the serial model's weight slices, and gives the
// serial model's loss and gradients within float32 rounding, with dropout on; a transformer layer
// costs exactly two all-reduces forward and two backward. In bf16 compute (f32 masters), the TP
// model gives the serial bf16 model's loss and gradients within bf16 rounding.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "comm/mpi_testutil.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2.h"

namespace mt {
namespace models {
namespace {

using ::mt::comm::testing::MpiTest;

ModelConfig SmallConfig(int layers) {
  ModelConfig c;
  c.num_layers = layers;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.vocab_size = 37;
  c.make_vocab_size_divisible_by = 8;  // Padded to 40 (TP 1), 48 (TP 2), 64 (TP 4).
  c.max_position_embeddings = 8;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.init_std = 0.2;
  return c;
}

struct Run {
  double loss = 0;
  std::unique_ptr<nn::ParameterStore> store;
  std::unique_ptr<GptModel> model;
};

void MakeBatch(int B, int T, int V, Tensor* tokens, Tensor* labels) {
  *tokens = Tensor::Host({B, T}, DType::kI32);
  *labels = Tensor::Host({B, T}, DType::kI32);
  for (int i = 0; i < B * T; ++i) {
    tokens->data_as<int32_t>()[i] = (i * 11 + 2) % V;
    labels->data_as<int32_t>()[i] = (i * 13 + 5) % V;
  }
}

nn::StepContext Context(const ExecContext* ec, comm::Communicator* tp) {
  nn::StepContext sc;
  sc.exec = ec;
  sc.tp = tp;
  sc.dropout_seed = 1234;
  sc.micro_step = 3;
  sc.sample_offset = 0;
  return sc;
}

TEST_F(MpiTest, TensorParallelGptMatchesSerialWithDropout) {
  const int tp = comm_->size(), rank = comm_->rank();
  const ModelConfig c = SmallConfig(2);
  const int B = 3, T = 7;
  Tensor tokens, labels;
  MakeBatch(B, T, static_cast<int>(c.vocab_size), &tokens, &labels);
  ExecContext ec;

  // The serial model, on every rank.
  nn::ParameterStore serial_store(0, 1);
  auto serial = GptModel::Create(c, &serial_store);
  ASSERT_TRUE(serial.ok()) << serial.status();
  ASSERT_TRUE(serial_store.Allocate(7).ok());
  nn::StepContext ssc = Context(&ec, nullptr);
  auto serial_loss = (*serial)->ForwardBackward(ssc, LanguageModelBatch(tokens.view(), labels.view()), Backward::kYes);
  ASSERT_TRUE(serial_loss.ok()) << serial_loss.status();

  // The TP model over all ranks.
  nn::ParameterStore store(rank, tp);
  auto model = GptModel::Create(c, &store);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(store.Allocate(7).ok());
  nn::StepContext sc = Context(&ec, comm_.get());
  auto loss = (*model)->ForwardBackward(sc, LanguageModelBatch(tokens.view(), labels.view()), Backward::kYes);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR(loss->total, serial_loss->total, 1e-5 * std::fabs(serial_loss->total)) << "tp=" << tp;

  // Every local value and gradient is the serial one's slice (real vocabulary rows only).
  for (int i = 0; i < store.size(); ++i) {
    const nn::ParamSpec& spec = store.spec(i);
    auto si = serial_store.Find(spec.name);
    ASSERT_TRUE(si.ok()) << spec.name;
    const TensorView lv = store.value(i), lg = store.grad(i);
    const TensorView sv = serial_store.value(*si), sg = serial_store.grad(*si);
    const int64_t inner = spec.split_dim < 0 ? 0 : [&] {
      int64_t n = 1;
      for (int d = spec.split_dim + 1; d < lv.rank(); ++d) n *= lv.shape[d];
      return n;
    }();
    double gmax = 0;
    for (int64_t j = 0; j < sg.numel(); ++j) gmax = std::max(gmax, std::fabs(double{sg.data_as<float>()[j]}));
    int mismatched_values = 0, mismatched_grads = 0;
    for (int64_t j = 0; j < lv.numel(); ++j) {
      int64_t sj = j;
      if (spec.split_dim >= 0) {
        const int64_t local_extent = lv.shape[spec.split_dim];
        const int64_t outer = j / (local_extent * inner), mid = (j / inner) % local_extent;
        sj = (outer * sv.shape[spec.split_dim] + rank * local_extent + mid) * inner + j % inner;
      }
      if (spec.name == "embedding.word.weight" && sj / c.hidden_size >= c.vocab_size) continue;
      if (sj >= sv.numel()) continue;
      if (lv.data_as<float>()[j] != sv.data_as<float>()[sj]) ++mismatched_values;
      if (std::fabs(lg.data_as<float>()[j] - sg.data_as<float>()[sj]) > 1e-5 * gmax + 1e-9) {
        ++mismatched_grads;
      }
    }
    EXPECT_EQ(mismatched_values, 0) << spec.name << " tp=" << tp;
    EXPECT_EQ(mismatched_grads, 0) << spec.name << " tp=" << tp << " (max |g| " << gmax << ")";
  }
}

// Index in the serial tensor of element j of this rank's slice of `spec`.
int64_t SerialIndex(const nn::ParamSpec& spec, const TensorView& local, const TensorView& serial,
                    int rank, int64_t j) {
  if (spec.split_dim < 0) return j;
  int64_t inner = 1;
  for (int d = spec.split_dim + 1; d < local.rank(); ++d) inner *= local.shape[d];
  const int64_t local_extent = local.shape[spec.split_dim];
  const int64_t outer = j / (local_extent * inner), mid = (j / inner) % local_extent;
  return (outer * serial.shape[spec.split_dim] + rank * local_extent + mid) * inner + j % inner;
}

TEST_F(MpiTest, TensorParallelBf16GptMatchesSerialBf16WithDropout) {
  const int tp = comm_->size(), rank = comm_->rank();
  const ModelConfig c = SmallConfig(2);
  const int B = 3, T = 7;
  Tensor tokens, labels;
  MakeBatch(B, T, static_cast<int>(c.vocab_size), &tokens, &labels);
  ExecContext ec;
  nn::ParameterStore serial_store(0, 1, DType::kBF16), store(rank, tp, DType::kBF16);
  auto serial = GptModel::Create(c, &serial_store);
  auto model = GptModel::Create(c, &store);
  ASSERT_TRUE(serial.ok() && model.ok());
  ASSERT_TRUE(serial_store.Allocate(7).ok() && store.Allocate(7).ok());
  nn::StepContext ssc = Context(&ec, nullptr), sc = Context(&ec, comm_.get());
  auto serial_loss = (*serial)->ForwardBackward(ssc, LanguageModelBatch(tokens.view(), labels.view()), Backward::kYes);
  auto loss = (*model)->ForwardBackward(sc, LanguageModelBatch(tokens.view(), labels.view()), Backward::kYes);
  ASSERT_TRUE(serial_loss.ok() && loss.ok());
  // The TP model rounds different partial results to bf16 (each rank's share of a row-parallel
  // product before the all-reduce, the embedding's zero-padded shards...), so it agrees with the
  // serial bf16 model to a few bf16 roundings: 8 u relative for the loss, 32 u (norm-wise) for
  // each gradient slice.
  const double u = ::mt::testing::UnitRoundoff(DType::kBF16);
  const double loss_err = std::fabs(loss->total - serial_loss->total) / std::fabs(serial_loss->total);
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
      const int64_t sj = SerialIndex(spec, lv, sv, rank, j);
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
    std::printf("bf16 TP=%d vs serial bf16: relative loss error %.3g (%.2f u), worst relative "
                "gradient error %.3g (%.2f u)\n",
                tp, loss_err, loss_err / u, worst, worst / u);
  }
}

TEST_F(MpiTest, TwoAllReducesForwardAndTwoBackwardPerLayer) {
  const int tp = comm_->size(), rank = comm_->rank();
  if (tp == 1) GTEST_SKIP() << "counts need TP > 1";
  const int B = 2, T = 5;
  int64_t forward[3] = {0, 0, 0}, backward[3] = {0, 0, 0};
  for (int layers : {1, 2}) {
    const ModelConfig c = SmallConfig(layers);
    Tensor tokens, labels;
    MakeBatch(B, T, static_cast<int>(c.vocab_size), &tokens, &labels);
    nn::ParameterStore store(rank, tp);
    auto model = GptModel::Create(c, &store);
    ASSERT_TRUE(model.ok());
    ASSERT_TRUE(store.Allocate(1).ok());
    ExecContext ec;
    nn::StepContext sc = Context(&ec, comm_.get());
    comm_->ResetCounters();
    ASSERT_TRUE((*model)->ForwardBackward(sc, LanguageModelBatch(tokens.view(), labels.view()), Backward::kNo).ok());
    const comm::CommCounters f = comm_->ResetCounters();
    ASSERT_TRUE((*model)->ForwardBackward(sc, LanguageModelBatch(tokens.view(), labels.view()), Backward::kYes).ok());
    const comm::CommCounters fb = comm_->ResetCounters();
    forward[layers] = f.all_reduce;
    backward[layers] = fb.all_reduce - f.all_reduce;
    EXPECT_EQ(f.all_gather + f.reduce_scatter + f.broadcast + f.send + f.recv, 0);
  }
  // Per layer: exactly two each way.
  EXPECT_EQ(forward[2] - forward[1], 2);
  EXPECT_EQ(backward[2] - backward[1], 2);
  // Whole model: embedding (1) + 2 per layer + cross-entropy (max, then [target, sum-exp]) forward;
  // 2 per layer + the tied output layer's input gradient (1) backward.
  EXPECT_EQ(forward[2], 1 + 2 * 2 + 2);
  EXPECT_EQ(backward[2], 2 * 2 + 1);
}

TEST_F(MpiTest, GatheredLogitsMatchSerial) {
  const int tp = comm_->size(), rank = comm_->rank();
  const ModelConfig c = SmallConfig(1);
  Tensor tokens, labels;
  MakeBatch(2, 4, static_cast<int>(c.vocab_size), &tokens, &labels);
  ExecContext ec;
  nn::ParameterStore serial_store(0, 1), store(rank, tp);
  auto serial = GptModel::Create(c, &serial_store);
  auto model = GptModel::Create(c, &store);
  ASSERT_TRUE(serial.ok() && model.ok());
  ASSERT_TRUE(serial_store.Allocate(5).ok() && store.Allocate(5).ok());
  nn::StepContext ssc = Context(&ec, nullptr), sc = Context(&ec, comm_.get());
  ssc.mode = sc.mode = nn::Mode::kEval;
  Tensor full_serial = Tensor::Zeros({8, (*serial)->padded_vocab()}, DType::kF32);
  Tensor full = Tensor::Zeros({8, (*model)->padded_vocab()}, DType::kF32);
  ASSERT_TRUE((*serial)->Logits(ssc, tokens.view(), full_serial.view()).ok());
  ASSERT_TRUE((*model)->Logits(sc, tokens.view(), full.view()).ok());
  for (int n = 0; n < 8; ++n) {
    for (int v = 0; v < c.vocab_size; ++v) {
      const float a = full.data_as<float>()[n * (*model)->padded_vocab() + v];
      const float b = full_serial.data_as<float>()[n * (*serial)->padded_vocab() + v];
      EXPECT_NEAR(a, b, 1e-5 * (1 + std::fabs(b))) << n << " " << v;
    }
  }
}

}  // namespace
}  // namespace models
}  // namespace mt
