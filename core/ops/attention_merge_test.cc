// AttentionMerge against the float64 attention over all keys: the keys split into two disjoint
// sets (by padding masks), each attended by FusedAttention, the two partial results merged; every
// float dtype, a set with no visible key in some rows (lse -inf), and the argument errors.
#include "core/ops/attention_merge.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/ops/attention.h"
#include "core/ops/attention_testutil.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AttentionDims;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;

// The [B, Tk] mask of the keys in set `set` (key j is in set j % 3 == 0 ? 0 : 1; batch row 1 has
// every key in set 1, so set 0 sees nothing there).
Tensor SetMask(const AttentionDims& d, int set) {
  Tensor m = Tensor::Host({d.B, d.Tk}, DType::kI32);
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t j = 0; j < d.Tk; ++j) {
      const int in = (b == 1) ? 1 : (j % 3 == 0 ? 0 : 1);
      m.data_as<int32_t>()[b * d.Tk + j] = in == set ? 1 : 0;
    }
  }
  return m;
}

TEST(AttentionMergeTest, MergedHalvesEqualAttentionOverAllKeys) {
  const AttentionDims d{2, 4, 5, 7, 8, /*G=*/2};
  const ExecContext ctx;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const auto in = ::mt::testing::RandomAttentionInputs(d, dt, 11);
    AttentionArgs all;
    all.scale = 1.0f / std::sqrt(static_cast<float>(d.D));
    const auto ref = ::mt::testing::AttentionReference(d, all, in);
    Tensor out = Tensor::Host(d.QShape(), dt), out_b = Tensor::Host(d.QShape(), dt);
    Tensor lse = Tensor::Host(d.LseShape(), DType::kF32);
    Tensor lse_b = Tensor::Host(d.LseShape(), DType::kF32);
    const Tensor mask_a = SetMask(d, 0), mask_b = SetMask(d, 1);
    AttentionArgs a = all, b = all;
    a.padding_mask = &mask_a.view();
    b.padding_mask = &mask_b.view();
    ASSERT_TRUE(
        FusedAttention(ctx, in.q.view(), in.k.view(), in.v.view(), a, out.view(), lse.view()).ok());
    ASSERT_TRUE(
        FusedAttention(ctx, in.q.view(), in.k.view(), in.v.view(), b, out_b.view(), lse_b.view())
            .ok());
    // Batch row 1 of set a sees nothing: the case where the merge takes b alone.
    EXPECT_EQ(lse.data_as<float>()[d.NH * d.Tq], -std::numeric_limits<float>::infinity());
    ASSERT_TRUE(AttentionMerge(ctx, out.view(), lse.view(), out_b.view(), lse_b.view()).ok());
    const std::vector<double> got = ToDoubles(out.view()), got_lse = ToDoubles(lse.view());
    // Each part carries the fused op's error (u + prob_err relative to the magnitudes), plus one
    // rounding of the merge.
    const double u = UnitRoundoff(dt);
    const double tol = 3 * u + 8 * (u + ref.prob_err);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], ref.out[i], tol * ref.out_mag + 1e-30) << DTypeName(dt) << " " << i;
    }
    for (size_t i = 0; i < got_lse.size(); ++i) {
      ASSERT_NEAR(got_lse[i], ref.lse[i], 8 * ref.prob_err + 4e-7 * std::abs(ref.lse[i])) << i;
    }
  }
}

TEST(AttentionMergeTest, BothEmptyStaysZeroAndBadArgumentsAreRefused) {
  const ExecContext ctx;
  const float kInf = std::numeric_limits<float>::infinity();
  Tensor out = ::mt::testing::FromDoubles({1, 2}, DType::kF32, {0.0, 0.0});
  Tensor out_b = ::mt::testing::FromDoubles({1, 2}, DType::kF32, {0.0, 0.0});
  Tensor lse = ::mt::testing::FromDoubles({1}, DType::kF32, {-kInf});
  Tensor lse_b = ::mt::testing::FromDoubles({1}, DType::kF32, {-kInf});
  ASSERT_TRUE(AttentionMerge(ctx, out.view(), lse.view(), out_b.view(), lse_b.view()).ok());
  EXPECT_EQ(lse.data_as<float>()[0], -kInf);
  EXPECT_EQ(out.data_as<float>()[1], 0.0f);
  // Two equal rows: weights 1/2 each, lse + log 2.
  Tensor o1 = ::mt::testing::FromDoubles({1, 2}, DType::kF32, {1.0, 3.0});
  Tensor o2 = ::mt::testing::FromDoubles({1, 2}, DType::kF32, {3.0, 5.0});
  Tensor l1 = ::mt::testing::FromDoubles({1}, DType::kF32, {0.5});
  Tensor l2 = ::mt::testing::FromDoubles({1}, DType::kF32, {0.5});
  ASSERT_TRUE(AttentionMerge(ctx, o1.view(), l1.view(), o2.view(), l2.view()).ok());
  EXPECT_FLOAT_EQ(o1.data_as<float>()[0], 2.0f);
  EXPECT_FLOAT_EQ(o1.data_as<float>()[1], 4.0f);
  EXPECT_FLOAT_EQ(l1.data_as<float>()[0], static_cast<float>(0.5 + std::log(2.0)));
  Tensor wrong = Tensor::Host({2}, DType::kF32);
  EXPECT_EQ(AttentionMerge(ctx, o1.view(), wrong.view(), o2.view(), l2.view()).code(),
            absl::StatusCode::kInvalidArgument);
  Tensor half = Tensor::Host({1}, DType::kBF16);
  EXPECT_EQ(AttentionMerge(ctx, o1.view(), l1.view(), o2.view(), half.view()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AttentionMerge(ctx, o1.view(), l1.view(), o1.view(), l2.view()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ops
}  // namespace mt
