// ReplicatedLinear against a float64 reference: forward values, and the input, weight and bias
// gradients of L = sum(w * y) against central differences; gradients accumulate; bad shapes.
#include "nn/replicated_linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "core/ops/testutil.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace mt {
namespace nn {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::NumericalGradient;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;
using Vec = std::vector<double>;

const double kU = ::mt::testing::UnitRoundoff(DType::kF32);

// y [N, out] = x [N, in] W [in, out] + b [out], in float64.
Vec RefLinear(const Vec& x, int64_t N, int64_t in, int64_t out, const Vec& w, const Vec& b) {
  Vec y(N * out);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < in; ++i) s += x[n * in + i] * w[i * out + o];
      y[n * out + o] = s;
    }
  }
  return y;
}

double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

struct Case {
  int64_t N, in, out;
  Bias bias;
};

TEST(ReplicatedLinearTest, ForwardAndGradientsMatchFloat64Reference) {
  ThreadPool pool(3);
  for (const Case& c : {Case{1, 1, 1, Bias::kYes}, Case{3, 17, 5, Bias::kYes},
                        Case{7, 9, 2, Bias::kNo}, Case{4, 33, 1, Bias::kYes}}) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      SCOPED_TRACE(::testing::Message() << "N " << c.N << " in " << c.in << " out " << c.out
                                        << " threads " << (p ? 3 : 1));
      ParameterStore store(/*tp_rank=*/1, /*tp_size=*/2);  // Replicated: TP does not matter.
      auto lin = ReplicatedLinear::Create(&store, "head", c.in, c.out, c.bias, 0.5);
      ASSERT_TRUE(lin.ok()) << lin.status();
      ASSERT_TRUE(store.Allocate(11).ok());
      EXPECT_EQ(store.spec(0).split_dim, -1);
      EXPECT_EQ(store.value(0).shape, (Shape{c.in, c.out}));
      const bool has_bias = c.bias == Bias::kYes;
      ASSERT_EQ(store.size(), has_bias ? 2 : 1);
      if (has_bias) {
        EXPECT_FALSE(store.spec(1).weight_decay);
        // Zero-initialised; give it non-zero values so that the forward check sees it.
        Tensor r = RandomTensor({c.out}, DType::kF32, 5);
        std::memcpy(store.value(1).data, r.data(), r.nbytes());
      }
      ExecContext ec;
      ec.pool = p;
      const StepContext sc = StepContext::Train(&ec);
      Tensor x = RandomTensor({c.N, c.in}, DType::kF32, 1);
      Tensor y = Tensor::Host({c.N, c.out}, DType::kF32);
      ASSERT_TRUE(lin->Forward(sc, x.view(), y.view()).ok());
      const Vec xd = ToDoubles(x.view()), wd = ToDoubles(store.value(0));
      const Vec bd = has_bias ? ToDoubles(store.value(1)) : Vec{};
      const Vec want = RefLinear(xd, c.N, c.in, c.out, wd, bd);
      EXPECT_TRUE(AllClose(y.view(), want, 8 * c.in * kU, 8 * c.in * kU));

      Tensor dy = RandomTensor({c.N, c.out}, DType::kF32, 2);
      const Vec dyd = ToDoubles(dy.view());
      Tensor dx = Tensor::Host({c.N, c.in}, DType::kF32);
      std::fill_n(dx.data_as<float>(), dx.numel(), std::numeric_limits<float>::quiet_NaN());
      {
        absl::Status s = lin->Backward(sc, x.view(), dy.view(), dx.view());
        ASSERT_TRUE(s.ok()) << s;
      }
      // L = sum(dy * y) as a function of x, W and b in turn.
      auto loss_x = [&](const Vec& v) { return Dot(dyd, RefLinear(v, c.N, c.in, c.out, wd, bd)); };
      auto loss_w = [&](const Vec& v) { return Dot(dyd, RefLinear(xd, c.N, c.in, c.out, v, bd)); };
      auto loss_b = [&](const Vec& v) { return Dot(dyd, RefLinear(xd, c.N, c.in, c.out, wd, v)); };
      const double tol = 64 * (c.N + c.in) * kU;
      EXPECT_TRUE(AllClose(dx.view(), NumericalGradient(loss_x, xd), tol, tol));
      const Vec gw = NumericalGradient(loss_w, wd);
      EXPECT_TRUE(AllClose(store.grad(0), gw, tol, tol));
      Vec gb;
      if (has_bias) {
        gb = NumericalGradient(loss_b, bd);
        EXPECT_TRUE(AllClose(store.grad(1), gb, tol, tol));
      }
      // A second Backward accumulates into the parameter gradients.
      {
        absl::Status s = lin->Backward(sc, x.view(), dy.view(), dx.view());
        ASSERT_TRUE(s.ok()) << s;
      }
      Vec gw2 = gw;
      for (double& v : gw2) v *= 2;
      EXPECT_TRUE(AllClose(store.grad(0), gw2, tol, tol));
      if (has_bias) {
        for (double& v : gb) v *= 2;
        EXPECT_TRUE(AllClose(store.grad(1), gb, tol, tol));
      }
    }
  }
}

TEST(ReplicatedLinearTest, BadArgumentsAreRejected) {
  ParameterStore store(0, 1);
  EXPECT_EQ(ReplicatedLinear::Create(&store, "bad", 0, 3, Bias::kYes, 0.02).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto lin = ReplicatedLinear::Create(&store, "dense", 4, 3, Bias::kYes, 0.02);
  ASSERT_TRUE(lin.ok());
  // A duplicate name.
  EXPECT_EQ(ReplicatedLinear::Create(&store, "dense", 4, 3, Bias::kYes, 0.02).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store.Allocate(1).ok());
  ExecContext ec;
  const StepContext sc = StepContext::Train(&ec);
  Tensor x = RandomTensor({2, 5}, DType::kF32, 1);  // in = 5, but the layer takes 4.
  Tensor y = Tensor::Host({2, 3}, DType::kF32);
  EXPECT_EQ(lin->Forward(sc, x.view(), y.view()).code(), absl::StatusCode::kInvalidArgument);
  Tensor x4 = RandomTensor({2, 4}, DType::kF32, 2);
  Tensor y2 = Tensor::Host({2, 2}, DType::kF32);  // out = 2, but the layer gives 3.
  EXPECT_EQ(lin->Forward(sc, x4.view(), y2.view()).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nn
}  // namespace mt
