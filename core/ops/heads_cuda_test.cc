// The heads permutations on the GPU are bitwise the CPU's, for element sizes 2, 4 and 8 and odd
// shapes. Skipped without a GPU.
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/heads.h"
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

Tensor Random(Shape shape, DType dt, uint64_t seed) {
  return IsInteger(dt) ? RandomInts(std::move(shape), dt, seed, 0, 60000)
                       : RandomTensor(std::move(shape), dt, seed);
}

using HeadsCudaTest = CudaOpTest;

TEST_F(HeadsCudaTest, PermutationsAreBitwiseTheCpus) {
  uint64_t seed = 1;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kI64, DType::kU16}) {
    for (const HeadsShape& s : {HeadsShape{1, 1, 1, 1}, HeadsShape{2, 3, 5, 7},
                                HeadsShape{3, 17, 4, 64}, HeadsShape{1, 129, 3, 33}}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dt), " B ", s.batch, " T ", s.seq, " NH ", s.heads,
                                " D ", s.head_dim));
      const Shape hm = {s.batch, s.heads, s.seq, s.head_dim};
      Tensor qkv = Random({s.batch, s.seq, s.heads * 3 * s.head_dim}, dt, seed++);
      Tensor q = Tensor::Host(hm, dt), k = Tensor::Host(hm, dt), v = Tensor::Host(hm, dt);
      ASSERT_TRUE(SplitQkv(cpu_, s, qkv.view(), q.view(), k.view(), v.view()).ok());
      Tensor qkv_dev = ToDevice(qkv);
      Tensor qd = EmptyDevice(hm, dt), kd = EmptyDevice(hm, dt), vd = EmptyDevice(hm, dt);
      ASSERT_TRUE(SplitQkv(gpu_, s, qkv_dev.view(), qd.view(), kd.view(), vd.view()).ok());
      EXPECT_TRUE(SameBits(ToHost(qd.view()).view(), q.view()));
      EXPECT_TRUE(SameBits(ToHost(kd.view()).view(), k.view()));
      EXPECT_TRUE(SameBits(ToHost(vd.view()).view(), v.view()));

      // MergeQkv from fresh head-major tensors.
      Tensor dq = Random(hm, dt, seed++), dk = Random(hm, dt, seed++), dv = Random(hm, dt, seed++);
      Tensor dqkv = Tensor::Host(qkv.shape(), dt);
      ASSERT_TRUE(MergeQkv(cpu_, s, dq.view(), dk.view(), dv.view(), dqkv.view()).ok());
      Tensor dq_dev = ToDevice(dq), dk_dev = ToDevice(dk), dv_dev = ToDevice(dv);
      Tensor dqkv_dev = EmptyDevice(qkv.shape(), dt);
      ASSERT_TRUE(
          MergeQkv(gpu_, s, dq_dev.view(), dk_dev.view(), dv_dev.view(), dqkv_dev.view()).ok());
      EXPECT_TRUE(SameBits(ToHost(dqkv_dev.view()).view(), dqkv.view()));

      const Shape tm = {s.batch, s.seq, s.heads * s.head_dim};
      Tensor y = Tensor::Host(tm, dt);
      ASSERT_TRUE(MergeHeads(cpu_, s, dq.view(), y.view()).ok());
      Tensor y_dev = EmptyDevice(tm, dt);
      ASSERT_TRUE(MergeHeads(gpu_, s, dq_dev.view(), y_dev.view()).ok());
      EXPECT_TRUE(SameBits(ToHost(y_dev.view()).view(), y.view()));

      Tensor back = Tensor::Host(hm, dt);
      ASSERT_TRUE(SplitHeads(cpu_, s, y.view(), back.view()).ok());
      Tensor back_dev = EmptyDevice(hm, dt);
      ASSERT_TRUE(SplitHeads(gpu_, s, y_dev.view(), back_dev.view()).ok());
      EXPECT_TRUE(SameBits(ToHost(back_dev.view()).view(), back.view()));
      EXPECT_TRUE(SameBits(back.view(), dq.view()));  // The round trip.
    }
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
