// Cross-entropy (serial and the vocab-parallel phases) on the GPU against the CPU backend: every
// dtype, i32 and i64 targets with ignored rows, vocabularies from 1 to GPT-2's. Bad targets give
// the CPU's error. Skipped without a GPU.
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/sharded_cross_entropy.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::CudaOpTest;
using ::mt::testing::FromDoubles;
using ::mt::testing::GpuMatchesCpu;
using ::mt::testing::kBitwise;
using ::mt::testing::Mirror;
using ::mt::testing::Mirrored;
using ::mt::testing::MirrorNaN;
using ::mt::testing::RandomInts;
using ::mt::testing::RandomTensor;
using ::mt::testing::Side;
using ::mt::testing::ToDoubles;
using ::mt::testing::Tolerance;
using ::mt::testing::UnitRoundoff;

const double kU32 = UnitRoundoff(DType::kF32);

// Targets in [0, vocab) with every fifth row ignored.
Tensor Targets(int64_t n, DType dt, int64_t vocab, uint64_t seed) {
  Tensor t = RandomInts({n}, dt, seed, 0, vocab);
  std::vector<double> v = ToDoubles(t.view());
  for (int64_t i = 0; i < n; i += 5) v[i] = static_cast<double>(kIgnoreIndex);
  return FromDoubles({n}, dt, v);
}

using CrossEntropyCudaTest = CudaOpTest;

TEST_F(CrossEntropyCudaTest, ForwardAndBackwardMatchCpu) {
  uint64_t seed = 1;
  const int64_t kSizes[][2] = {{1, 1}, {3, 17}, {7, 1000}, {4, 50257}};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (DType it : {DType::kI32, DType::kI64}) {
      for (const auto& nv : kSizes) {
        const int64_t N = nv[0], V = nv[1];
        SCOPED_TRACE(absl::StrCat(DTypeName(dt), " targets ", DTypeName(it), " N ", N, " V ", V));
        const Mirrored logits = Mirror(RandomTensor({N, V}, dt, seed++, -8.0, 8.0));
        const Mirrored targets = Mirror(Targets(N, it, V, seed++));
        const Mirrored dlosses = Mirror(RandomTensor({N}, DType::kF32, seed++, 0.1, 1.0));
        const Mirrored losses = MirrorNaN({N}, DType::kF32), dx = MirrorNaN({N, V}, dt);
        ASSERT_TRUE(OnBoth([&](const ExecContext& c, Side s) {
          return CrossEntropy(c, logits[s], targets[s], losses[s]);
        }));
        // Sums of V exponentials: within about (V / 8 + 16) u32 relative of each other whether
        // the CPU accumulates in f64 or in eight f32 lanes; the log differs by as much.
        const double sum_tol = (V / 8.0 + 16.0) * kU32;
        EXPECT_TRUE(GpuMatchesCpu(losses, Tolerance{4 * kU32, sum_tol}));

        ASSERT_TRUE(OnBoth([&](const ExecContext& c, Side s) {
          return CrossEntropyBackward(c, logits[s], targets[s], dlosses[s], dx[s]);
        }));
        EXPECT_TRUE(GpuMatchesCpu(dx, Tolerance{sum_tol, 4 * kU32}));
        // In place over the logits.
        const absl::Status s = CrossEntropyBackward(gpu_, logits[Side::kGpu], targets[Side::kGpu],
                                                    dlosses[Side::kGpu], logits[Side::kGpu]);
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_TRUE(GpuMatchesCpu(logits[Side::kGpu], dx.GpuToHost().view(), kBitwise));
      }
    }
  }
}

