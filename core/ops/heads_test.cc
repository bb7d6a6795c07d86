#include "core/ops/heads.h"

#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;

TEST(HeadsTest, SplitQkvMatchesIndexFormulaAndMergeInverts) {
  const HeadsShape s{3, 5, 2, 7};
  const int64_t B = 3, T = 5, NH = 2, D = 7;
  ThreadPool pool(3);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    ExecContext ctx;
    ctx.pool = p;
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      Tensor qkv = RandomTensor({B, T, NH * 3 * D}, dt, 1);
      Tensor q = Tensor::Zeros({B, NH, T, D}, dt), k = Tensor::Zeros({B, NH, T, D}, dt),
             v = Tensor::Zeros({B, NH, T, D}, dt);
      ASSERT_TRUE(SplitQkv(ctx, s, qkv.view(), q.view(), k.view(), v.view()).ok());
      const auto in = ToDoubles(qkv.view());
      const std::vector<double> outs[3] = {ToDoubles(q.view()), ToDoubles(k.view()),
                                           ToDoubles(v.view())};
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t h = 0; h < NH; ++h)
            for (int slot = 0; slot < 3; ++slot)
              for (int64_t d = 0; d < D; ++d) {
                const double want = in[(((b * T + t) * NH + h) * 3 + slot) * D + d];
                ASSERT_EQ(outs[slot][((b * NH + h) * T + t) * D + d], want);
              }
      Tensor back = Tensor::Zeros({B, T, NH * 3 * D}, dt);
      ASSERT_TRUE(MergeQkv(ctx, s, q.view(), k.view(), v.view(), back.view()).ok());
      EXPECT_EQ(ToDoubles(back.view()), in);
    }
  }
}

TEST(HeadsTest, MergeHeadsMatchesIndexFormulaAndSplitInverts) {
  const HeadsShape s{2, 3, 4, 5};
  const int64_t B = 2, T = 3, NH = 4, D = 5;
  ExecContext ctx;
  Tensor x = RandomTensor({B, NH, T, D}, DType::kF32, 2);
  Tensor y = Tensor::Zeros({B, T, NH * D}, DType::kF32);
  ASSERT_TRUE(MergeHeads(ctx, s, x.view(), y.view()).ok());
  const auto in = ToDoubles(x.view()), out = ToDoubles(y.view());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d)
          ASSERT_EQ(out[((b * T + t) * NH + h) * D + d], in[((b * NH + h) * T + t) * D + d]);
  Tensor back = Tensor::Zeros({B, NH, T, D}, DType::kF32);
  ASSERT_TRUE(SplitHeads(ctx, s, y.view(), back.view()).ok());
  EXPECT_EQ(ToDoubles(back.view()), in);
}

TEST(HeadsTest, BadArgumentsAreRejected) {
  ExecContext ctx;
  Tensor qkv = Tensor::Zeros({2, 3, 12}, DType::kF32);
  Tensor q = Tensor::Zeros({2, 2, 3, 2}, DType::kF32), k = Tensor::Zeros({2, 2, 3, 2}, DType::kF32);
  Tensor v_small = Tensor::Zeros({2, 2, 3, 1}, DType::kF32);
  Tensor v_bf16 = Tensor::Zeros({2, 2, 3, 2}, DType::kBF16);
  const HeadsShape s{2, 3, 2, 2};
  EXPECT_EQ(SplitQkv(ctx, s, qkv.view(), q.view(), k.view(), v_small.view()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitQkv(ctx, s, qkv.view(), q.view(), k.view(), v_bf16.view()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitQkv(ctx, HeadsShape{2, 3, -2, 2}, qkv.view(), q.view(), k.view(), q.view()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ops
}  // namespace mt
