#include "core/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/ops/reduce_simd.h"
#include "core/ops/testutil.h"
#include "core/simd.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::FromDoubles;
using ::mt::testing::kFloatTypes;
using ::mt::testing::RandomInts;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;
using ::mt::testing::WriteDoubles;

const double kU64 = std::ldexp(1.0, -53);
const double kInf = std::numeric_limits<double>::infinity();

// Bitwise equality of doubles (NaN equals NaN with the same bits).
bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

struct Refs {
  double sum = 0, sum_abs = 0, sumsq = 0, max = -kInf;
};

// Plain serial float64 loops.
Refs Reference(const std::vector<double>& x) {
  Refs r;
  for (double v : x) {
    r.sum += v;
    r.sum_abs += std::fabs(v);
    r.sumsq += v * v;
    r.max = std::max(r.max, v);
  }
  return r;
}

TEST(ReduceTest, MatchFloat64AtOddSizesForEveryDTypeAndAreThreadIndependent) {
  ThreadPool pool(3);
  const ExecContext serial{nullptr}, threaded{&pool};
  for (DType dt : kFloatTypes) {
    for (int64_t n : {1, 3, 17, 16384, 16385, 1000003}) {
      for (double lo : {-1.0, 0.25}) {  // Mixed signs (cancellation), then all positive.
        SCOPED_TRACE(::testing::Message() << DTypeName(dt) << " n=" << n << " lo=" << lo);
        Tensor x = RandomTensor({n}, dt, n + 7, lo, 2.0);
        const Refs ref = Reference(ToDoubles(x.view()));
        // Both our sum and the reference are f64 sums of exactly representable terms; each is
        // within n * u64 * sum|x| of the exact value.
        const double sum_tol = 2 * n * kU64 * ref.sum_abs;
        const double sumsq_tol = 2 * n * kU64 * ref.sumsq;
        for (const ExecContext* ctx : {&serial, &threaded}) {
          auto sum = Sum(*ctx, x.view());
          auto sumsq = SumOfSquares(*ctx, x.view());
          auto norm = L2Norm(*ctx, x.view());
          auto max = Max(*ctx, x.view());
          ASSERT_TRUE(sum.ok() && sumsq.ok() && norm.ok() && max.ok());
          EXPECT_NEAR(*sum, ref.sum, sum_tol);
          EXPECT_NEAR(*sumsq, ref.sumsq, sumsq_tol);
          EXPECT_NEAR(*norm, std::sqrt(ref.sumsq), 2 * n * kU64 * std::sqrt(ref.sumsq));
          EXPECT_EQ(*max, ref.max);
        }
        EXPECT_TRUE(SameBits(*Sum(serial, x.view()), *Sum(threaded, x.view())));
        EXPECT_TRUE(SameBits(*SumOfSquares(serial, x.view()), *SumOfSquares(threaded, x.view())));
        EXPECT_TRUE(SameBits(*L2Norm(serial, x.view()), *L2Norm(threaded, x.view())));
        EXPECT_TRUE(SameBits(*Max(serial, x.view()), *Max(threaded, x.view())));
      }
    }
  }
}

// The f32 sums run SIMD kernels (reduce_simd.h) with the accumulator layout of the scalar loop
// that sums the other dtypes: at every SIMD target, the f32 sums of bf16 values are the bits of
// the bf16 tensor's sums, with and without threads, and within the float64 bound.
TEST(ReduceTest, F32SumsAreTheScalarLayoutsBitsAtEverySimdTarget) {
  ThreadPool pool(2);
  for (const SimdTarget& target : SimdTargets()) {
    ScopedSimdTarget scope(target);
    for (int64_t n : {1, 7, 8, 9, 23, 16385, 100003}) {
      SCOPED_TRACE(::testing::Message() << target.name << " n=" << n);
      Tensor b = RandomTensor({n}, DType::kBF16, n + 11, -1.0, 3.0);
      const std::vector<double> values = ToDoubles(b.view());
      Tensor f = FromDoubles({n}, DType::kF32, values);
      const Refs ref = Reference(values);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        const ExecContext ctx{p};
        const double sum = *Sum(ctx, f.view()), sumsq = *SumOfSquares(ctx, f.view());
        EXPECT_TRUE(SameBits(sum, *Sum(ctx, b.view()))) << sum;
        EXPECT_TRUE(SameBits(sumsq, *SumOfSquares(ctx, b.view()))) << sumsq;
        EXPECT_NEAR(sum, ref.sum, 2 * n * kU64 * ref.sum_abs);
        EXPECT_NEAR(sumsq, ref.sumsq, 2 * n * kU64 * ref.sumsq);
      }
    }
  }
}

// The dot product of the softmax backward and RMSNorm: at every SIMD target the bits of the scalar
// loop with reduce_simd.h's layout (products exact in f64, eight accumulators, pairwise combine),
// and within the float64 bound.
TEST(ReduceTest, DotF32IsTheScalarLayoutsBitsAtEverySimdTarget) {
  for (int64_t n : {1, 7, 8, 9, 23, 1031}) {
    Tensor a = RandomTensor({n}, DType::kF32, n + 1, -2.0, 2.0);
    Tensor b = RandomTensor({n}, DType::kF32, n + 2, -2.0, 2.0);
    const float* pa = a.data_as<float>();
    const float* pb = b.data_as<float>();
    double lanes[8] = {};
    double want = 0, bound = 0;
    for (int64_t i = 0; i < n; ++i) {
      lanes[i % 8] += static_cast<double>(pa[i]) * pb[i];
      want += static_cast<double>(pa[i]) * pb[i];
      bound += std::fabs(static_cast<double>(pa[i]) * pb[i]);
    }
    for (int width = 4; width > 0; width /= 2) {
      for (int k = 0; k < width; ++k) lanes[k] += lanes[k + width];
    }
    for (const SimdTarget& target : SimdTargets()) {
      ScopedSimdTarget scope(target);
      SCOPED_TRACE(::testing::Message() << target.name << " n=" << n);
      const double got = internal::DotF32(pa, pb, n);
      EXPECT_TRUE(SameBits(got, lanes[0])) << got << " vs " << lanes[0];
      EXPECT_NEAR(got, want, 2 * n * kU64 * bound);
    }
  }
}

