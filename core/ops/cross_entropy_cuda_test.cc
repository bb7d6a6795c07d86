// Cross-entropy (serial and the vocab-parallel phases) on the GPU against the CPU backend: every
// dtype, i32 and i64 targets with ignored rows, vocabularies from 1 to GPT-2's. Bad targets give
// the CPU's error. Skipped without a GPU.
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/sharded_cross_entropy.h"
#include "core/ops/testutil.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::CudaOpTest;
using ::mt::testing::EmptyDevice;
using ::mt::testing::RandomInts;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDevice;
using ::mt::testing::ToDoubles;
using ::mt::testing::ToHost;
using ::mt::testing::UnitRoundoff;

const double kU32 = UnitRoundoff(DType::kF32);

// Targets in [0, vocab) with every fifth row ignored.
Tensor Targets(int64_t n, DType dt, int64_t vocab, uint64_t seed) {
  Tensor t = RandomInts({n}, dt, seed, 0, vocab);
  std::vector<double> v = ToDoubles(t.view());
  for (int64_t i = 0; i < n; i += 5) v[i] = static_cast<double>(kIgnoreIndex);
  return testing::FromDoubles({n}, dt, v);
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
        Tensor logits = RandomTensor({N, V}, dt, seed++, -8.0, 8.0);
        Tensor targets = Targets(N, it, V, seed++);
        Tensor dlosses = RandomTensor({N}, DType::kF32, seed++, 0.1, 1.0);
        Tensor losses_cpu = Tensor::Host({N}, DType::kF32);
        ASSERT_TRUE(CrossEntropy(cpu_, logits.view(), targets.view(), losses_cpu.view()).ok());
        Tensor logits_dev = ToDevice(logits), targets_dev = ToDevice(targets);
        Tensor losses_dev = EmptyDevice({N}, DType::kF32);
        absl::Status s =
            CrossEntropy(gpu_, logits_dev.view(), targets_dev.view(), losses_dev.view());
        ASSERT_TRUE(s.ok()) << s;
        // Sums of V exponentials: within about (V / 8 + 16) u32 relative of each other whether
        // the CPU accumulates in f64 or in eight f32 lanes; the log differs by as much.
        const double sum_tol = (V / 8.0 + 16.0) * kU32;
        EXPECT_TRUE(AllClose(ToHost(losses_dev.view()).view(), ToDoubles(losses_cpu.view()),
                             4 * kU32, sum_tol));

        Tensor dx_cpu = Tensor::Host({N, V}, dt);
        ASSERT_TRUE(CrossEntropyBackward(cpu_, logits.view(), targets.view(), dlosses.view(),
                                         dx_cpu.view())
                        .ok());
        Tensor dl_dev = ToDevice(dlosses);
        Tensor dx_dev = EmptyDevice({N, V}, dt);
        s = CrossEntropyBackward(gpu_, logits_dev.view(), targets_dev.view(), dl_dev.view(),
                                 dx_dev.view());
        ASSERT_TRUE(s.ok()) << s;
        const double u = dt == DType::kF32 ? 0.0 : UnitRoundoff(dt);
        EXPECT_TRUE(AllClose(ToHost(dx_dev.view()).view(), ToDoubles(dx_cpu.view()),
                             2 * u + sum_tol, 4 * kU32));
        // In place over the logits.
        s = CrossEntropyBackward(gpu_, logits_dev.view(), targets_dev.view(), dl_dev.view(),
                                 logits_dev.view());
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_TRUE(testing::SameBits(ToHost(logits_dev.view()).view(),
                                      ToHost(dx_dev.view()).view()));
      }
    }
  }
}

