// The heads permutations on the GPU are bitwise the CPU's, for element sizes 2, 4 and 8 and odd
// shapes. Skipped without a GPU.
#include "absl/strings/str_cat.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/heads.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::CudaOpTest;
using ::mt::testing::GpuMatchesCpu;
using ::mt::testing::kBitwise;
using ::mt::testing::Mirror;
using ::mt::testing::Mirrored;
using ::mt::testing::MirrorNaN;
using ::mt::testing::RandomInts;
using ::mt::testing::RandomTensor;
using ::mt::testing::SameBits;
using ::mt::testing::Side;

Mirrored Random(Shape shape, DType dt, uint64_t seed) {
  return Mirror(IsInteger(dt) ? RandomInts(std::move(shape), dt, seed, 0, 60000)
                              : RandomTensor(std::move(shape), dt, seed));
}

using HeadsCudaTest = CudaOpTest;

TEST_F(HeadsCudaTest, PermutationsAreBitwiseTheCpus) {
  uint64_t seed = 1;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kI64, DType::kU16}) {
    for (const HeadsShape& hs :
         {HeadsShape{1, 1, 1, 1}, HeadsShape{2, 3, 5, 7}, HeadsShape{3, 17, 4, 64},
          HeadsShape{1, 129, 3, 33}, HeadsShape{2, 3, 6, 7, 2}, HeadsShape{1, 5, 4, 8, 1}}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dt), " B ", hs.batch, " T ", hs.seq, " NH ", hs.heads,
                                " D ", hs.head_dim, " G ", hs.kv_heads()));
      const Shape hm = {hs.batch, hs.heads, hs.seq, hs.head_dim};
      const Shape kvm = {hs.batch, hs.kv_heads(), hs.seq, hs.head_dim};
      const Shape tm = {hs.batch, hs.seq, hs.heads * hs.head_dim};
      const Shape fused = {hs.batch, hs.seq, (hs.heads + 2 * hs.kv_heads()) * hs.head_dim};
      const Mirrored qkv = Random(fused, dt, seed++);
      const Mirrored q = MirrorNaN(hm, dt), k = MirrorNaN(kvm, dt), v = MirrorNaN(kvm, dt);
      ASSERT_TRUE(OnBoth(
          [&](const ExecContext& c, Side s) { return SplitQkv(c, hs, qkv[s], q[s], k[s], v[s]); }));
      EXPECT_TRUE(GpuMatchesCpu(q, kBitwise));
      EXPECT_TRUE(GpuMatchesCpu(k, kBitwise));
      EXPECT_TRUE(GpuMatchesCpu(v, kBitwise));

      // MergeQkv from fresh head-major tensors.
      const Mirrored dq = Random(hm, dt, seed++), dk = Random(kvm, dt, seed++),
                     dv = Random(kvm, dt, seed++);
      const Mirrored dqkv = MirrorNaN(fused, dt);
      EXPECT_TRUE(OnBothMatch(dqkv, kBitwise, [&](const ExecContext& c, Side s) {
        return MergeQkv(c, hs, dq[s], dk[s], dv[s], dqkv[s]);
      }));
      const Mirrored y = MirrorNaN(tm, dt);
      EXPECT_TRUE(OnBothMatch(y, kBitwise, [&](const ExecContext& c, Side s) {
        return MergeHeads(c, hs, dq[s], y[s]);
      }));
      const Mirrored back = MirrorNaN(hm, dt);
      EXPECT_TRUE(OnBothMatch(back, kBitwise, [&](const ExecContext& c, Side s) {
        return SplitHeads(c, hs, y[s], back[s]);
      }));
      EXPECT_TRUE(SameBits(back.cpu(), dq.cpu()));  // The round trip.
    }
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