TEST(ReduceTest, AccumulatesInFloat64) {
  // 2^24 + 1000 ones: an f32 accumulator would return 2^24 (each 1 is half an ulp and rounds
  // away), and f32 squares of 2^24 would not be exact either.
  ThreadPool pool(3);
  const int64_t n = 40001;  // Spans several chunks.
  std::vector<double> v(n, 1.0);
  v[0] = 16777216.0;
  for (DType dt : {DType::kF32, DType::kBF16}) {  // 2^24 is beyond f16's range.
    Tensor x = FromDoubles({n}, dt, v);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      const ExecContext ctx{p};
      EXPECT_EQ(*Sum(ctx, x.view()), 16777216.0 + (n - 1));
      EXPECT_EQ(*SumOfSquares(ctx, x.view()), 16777216.0 * 16777216.0 + (n - 1));
      EXPECT_EQ(*Max(ctx, x.view()), 16777216.0);
    }
  }
}

TEST(ReduceTest, HandComputedValues) {
  const ExecContext ctx;
  for (DType dt : kFloatTypes) {
    Tensor x = FromDoubles({2, 2}, dt, {3, -4, 0.5, -0.25});
    EXPECT_EQ(*Sum(ctx, x.view()), -0.75);
    EXPECT_EQ(*SumOfSquares(ctx, x.view()), 25.3125);
    EXPECT_EQ(*L2Norm(ctx, x.view()), std::sqrt(25.3125));
    EXPECT_EQ(*Max(ctx, x.view()), 3.0);
    Tensor neg = FromDoubles({3}, dt, {-3, -0.5, -7});
    EXPECT_EQ(*Max(ctx, neg.view()), -0.5);
    Tensor scalar = FromDoubles({}, dt, {-2});
    EXPECT_EQ(*Sum(ctx, scalar.view()), -2.0);
    EXPECT_EQ(*L2Norm(ctx, scalar.view()), 2.0);
  }
}

TEST(ReduceTest, EmptyTensors) {
  const ExecContext ctx;
  Tensor x = Tensor::Host({0, 5}, DType::kBF16);
  EXPECT_EQ(*Sum(ctx, x.view()), 0.0);
  EXPECT_EQ(*SumOfSquares(ctx, x.view()), 0.0);
  EXPECT_EQ(*L2Norm(ctx, x.view()), 0.0);
  EXPECT_EQ(*Max(ctx, x.view()), -kInf);
}

TEST(ReduceTest, NaNPropagatesThroughEveryReductionAndInfFollowsIeee) {
  ThreadPool pool(3);
  const int64_t n = 50003;
  for (DType dt : kFloatTypes) {
    for (int64_t at : {int64_t{0}, int64_t{17}, int64_t{20000}, n - 1}) {
      Tensor x = RandomTensor({n}, dt, 3);
      std::vector<double> v = ToDoubles(x.view());
      v[at] = std::numeric_limits<double>::quiet_NaN();
      WriteDoubles(v, x.view());
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        const ExecContext ctx{p};
        EXPECT_TRUE(std::isnan(*Max(ctx, x.view()))) << DTypeName(dt) << " " << at;
        EXPECT_TRUE(std::isnan(*Sum(ctx, x.view())));
        EXPECT_TRUE(std::isnan(*SumOfSquares(ctx, x.view())));
        EXPECT_TRUE(std::isnan(*L2Norm(ctx, x.view())));
      }
    }
    Tensor inf = FromDoubles({4}, dt, {1, kInf, -2, 3});
    EXPECT_EQ(*Max(ExecContext{}, inf.view()), kInf);
    EXPECT_EQ(*Sum(ExecContext{}, inf.view()), kInf);
    EXPECT_EQ(*L2Norm(ExecContext{}, inf.view()), kInf);
    Tensor both = FromDoubles({2}, dt, {-kInf, kInf});
    EXPECT_TRUE(std::isnan(*Sum(ExecContext{}, both.view())));
    Tensor neg_inf = FromDoubles({2}, dt, {-kInf, -kInf});
    EXPECT_EQ(*Max(ExecContext{}, neg_inf.view()), -kInf);
  }
}

TEST(ReduceTest, BadInputsAreErrors) {
  const ExecContext ctx;
  Tensor ints = RandomInts({4}, DType::kI32, 1, 0, 9);
  auto s = Sum(ctx, ints.view()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("Sum: x has unsupported dtype i32"), std::string::npos) << s;
  EXPECT_EQ(Max(ctx, ints.view()).status().code(), absl::StatusCode::kUnimplemented);
  Tensor big = RandomTensor({4, 6}, DType::kF32, 1);
  TensorView strided = big.view();
  strided.shape = {4, 3};
  s = L2Norm(ctx, strided).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("L2Norm"), std::string::npos) << s;
  EXPECT_EQ(SumOfSquares(ctx, strided).status().code(), absl::StatusCode::kInvalidArgument);
  // (What CUDA views get, with and without a GPU, is cuda_dispatch_test's.)
}

}  // namespace
}  // namespace ops
}  // namespace mt
