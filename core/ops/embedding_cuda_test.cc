// Embedding and its backward on the GPU against the CPU backend: both are bitwise the CPU's (a row
// copy, and the same f32 summation order via a stable sort), for whole tables and vocab shards,
// i32 and i64 ids, every dtype. Bad ids give the CPU's error. Skipped without a GPU.
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/embedding.h"
#include "core/ops/testutil.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::CudaOpTest;
using ::mt::testing::EmptyDevice;
using ::mt::testing::RandomInts;
using ::mt::testing::RandomTensor;
using ::mt::testing::SameBits;
using ::mt::testing::ToDevice;
using ::mt::testing::ToHost;

using EmbeddingCudaTest = CudaOpTest;

TEST_F(EmbeddingCudaTest, ForwardAndBackwardAreBitwiseTheCpus) {
  uint64_t seed = 1;
  struct Case {
    Shape ids;
    int64_t V, C;
    EmbeddingRange range;
  };
  const Case cases[] = {
      {{1}, 1, 1, {}},
      {{3, 17}, 11, 7, {}},  // Many repeats of few rows.
      {{2, 129}, 1000, 33, {}},
      {{4, 257}, 300, 129, {0, 1200}},    // Rank 0 of a vocab-parallel table.
      {{4, 257}, 300, 129, {600, 1200}},  // A middle shard: most ids fall outside it.
      {{1, 5000}, 50, 300, {}},           // Long runs per row, more columns than a block.
  };
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (DType it : {DType::kI32, DType::kI64}) {
      for (const Case& c : cases) {
        SCOPED_TRACE(absl::StrCat(DTypeName(dt), " ids ", DTypeName(it), ShapeToString(c.ids),
                                  " V ", c.V, " C ", c.C, " start ", c.range.vocab_start));
        const int64_t vocab = c.range.global_vocab == 0 ? c.V : c.range.global_vocab;
        Tensor ids = RandomInts(c.ids, it, seed++, 0, vocab);
        Tensor table = RandomTensor({c.V, c.C}, dt, seed++);
        Shape out_shape = c.ids;
        out_shape.push_back(c.C);
        Tensor out_cpu = Tensor::Host(out_shape, dt);
        ASSERT_TRUE(Embedding(cpu_, ids.view(), table.view(), out_cpu.view(), c.range).ok());
        Tensor ids_dev = ToDevice(ids), table_dev = ToDevice(table);
        Tensor out_dev = EmptyDevice(out_shape, dt);
        absl::Status s = Embedding(gpu_, ids_dev.view(), table_dev.view(), out_dev.view(), c.range);
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_TRUE(SameBits(ToHost(out_dev.view()).view(), out_cpu.view()));

        // Backward accumulates into a non-zero table.
        Tensor dout = RandomTensor(out_shape, dt, seed++);
        Tensor dtable_cpu = RandomTensor({c.V, c.C}, dt, seed);
        Tensor dtable_dev = ToDevice(dtable_cpu);
        ++seed;
        ASSERT_TRUE(
            EmbeddingBackward(cpu_, ids.view(), dout.view(), dtable_cpu.view(), c.range).ok());
        Tensor dout_dev = ToDevice(dout);
        s = EmbeddingBackward(gpu_, ids_dev.view(), dout_dev.view(), dtable_dev.view(), c.range);
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_TRUE(SameBits(ToHost(dtable_dev.view()).view(), dtable_cpu.view()));
      }
    }
  }
}

TEST_F(EmbeddingCudaTest, BadIdsGiveTheCpusError) {
  for (DType it : {DType::kI32, DType::kI64}) {
    Tensor ids = testing::FromDoubles({2, 4}, it, {1, 2, 3, 9, 0, -1, 12, 2});
    Tensor table = RandomTensor({9, 3}, DType::kF32, 5);
    Tensor out = Tensor::Host({2, 4, 3}, DType::kF32);
    const absl::Status cpu = Embedding(cpu_, ids.view(), table.view(), out.view());
    Tensor ids_dev = ToDevice(ids), table_dev = ToDevice(table);
    Tensor out_dev = EmptyDevice({2, 4, 3}, DType::kF32);
    const absl::Status gpu = Embedding(gpu_, ids_dev.view(), table_dev.view(), out_dev.view());
    EXPECT_EQ(gpu.code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(gpu, cpu);  // Same code and message: element 3, value 9.
    const absl::Status gpu_back =
        EmbeddingBackward(gpu_, ids_dev.view(), out_dev.view(), table_dev.view());
    EXPECT_EQ(gpu_back.code(), absl::StatusCode::kOutOfRange) << gpu_back;
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
