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

TEST(HeadsTest, GroupedSplitQkvMatchesIndexFormulaAndMergeInverts) {
  // qkv [B, T, G, NH / G + 2, D]: each group's query heads, then its key and its value.
  const int64_t B = 2, T = 3, NH = 6, G = 2, D = 5, per_group = NH / G;
  HeadsShape s{B, T, NH, D};
  s.groups = G;
  ThreadPool pool(3);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    ExecContext ctx;
    ctx.pool = p;
    Tensor qkv = RandomTensor({B, T, (NH + 2 * G) * D}, DType::kBF16, 3);
    Tensor q = Tensor::Zeros({B, NH, T, D}, DType::kBF16),
           k = Tensor::Zeros({B, G, T, D}, DType::kBF16),
           v = Tensor::Zeros({B, G, T, D}, DType::kBF16);
    ASSERT_TRUE(SplitQkv(ctx, s, qkv.view(), q.view(), k.view(), v.view()).ok());
    const auto in = ToDoubles(qkv.view());
    const auto qd = ToDoubles(q.view()), kd = ToDoubles(k.view()), vd = ToDoubles(v.view());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t g = 0; g < G; ++g)
          for (int64_t d = 0; d < D; ++d) {
            auto at = [&](int64_t slot) {
              return in[(((b * T + t) * G + g) * (per_group + 2) + slot) * D + d];
            };
            for (int64_t r = 0; r < per_group; ++r) {
              ASSERT_EQ(qd[((b * NH + g * per_group + r) * T + t) * D + d], at(r));
            }
            ASSERT_EQ(kd[((b * G + g) * T + t) * D + d], at(per_group));
            ASSERT_EQ(vd[((b * G + g) * T + t) * D + d], at(per_group + 1));
          }
    Tensor back = Tensor::Zeros({B, T, (NH + 2 * G) * D}, DType::kBF16);
    ASSERT_TRUE(MergeQkv(ctx, s, q.view(), k.view(), v.view(), back.view()).ok());
    EXPECT_EQ(ToDoubles(back.view()), in);
  }
  // A G that does not divide NH.
  s.groups = 4;
  Tensor qkv = Tensor::Zeros({B, T, (NH + 8) * D}, DType::kF32);
  Tensor q = Tensor::Zeros({B, NH, T, D}, DType::kF32),
         kv = Tensor::Zeros({B, 4, T, D}, DType::kF32);
  EXPECT_EQ(SplitQkv(ExecContext{}, s, qkv.view(), q.view(), kv.view(), kv.view()).code(),
            absl::StatusCode::kInvalidArgument);
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