TEST_F(CrossEntropyCudaTest, BadTargetsGiveTheCpusError) {
  const Mirrored logits = Mirror(RandomTensor({4, 6}, DType::kF32, 3));
  const Mirrored targets = Mirror(FromDoubles({4}, DType::kI64, {1, -100, 6, -3}));
  const Mirrored losses = MirrorNaN({4}, DType::kF32);
  auto run = [&](Side s) { return CrossEntropy(ctx(s), logits[s], targets[s], losses[s]); };
  const absl::Status gpu = run(Side::kGpu);
  EXPECT_EQ(gpu.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(gpu, run(Side::kCpu));
}

// The four phases of the vocab-parallel loss on one shard (no communication needed to compare).
// Each phase after the first starts from the CPU's results of the one before (uploaded), so each
// is compared alone.
TEST_F(CrossEntropyCudaTest, ShardedPhasesMatchCpu) {
  uint64_t seed = 500;
  struct Case {
    int64_t n, vs;
    VocabShard shard;
  };
  // The last shard of a padded vocabulary masks its tail; a shard past valid_vocab is all masked.
  const Case cases[] = {
      {3, 17, {0, 17}}, {5, 128, {256, 300}}, {9, 1031, {1031, 2000}}, {2, 64, {512, 500}}};
  for (DType it : {DType::kI32, DType::kI64}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(absl::StrCat("targets ", DTypeName(it), " N ", c.n, " Vs ", c.vs, " start ",
                                c.shard.vocab_start, " valid ", c.shard.valid_vocab));
      const Mirrored logits = Mirror(RandomTensor({c.n, c.vs}, DType::kF32, seed++, -6.0, 6.0));
      // Targets anywhere in the vocabulary: mostly other ranks' columns, some this shard's.
      std::vector<double> tv = ToDoubles(Targets(c.n, it, c.shard.valid_vocab, seed++).view());
      if (c.shard.vocab_start < c.shard.valid_vocab) tv[1 % c.n] = c.shard.vocab_start;
      const Mirrored targets = Mirror(FromDoubles({c.n}, it, tv));
      const Mirrored dlosses = Mirror(RandomTensor({c.n}, DType::kF32, seed++, 0.1, 1.0));

      const Mirrored row_max = MirrorNaN({c.n}, DType::kF32);
      ASSERT_TRUE(OnBoth([&](const ExecContext& ec, Side s) {
        return ShardedRowMax(ec, logits[s], c.shard, row_max[s]);
      }));
      EXPECT_TRUE(GpuMatchesCpu(row_max, kBitwise));  // Exact.
      const Mirrored max_in = Mirror(row_max.cpu().view());
      const Mirrored parts = MirrorNaN({c.n, 2}, DType::kF32);
      ASSERT_TRUE(OnBoth([&](const ExecContext& ec, Side s) {
        return ShardedTargetAndSumExp(ec, logits[s], targets[s], c.shard, max_in[s], parts[s]);
      }));
      // The GPU sums f64 exponentials in f64; the CPU may use a fast f32 exp (relative error
      // below 3e-7) summed in eight f32 lanes: within about (Vs / 8 + 16) u32 of each other.
      EXPECT_TRUE(GpuMatchesCpu(parts, Tolerance{(c.vs / 8.0 + 16.0) * kU32, 0}));
      const Mirrored parts_in = Mirror(parts.cpu().view());
      const Mirrored loss = MirrorNaN({c.n}, DType::kF32);
      ASSERT_TRUE(OnBoth([&](const ExecContext& ec, Side s) {
        return ShardedLoss(ec, targets[s], max_in[s], parts_in[s], loss[s]);
      }));
      // Every column masked: -inf partial losses on both sides.
      const bool all_masked = c.shard.vocab_start >= c.shard.valid_vocab;
      EXPECT_TRUE(GpuMatchesCpu(loss, all_masked ? kBitwise : Tolerance{2 * kU32, 4 * kU32}));
      const Mirrored dx = MirrorNaN({c.n, c.vs}, DType::kF32);
      ASSERT_TRUE(OnBoth([&](const ExecContext& ec, Side s) {
        return ShardedCrossEntropyBackward(ec, logits[s], targets[s], c.shard, max_in[s],
                                           parts_in[s], dlosses[s], dx[s]);
      }));
      // softmax * dloss to a few u32 (fast f32 exp on the CPU, f64 on the GPU); the target's
      // "- dloss" cancels, so allow an absolute u32-sized error there.
      EXPECT_TRUE(GpuMatchesCpu(dx, Tolerance{16 * kU32, 4 * kU32}));
    }
  }
  // A target outside the vocabulary: the CPU's error.
  const Mirrored logits = Mirror(RandomTensor({2, 8}, DType::kF32, 1));
  const Mirrored targets = Mirror(FromDoubles({2}, DType::kI32, {3, 40}));
  const Mirrored row_max = MirrorNaN({2}, DType::kF32), parts = MirrorNaN({2, 2}, DType::kF32);
  auto run = [&](Side s) {
    return ShardedTargetAndSumExp(ctx(s), logits[s], targets[s], VocabShard{0, 16}, row_max[s],
                                  parts[s]);
  };
  const absl::Status gpu = run(Side::kGpu);
  EXPECT_EQ(gpu.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(gpu, run(Side::kCpu));
}

}  // namespace
}  // namespace ops
}  // namespace mt
