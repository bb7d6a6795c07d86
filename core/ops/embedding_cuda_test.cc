// Embedding and its backward on the GPU against the CPU backend: both are bitwise the CPU's (a row
// copy, and the same f32 summation order via a stable sort), for whole tables and vocab shards,
// i32 and i64 ids, every dtype. Bad ids give the CPU's error. Skipped without a GPU.
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/embedding.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::CudaOpTest;
using ::mt::testing::FromDoubles;
using ::mt::testing::kBitwise;
using ::mt::testing::Mirror;
using ::mt::testing::Mirrored;
using ::mt::testing::MirrorNaN;
using ::mt::testing::RandomInts;
using ::mt::testing::RandomTensor;
using ::mt::testing::Side;

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
        const Mirrored ids = Mirror(RandomInts(c.ids, it, seed++, 0, vocab));
        const Mirrored table = Mirror(RandomTensor({c.V, c.C}, dt, seed++));
        Shape out_shape = c.ids;
        out_shape.push_back(c.C);
        const Mirrored out = MirrorNaN(out_shape, dt);
        EXPECT_TRUE(OnBothMatch(out, kBitwise, [&](const ExecContext& ec, Side s) {
          return Embedding(ec, ids[s], table[s], out[s], c.range);
        }));

        // Backward accumulates into a non-zero table.
        const Mirrored dout = Mirror(RandomTensor(out_shape, dt, seed++));
        const Mirrored dtable = Mirror(RandomTensor({c.V, c.C}, dt, seed++));
        EXPECT_TRUE(OnBothMatch(dtable, kBitwise, [&](const ExecContext& ec, Side s) {
          return EmbeddingBackward(ec, ids[s], dout[s], dtable[s], c.range);
        }));
      }
    }
  }
}

TEST_F(EmbeddingCudaTest, BadIdsGiveTheCpusError) {
  for (DType it : {DType::kI32, DType::kI64}) {
    const Mirrored ids = Mirror(FromDoubles({2, 4}, it, {1, 2, 3, 9, 0, -1, 12, 2}));
    const Mirrored table = Mirror(RandomTensor({9, 3}, DType::kF32, 5));
    const Mirrored out = MirrorNaN({2, 4, 3}, DType::kF32);
    auto run = [&](Side s) { return Embedding(ctx(s), ids[s], table[s], out[s]); };
    const absl::Status gpu = run(Side::kGpu);
    EXPECT_EQ(gpu.code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(gpu, run(Side::kCpu));  // Same code and message: element 3, value 9.
    const absl::Status gpu_back =
        EmbeddingBackward(gpu_, ids[Side::kGpu], out[Side::kGpu], table[Side::kGpu]);
    EXPECT_EQ(gpu_back.code(), absl::StatusCode::kOutOfRange) << gpu_back;
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
