// Tensor-parallel GPT-2 on a GPU (run under mpirun; every rank is one TP rank, all on cuda:0, the
// MPI communicator staging the CUDA views through host memory): with dropout on, the TP model's
// loss, every local gradient and the logits gathered into a host buffer match the serial f32
// model on the CPU (the slices this rank holds) within float32 rounding of differently ordered
// sums (models/testing/model_testutil). Skipped (on every rank alike) without a GPU.
#include <memory>

#include "comm/mpi_testutil.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2.h"
#include "models/testing/cuda_model_testutil.h"
#include "models/testing/model_testutil.h"

namespace mt {
namespace models {
namespace {

using ::mt::comm::testing::MpiTest;
using ::mt::models::testing::AllReduces;
using ::mt::models::testing::ExpectTensorParallelMatchesSerial;
using ::mt::models::testing::GpuContext;
using ::mt::models::testing::MakeGpuContext;
using ::mt::models::testing::SmallGpuTestConfig;
using ::mt::models::testing::TensorParallelCheck;

TEST_F(MpiTest, TensorParallelGptOnTheGpuMatchesTheSerialCpuModel) {
  absl::StatusOr<std::unique_ptr<GpuContext>> gpu = MakeGpuContext();
  if (!gpu.ok()) GTEST_SKIP() << gpu.status().message();  // The same on every rank.
  // Padded to 104 (TP 1) and 112 (TP 2).
  const ModelConfig c = SmallGpuTestConfig(Family::kGpt2, 101);
  const int B = 3, T = 9;
  Tensor tokens = Tensor::Host({B, T}, DType::kI32), labels = Tensor::Host({B, T}, DType::kI32);
  for (int i = 0; i < B * T; ++i) {
    tokens.data_as<int32_t>()[i] = (i * 11 + 2) % c.vocab_size;
    labels.data_as<int32_t>()[i] = i % 5 == 2 ? -100 : (i * 13 + 5) % c.vocab_size;
  }
  TensorParallelCheck check;
  check.grad_rel = 1e-4;  // cuBLAS and the kernels sum in other orders than the CPU.
  check.tp_exec = &(*gpu)->exec;
  const AllReduces counts = ExpectTensorParallelMatchesSerial(
      *comm_, c, LanguageModelBatch(tokens.view(), labels.view()), check);
  if (comm_->size() > 1) {
    // Embedding 1 + 2 per layer + cross-entropy 2 forward; 2 per layer + tied logits 1 backward.
    EXPECT_EQ(counts.forward + counts.backward, 1 + 2 * 2 + 2 + 2 * 2 + 1);
  }
}

// Sequence parallelism on the GPU (TP > 1): the serial CPU model's loss, gradient slices and
// gathered logits, with the sequence slices, gather buffers and norm-gradient sums on the device.
TEST_F(MpiTest, SequenceParallelGptOnTheGpuMatchesTheSerialCpuModel) {
  if (comm_->size() == 1) GTEST_SKIP() << "sequence parallelism needs TP > 1";
  absl::StatusOr<std::unique_ptr<GpuContext>> gpu = MakeGpuContext();
  if (!gpu.ok()) GTEST_SKIP() << gpu.status().message();  // The same on every rank.
  const ModelConfig c = SmallGpuTestConfig(Family::kGpt2, 101);
  const int B = 2, T = 8;  // T divisible by TP 2.
  Tensor tokens = Tensor::Host({B, T}, DType::kI32), labels = Tensor::Host({B, T}, DType::kI32);
  for (int i = 0; i < B * T; ++i) {
    tokens.data_as<int32_t>()[i] = (i * 7 + 3) % c.vocab_size;
    labels.data_as<int32_t>()[i] = (i * 13 + 5) % c.vocab_size;
  }
  TensorParallelCheck check;
  check.grad_rel = 1e-4;  // cuBLAS and the kernels sum in other orders than the CPU.
  check.tp_exec = &(*gpu)->exec;
  check.options.sequence_parallel = true;
  const AllReduces counts = ExpectTensorParallelMatchesSerial(
      *comm_, c, LanguageModelBatch(tokens.view(), labels.view()), check);
  // Embedding 1 + cross-entropy 2 forward; per layer 1 (its norms' gradients), the final norm's 1
  // and the tied logits' 1 backward.
  EXPECT_EQ(counts.forward + counts.backward, 1 + 2 + 2 + 1 + 1);
}

}  // namespace
}  // namespace models
}  // namespace mt