TEST_F(CrossEntropyCudaTest, BadTargetsGiveTheCpusError) {
  Tensor logits = RandomTensor({4, 6}, DType::kF32, 3);
  Tensor targets = testing::FromDoubles({4}, DType::kI64, {1, -100, 6, -3});
  Tensor losses = Tensor::Host({4}, DType::kF32);
  const absl::Status cpu = CrossEntropy(cpu_, logits.view(), targets.view(), losses.view());
  Tensor logits_dev = ToDevice(logits), targets_dev = ToDevice(targets);
  Tensor losses_dev = EmptyDevice({4}, DType::kF32);
  const absl::Status gpu = CrossEntropy(gpu_, logits_dev.view(), targets_dev.view(),
                                        losses_dev.view());
  EXPECT_EQ(gpu.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(gpu, cpu);
}

// The four phases of the vocab-parallel loss on one shard (no communication needed to compare).
TEST_F(CrossEntropyCudaTest, ShardedPhasesMatchCpu) {
  uint64_t seed = 500;
  struct Case {
    int64_t n, vs;
    VocabShard shard;
  };
  // The last shard of a padded vocabulary masks its tail; a shard past valid_vocab is all masked.
  const Case cases[] = {{3, 17, {0, 17}}, {5, 128, {256, 300}}, {9, 1031, {1031, 2000}},
                        {2, 64, {512, 500}}};
  for (DType it : {DType::kI32, DType::kI64}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(absl::StrCat("targets ", DTypeName(it), " N ", c.n, " Vs ", c.vs, " start ",
                                c.shard.vocab_start, " valid ", c.shard.valid_vocab));
      Tensor logits = RandomTensor({c.n, c.vs}, DType::kF32, seed++, -6.0, 6.0);
      // Targets anywhere in the vocabulary: mostly other ranks' columns, some this shard's.
      Tensor targets = Targets(c.n, it, c.shard.valid_vocab, seed++);
      std::vector<double> tv = ToDoubles(targets.view());
      if (c.shard.vocab_start < c.shard.valid_vocab) tv[1 % c.n] = c.shard.vocab_start;
      targets = testing::FromDoubles({c.n}, it, tv);
      Tensor dlosses = RandomTensor({c.n}, DType::kF32, seed++, 0.1, 1.0);

      Tensor max_cpu = Tensor::Host({c.n}, DType::kF32);
      Tensor part_cpu = Tensor::Host({c.n, 2}, DType::kF32);
      Tensor loss_cpu = Tensor::Host({c.n}, DType::kF32);
      Tensor dx_cpu = Tensor::Host({c.n, c.vs}, DType::kF32);
      ASSERT_TRUE(ShardedRowMax(cpu_, logits.view(), c.shard, max_cpu.view()).ok());
      ASSERT_TRUE(ShardedTargetAndSumExp(cpu_, logits.view(), targets.view(), c.shard,
                                         max_cpu.view(), part_cpu.view())
                      .ok());
      ASSERT_TRUE(
          ShardedLoss(cpu_, targets.view(), max_cpu.view(), part_cpu.view(), loss_cpu.view()).ok());
      ASSERT_TRUE(ShardedCrossEntropyBackward(cpu_, logits.view(), targets.view(), c.shard,
                                              max_cpu.view(), part_cpu.view(), dlosses.view(),
                                              dx_cpu.view())
                      .ok());

      Tensor logits_dev = ToDevice(logits), targets_dev = ToDevice(targets);
      Tensor max_dev = EmptyDevice({c.n}, DType::kF32);
      ASSERT_TRUE(ShardedRowMax(gpu_, logits_dev.view(), c.shard, max_dev.view()).ok());
      EXPECT_TRUE(testing::SameBits(ToHost(max_dev.view()).view(), max_cpu.view()));  // Exact.
      // Each later phase starts from the CPU's previous results, so each is compared alone.
      Tensor max_in = ToDevice(max_cpu);
      Tensor part_dev = EmptyDevice({c.n, 2}, DType::kF32);
      absl::Status s = ShardedTargetAndSumExp(gpu_, logits_dev.view(), targets_dev.view(),
                                              c.shard, max_in.view(), part_dev.view());
      ASSERT_TRUE(s.ok()) << s;
      // The GPU sums f64 exponentials in f64; the CPU may use a fast f32 exp (relative error
      // below 3e-7) summed in eight f32 lanes: within about (Vs / 8 + 16) u32 of each other.
      const double sum_tol = (c.vs / 8.0 + 16.0) * kU32;
      EXPECT_TRUE(AllClose(ToHost(part_dev.view()).view(), ToDoubles(part_cpu.view()), sum_tol,
                           0));
      Tensor part_in = ToDevice(part_cpu);
      Tensor loss_dev = EmptyDevice({c.n}, DType::kF32);
      s = ShardedLoss(gpu_, targets_dev.view(), max_in.view(), part_in.view(), loss_dev.view());
      ASSERT_TRUE(s.ok()) << s;
      if (c.shard.vocab_start >= c.shard.valid_vocab) {
        // Every column masked: -inf partial losses on both sides.
        EXPECT_TRUE(testing::SameBits(ToHost(loss_dev.view()).view(), loss_cpu.view()));
      } else {
        EXPECT_TRUE(AllClose(ToHost(loss_dev.view()).view(), ToDoubles(loss_cpu.view()),
                             2 * kU32, 4 * kU32));
      }
      Tensor dl_dev = ToDevice(dlosses);
      Tensor dx_dev = EmptyDevice({c.n, c.vs}, DType::kF32);
      s = ShardedCrossEntropyBackward(gpu_, logits_dev.view(), targets_dev.view(), c.shard,
                                      max_in.view(), part_in.view(), dl_dev.view(), dx_dev.view());
      ASSERT_TRUE(s.ok()) << s;
      // softmax * dloss to a few u32 (fast f32 exp on the CPU, f64 on the GPU); the target's
      // "- dloss" cancels, so allow an absolute u32-sized error there.
      EXPECT_TRUE(AllClose(ToHost(dx_dev.view()).view(), ToDoubles(dx_cpu.view()), 16 * kU32,
                           4 * kU32));
    }
  }
  // A target outside the vocabulary: the CPU's error.
  Tensor logits = RandomTensor({2, 8}, DType::kF32, 1);
  Tensor targets = testing::FromDoubles({2}, DType::kI32, {3, 40});
  Tensor row_max = Tensor::Host({2}, DType::kF32), parts = Tensor::Host({2, 2}, DType::kF32);
  const VocabShard shard{0, 16};
  const absl::Status cpu =
      ShardedTargetAndSumExp(cpu_, logits.view(), targets.view(), shard, row_max.view(),
                             parts.view());
  Tensor l_dev = ToDevice(logits), t_dev = ToDevice(targets);
  Tensor m_dev = EmptyDevice({2}, DType::kF32), p_dev = EmptyDevice({2, 2}, DType::kF32);
  const absl::Status gpu =
      ShardedTargetAndSumExp(gpu_, l_dev.view(), t_dev.view(), shard, m_dev.view(), p_dev.view());
  EXPECT_EQ(gpu.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(gpu, cpu);
}

}  // namespace
}  // namespace ops
}  // namespace mt
