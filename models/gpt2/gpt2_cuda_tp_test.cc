// Tensor-parallel GPT-2 on a GPU (run under mpirun; every rank is one TP rank, all on cuda:0, the
// MPI communicator staging the CUDA views through host memory): with dropout on, the TP model's
// loss and every local gradient match the serial f32 model on the CPU (the slices this rank holds)
// within float32 rounding of differently ordered sums. Skipped (on every rank alike) without a GPU.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "comm/mpi_testutil.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2.h"
#include "models/testing/cuda_model_testutil.h"

namespace mt {
namespace models {
namespace {

using ::mt::comm::testing::MpiTest;
using ::mt::models::testing::GpuContext;
using ::mt::models::testing::HostGrads;
using ::mt::models::testing::MakeGpuContext;

ModelConfig SmallConfig() {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.vocab_size = 101;
  c.make_vocab_size_divisible_by = 8;  // Padded to 104 (TP 1) and 112 (TP 2).
  c.max_position_embeddings = 16;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.init_std = 0.2;
  return c;
}

nn::StepContext Step(const ExecContext* ec, comm::Communicator* tp) {
  nn::StepContext sc;
  sc.exec = ec;
  sc.tp = tp;
  sc.dropout_seed = 99;
  sc.micro_step = 4;
  return sc;
}

TEST_F(MpiTest, TensorParallelGptOnTheGpuMatchesTheSerialCpuModel) {
  absl::StatusOr<std::unique_ptr<GpuContext>> gpu = MakeGpuContext();
  if (!gpu.ok()) GTEST_SKIP() << gpu.status().message();  // The same on every rank.
  const int tp = comm_->size(), rank = comm_->rank();
  const ModelConfig c = SmallConfig();
  const int B = 3, T = 9;
  Tensor tokens = Tensor::Host({B, T}, DType::kI32), labels = Tensor::Host({B, T}, DType::kI32);
  for (int i = 0; i < B * T; ++i) {
    tokens.data_as<int32_t>()[i] = (i * 11 + 2) % c.vocab_size;
    labels.data_as<int32_t>()[i] = i % 5 == 2 ? -100 : (i * 13 + 5) % c.vocab_size;
  }

  ExecContext cec;
  nn::ParameterStore serial_store(0, 1);
  auto serial = GptModel::Create(c, &serial_store);
  ASSERT_TRUE(serial.ok()) << serial.status();
  ASSERT_TRUE(serial_store.Allocate(7).ok());
  auto serial_loss =
      (*serial)->ForwardBackward(Step(&cec, nullptr), LanguageModelBatch(tokens.view(), labels.view()), Backward::kYes);
  ASSERT_TRUE(serial_loss.ok()) << serial_loss.status();

  const ExecContext& gec = (*gpu)->exec;
  nn::ParameterStore store(rank, tp, DType::kF32, Device::Cuda(0));
  auto model = GptModel::Create(c, &store);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(store.Allocate(7).ok());
  comm_->ResetCounters();
  auto loss =
      (*model)->ForwardBackward(Step(&gec, comm_.get()), LanguageModelBatch(tokens.view(), labels.view()), Backward::kYes);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR(loss->total, serial_loss->total, 1e-5 * std::fabs(serial_loss->total)) << "tp=" << tp;
  if (tp > 1) {
    // Embedding 1 + 2 per layer + cross-entropy 2 forward; 2 per layer + tied logits 1 backward.
    EXPECT_EQ(comm_->counters().all_reduce, 1 + 2 * 2 + 2 + 2 * 2 + 1);
  }

  // Every local gradient is the serial one's slice (real vocabulary rows only).
  const std::vector<std::vector<double>> local = HostGrads(store, gec);
  const std::vector<std::vector<double>> serial_grads = HostGrads(serial_store, cec);
  ASSERT_EQ(local.size(), static_cast<size_t>(store.size()));
  for (int i = 0; i < store.size(); ++i) {
    const nn::ParamSpec& spec = store.spec(i);
    auto si = serial_store.Find(spec.name);
    ASSERT_TRUE(si.ok()) << spec.name;
    const Shape& ls = store.value(i).shape;
    const Shape& ss = serial_store.value(*si).shape;
    int64_t inner = 1;
    for (int d = spec.split_dim + 1; spec.split_dim >= 0 && d < static_cast<int>(ls.size()); ++d) {
      inner *= ls[d];
    }
    const std::vector<double>& sg = serial_grads[*si];
    double gmax = 0;
    for (double g : sg) gmax = std::max(gmax, std::fabs(g));
    int mismatched = 0;
    for (int64_t j = 0; j < static_cast<int64_t>(local[i].size()); ++j) {
      int64_t sj = j;
      if (spec.split_dim >= 0) {
        const int64_t extent = ls[spec.split_dim];
        const int64_t outer = j / (extent * inner), mid = (j / inner) % extent;
        sj = (outer * ss[spec.split_dim] + rank * extent + mid) * inner + j % inner;
      }
      if (spec.name == "embedding.word.weight" && sj / c.hidden_size >= c.vocab_size) continue;
      if (sj >= static_cast<int64_t>(sg.size())) continue;
      if (std::fabs(local[i][j] - sg[sj]) > 1e-4 * gmax + 1e-9) ++mismatched;
    }
    EXPECT_EQ(mismatched, 0) << spec.name << " tp=" << tp << " (max |g| " << gmax << ")";
  }

  // Logits gathered across the TP ranks (CUDA views through MPI) into a host buffer.
  nn::StepContext ssc = Step(&cec, nullptr), sc = Step(&gec, comm_.get());
  ssc.mode = sc.mode = nn::Mode::kEval;
  const int64_t sv = (*serial)->padded_vocab(), v = (*model)->padded_vocab();
  Tensor full_serial = Tensor::Host({B * T, sv}, DType::kF32);
  Tensor full = Tensor::Host({B * T, v}, DType::kF32);
  ASSERT_TRUE((*serial)->Logits(ssc, tokens.view(), full_serial.view()).ok());
  const absl::Status s = (*model)->Logits(sc, tokens.view(), full.view());
  ASSERT_TRUE(s.ok()) << s;
  int bad_logits = 0;
  for (int64_t n = 0; n < B * T; ++n) {
    for (int64_t k = 0; k < c.vocab_size; ++k) {
      const float a = full.data_as<float>()[n * v + k],
                  e = full_serial.data_as<float>()[n * sv + k];
      if (!(std::fabs(a - e) <= 1e-4 * (1 + std::fabs(e)))) ++bad_logits;
    }
  }
  EXPECT_EQ(bad_logits, 0) << "tp=" << tp;
}

}  // namespace
}  // namespace models
}  // namespace mt
