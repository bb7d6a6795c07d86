// Multi-process test of ParallelContext over MPI and of the tensor-parallel mappings (f, g,
// gather, scatter): values forward and backward against serial float64 computations, gradients of
// f->local->g and scatter->local->gather compositions against central differences of the serial
// function, and communicator counters. Run under mpirun (comm/mpi_test.sh) with 1-4 ranks; every
// TP degree that divides the world size is tested.
#include "comm/mappings.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/mpi_testutil.h"
#include "comm/parallel_context.h"
#include "core/ops/testutil.h"
#include "core/status_testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace comm {
namespace {

using ::mt::testing::NumericalGradient;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;
using testing::ExpectWithin;
using testing::MpiTest;
using testing::RankData;
using testing::ScaledTanh;
using testing::ScaledTanhBackward;

constexpr int kHeads = 12;  // Divisible by every TP degree tested (1, 2, 3, 4).

std::vector<int> TpDegrees(int world) {
  std::vector<int> out;
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp == 0) out.push_back(tp);
  }
  return out;
}

class MappingsTest : public MpiTest {
 protected:
  absl::StatusOr<std::unique_ptr<ParallelContext>> Context(int tp) {
    ParallelConfig config;
    config.tensor_parallel = tp;
    return ParallelContext::Create(*comm_, config, kHeads);
  }
  // Data that differs between TP ranks (tp_rank r) and between DP replicas.
  static Tensor Sharded(const ParallelContext& ctx, const Shape& shape, DType dtype, uint64_t seed,
                        int r) {
    return RankData(shape, dtype, seed + 7717u * ctx.dp_rank(), r);
  }
  // Data that is the same on every rank of a TP group (replicated activations, gradients).
  static Tensor Replicated(const ParallelContext& ctx, const Shape& shape, DType dtype,
                           uint64_t seed) {
    return RankData(shape, dtype, seed + 7717u * ctx.dp_rank(), /*r=*/1000);
  }
};

TEST_F(MappingsTest, ParallelContextMatchesLayout) {
  const int world = comm_->size(), me = comm_->rank();
  for (int tp : TpDegrees(world)) {
    ASSERT_OK_AND_ASSIGN(auto ctx, Context(tp));
    EXPECT_EQ(ctx->tp_size(), tp);
    EXPECT_EQ(ctx->dp_size(), world / tp);
    EXPECT_EQ(ctx->tp_rank(), me % tp);
    EXPECT_EQ(ctx->dp_rank(), me / tp);
    EXPECT_EQ(ctx->tp().size(), tp);
    EXPECT_EQ(ctx->dp().size(), world / tp);
    EXPECT_EQ(ctx->tp().name(), "tp");
    EXPECT_EQ(ctx->dp().name(), "dp");
    EXPECT_EQ(&ctx->world(), comm_.get());
    // Summing world ranks over each group gives the sum of the layout's group members.
    int64_t in_tp = me, in_dp = me;
    ASSERT_TRUE(
        ctx->tp().AllReduce(TensorView(&in_tp, Shape{1}, DType::kI64), ReduceOp::kSum).ok());
    ASSERT_TRUE(
        ctx->dp().AllReduce(TensorView(&in_dp, Shape{1}, DType::kI64), ReduceOp::kSum).ok());
    int64_t want_tp = 0, want_dp = 0;
    for (int r : ctx->layout().tp_groups[ctx->layout().TpGroupOf(me)]) want_tp += r;
    for (int r : ctx->layout().dp_groups[ctx->layout().DpGroupOf(me)]) want_dp += r;
    EXPECT_EQ(in_tp, want_tp) << ctx->DebugString();
    EXPECT_EQ(in_dp, want_dp) << ctx->DebugString();
  }
  // Invalid configurations fail identically on every rank, before any communication.
  ParallelConfig bad;
  bad.tensor_parallel = world + 1;
  absl::Status s = ParallelContext::Create(*comm_, bad, kHeads).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  bad.tensor_parallel = 5;
  s = ParallelContext::Create(*comm_, bad, /*num_attention_heads=*/4).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(comm_->counters(), CommCounters());
}

TEST_F(MappingsTest, CopyAndReduceForwardBackward) {
  const Shape shape = {3, 17};
  for (int tp : TpDegrees(comm_->size())) {
    ASSERT_OK_AND_ASSIGN(auto ctx, Context(tp));
    Communicator& c = ctx->tp();
    const int me = ctx->tp_rank();
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      const std::string what = absl::StrCat("tp=", tp, " ", DTypeName(dtype));
      const uint64_t seed = 10 * tp + static_cast<int>(dtype);
      // f forward: identity, no communication.
      Tensor x = Sharded(*ctx, shape, dtype, seed, me);
      Tensor x_copy = Sharded(*ctx, shape, dtype, seed, me);
      ASSERT_TRUE(CopyToTensorParallelRegionForward(c, x.view()).ok());
      EXPECT_EQ(0, std::memcmp(x.data(), x_copy.data(), x.nbytes())) << what;
      EXPECT_EQ(c.counters().calls(), 0) << what;
      // f backward and g forward: sum over the TP group.
      for (int which = 0; which < 2; ++which) {
        Tensor t = Sharded(*ctx, shape, dtype, seed + 1 + which, me);
        ASSERT_TRUE((which == 0 ? CopyToTensorParallelRegionBackward(c, t.view())
                                : ReduceFromTensorParallelRegionForward(c, t.view()))
                        .ok());
        std::vector<double> sum(t.numel(), 0.0), bound(t.numel(), 0.0);
        for (int r = 0; r < tp; ++r) {
          const std::vector<double> v =
              ToDoubles(Sharded(*ctx, shape, dtype, seed + 1 + which, r).view());
          for (size_t i = 0; i < v.size(); ++i) {
            sum[i] += v[i];
            bound[i] += tp * UnitRoundoff(DType::kF32) * std::fabs(v[i]);
          }
        }
        for (size_t i = 0; i < sum.size(); ++i) {
          bound[i] += (dtype == DType::kF32 ? 0.0 : UnitRoundoff(dtype)) * std::fabs(sum[i]) * 1.01;
        }
        ExpectWithin(ToDoubles(t.view()), sum, bound,
                     what + (which == 0 ? " f backward" : " g forward"));
        EXPECT_EQ(c.counters().all_reduce, which + 1) << what;
      }
      // g backward: identity.
      Tensor dy = Sharded(*ctx, shape, dtype, seed + 3, me);
      Tensor dy_copy = Sharded(*ctx, shape, dtype, seed + 3, me);
      ASSERT_TRUE(ReduceFromTensorParallelRegionBackward(c, dy.view()).ok());
      EXPECT_EQ(0, std::memcmp(dy.data(), dy_copy.data(), dy.nbytes())) << what;
      EXPECT_EQ(c.counters().all_reduce, 2) << what;
      EXPECT_EQ(c.counters().calls(), 2) << what;
      c.ResetCounters();
    }
    EXPECT_EQ(ctx->dp().counters(), CommCounters());
  }
}

TEST_F(MappingsTest, GatherAndScatterForwardBackward) {
  for (int tp : TpDegrees(comm_->size())) {
    ASSERT_OK_AND_ASSIGN(auto ctx, Context(tp));
    Communicator& c = ctx->tp();
    const int me = ctx->tp_rank();
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (const Shape& local : {Shape{5}, Shape{4, 5}, Shape{2, 3, 1}}) {
        const std::string what =
            absl::StrCat("tp=", tp, " ", DTypeName(dtype), ShapeToString(local));
        const uint64_t seed = 1000 + 10 * tp + static_cast<int>(dtype);
        const int64_t cols = local.back();
        const int64_t rows = NumElements(local) / cols;
        Shape full = local;
        full.back() *= tp;
        // Gather forward: y = [x_0 | x_1 | ...] along the last dim.
        Tensor x = Sharded(*ctx, local, dtype, seed, me);
        Tensor y = Tensor::Host(full, dtype);
        ASSERT_TRUE(GatherFromTensorParallelRegionForward(c, x.view(), y.view()).ok()) << what;
        std::vector<double> expected(y.numel());
        for (int r = 0; r < tp; ++r) {
          const std::vector<double> xr = ToDoubles(Sharded(*ctx, local, dtype, seed, r).view());
          for (int64_t i = 0; i < rows; ++i) {
            for (int64_t j = 0; j < cols; ++j)
              expected[i * tp * cols + r * cols + j] = xr[i * cols + j];
          }
        }
        EXPECT_EQ(ToDoubles(y.view()), expected) << what << " gather forward";
        // Gather backward: this rank's columns of the (replicated) dy.
        Tensor dy = Replicated(*ctx, full, dtype, seed + 1);
        Tensor dx = Tensor::Host(local, dtype);
        ASSERT_TRUE(GatherFromTensorParallelRegionBackward(c, dy.view(), dx.view()).ok()) << what;
        const std::vector<double> dyv = ToDoubles(dy.view());
        std::vector<double> mine(dx.numel());
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t j = 0; j < cols; ++j)
            mine[i * cols + j] = dyv[i * tp * cols + me * cols + j];
        }
        EXPECT_EQ(ToDoubles(dx.view()), mine) << what << " gather backward";
        // Scatter forward: the same slicing of a replicated x.
        Tensor xs = Replicated(*ctx, full, dtype, seed + 1);
        Tensor ys = Tensor::Host(local, dtype);
        ASSERT_TRUE(ScatterToTensorParallelRegionForward(c, xs.view(), ys.view()).ok()) << what;
        EXPECT_EQ(ToDoubles(ys.view()), mine) << what << " scatter forward";
        // Scatter backward: gather of every rank's dy_local.
        Tensor dxs = Tensor::Host(full, dtype);
        ASSERT_TRUE(ScatterToTensorParallelRegionBackward(c, x.view(), dxs.view()).ok()) << what;
        EXPECT_EQ(ToDoubles(dxs.view()), expected) << what << " scatter backward";
        EXPECT_EQ(c.counters().all_gather, 2) << what;
        EXPECT_EQ(c.counters().calls(), 2) << what;
        c.ResetCounters();
      }
    }
  }
}

// L(x) = <w, g(a_r * tanh(f(x)))>: x and w replicated over the TP group, a_r per rank. The
// distributed backward (g: identity, local derivative, f: all-reduce) must equal the gradient of
// the serial L(x) = sum_i w_i tanh(x_i) sum_r a_r,i.
TEST_F(MappingsTest, CopyThenReduceGradientMatchesFiniteDifferences) {
  const Shape shape = {3, 7};
  const double u = UnitRoundoff(DType::kF32);
  for (int tp : TpDegrees(comm_->size())) {
    ASSERT_OK_AND_ASSIGN(auto ctx, Context(tp));
    Communicator& c = ctx->tp();
    const uint64_t seed = 2000 + tp;
    Tensor x = Replicated(*ctx, shape, DType::kF32, seed);
    Tensor w = Replicated(*ctx, shape, DType::kF32, seed + 1);
    Tensor a = Sharded(*ctx, shape, DType::kF32, seed + 2, ctx->tp_rank());
    const std::vector<double> xv = ToDoubles(x.view()), wv = ToDoubles(w.view());
    std::vector<double> a_sum(x.numel(), 0.0), a_abs(x.numel(), 0.0);
    for (int r = 0; r < tp; ++r) {
      const std::vector<double> ar =
          ToDoubles(Sharded(*ctx, shape, DType::kF32, seed + 2, r).view());
      for (size_t i = 0; i < ar.size(); ++i) {
        a_sum[i] += ar[i];
        a_abs[i] += std::fabs(ar[i]);
      }
    }
    auto serial_loss = [&](const std::vector<double>& xs) {
      double l = 0;
      for (size_t i = 0; i < xs.size(); ++i) l += wv[i] * std::tanh(xs[i]) * a_sum[i];
      return l;
    };
    // Forward.
    ASSERT_TRUE(CopyToTensorParallelRegionForward(c, x.view()).ok());
    Tensor z = ScaledTanh(a, x);
    ASSERT_TRUE(ReduceFromTensorParallelRegionForward(c, z.view()).ok());
    double loss = 0, loss_scale = 0;
    for (int64_t i = 0; i < z.numel(); ++i) {
      loss += wv[i] * z.data_as<float>()[i];
      loss_scale += std::fabs(wv[i]) * a_abs[i];
    }
    EXPECT_NEAR(loss, serial_loss(xv), 4 * (tp + 2) * u * loss_scale) << "tp=" << tp;
    // Backward.
    Tensor dz = Replicated(*ctx, shape, DType::kF32, seed + 1);  // dL/dy = w
    ASSERT_TRUE(ReduceFromTensorParallelRegionBackward(c, dz.view()).ok());
    Tensor dx = ScaledTanhBackward(a, x, dz);
    ASSERT_TRUE(CopyToTensorParallelRegionBackward(c, dx.view()).ok());
    const std::vector<double> numeric = NumericalGradient(serial_loss, xv);
    std::vector<double> bound(numeric.size());
    for (size_t i = 0; i < bound.size(); ++i)
      bound[i] = 8 * (tp + 2) * u * std::fabs(wv[i]) * a_abs[i] + 1e-8;
    ExpectWithin(ToDoubles(dx.view()), numeric, bound, absl::StrCat("f/g gradient tp=", tp));
    // One all-reduce forward (g), one backward (f).
    EXPECT_EQ(c.counters().all_reduce, 2);
    EXPECT_EQ(c.counters().calls(), 2);
  }
}

// L(x) = <w, gather(a_r * tanh(scatter(x)))> with x, w replicated [3, T*5] and a_r [3, 5] per rank.
TEST_F(MappingsTest, ScatterThenGatherGradientMatchesFiniteDifferences) {
  const double u = UnitRoundoff(DType::kF32);
  for (int tp : TpDegrees(comm_->size())) {
    ASSERT_OK_AND_ASSIGN(auto ctx, Context(tp));
    Communicator& c = ctx->tp();
    const int me = ctx->tp_rank();
    const int64_t rows = 3, cols = 5;
    const Shape local = {rows, cols}, full = {rows, tp * cols};
    const uint64_t seed = 3000 + tp;
    Tensor x = Replicated(*ctx, full, DType::kF32, seed);
    Tensor w = Replicated(*ctx, full, DType::kF32, seed + 1);
    Tensor a = Sharded(*ctx, local, DType::kF32, seed + 2, me);
    const std::vector<double> xv = ToDoubles(x.view()), wv = ToDoubles(w.view());
    // a_full[i, r*cols + j] = a_r[i, j].
    std::vector<double> a_full(NumElements(full));
    for (int r = 0; r < tp; ++r) {
      const std::vector<double> ar =
          ToDoubles(Sharded(*ctx, local, DType::kF32, seed + 2, r).view());
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) a_full[i * tp * cols + r * cols + j] = ar[i * cols + j];
      }
    }
    auto serial_loss = [&](const std::vector<double>& xs) {
      double l = 0;
      for (size_t i = 0; i < xs.size(); ++i) l += wv[i] * a_full[i] * std::tanh(xs[i]);
      return l;
    };
    // Forward.
    Tensor xr = Tensor::Host(local, DType::kF32);
    ASSERT_TRUE(ScatterToTensorParallelRegionForward(c, x.view(), xr.view()).ok());
    Tensor z = ScaledTanh(a, xr);
    Tensor y = Tensor::Host(full, DType::kF32);
    ASSERT_TRUE(GatherFromTensorParallelRegionForward(c, z.view(), y.view()).ok());
    double loss = 0, scale = 0;
    for (int64_t i = 0; i < y.numel(); ++i) {
      loss += wv[i] * y.data_as<float>()[i];
      scale += std::fabs(wv[i] * a_full[i]);
    }
    EXPECT_NEAR(loss, serial_loss(xv), 8 * u * scale) << "tp=" << tp;
    // Backward.
    Tensor dz = Tensor::Host(local, DType::kF32);
    ASSERT_TRUE(GatherFromTensorParallelRegionBackward(c, w.view(), dz.view()).ok());
    Tensor dxr = ScaledTanhBackward(a, xr, dz);
    Tensor dx = Tensor::Host(full, DType::kF32);
    ASSERT_TRUE(ScatterToTensorParallelRegionBackward(c, dxr.view(), dx.view()).ok());
    const std::vector<double> numeric = NumericalGradient(serial_loss, xv);
    std::vector<double> bound(numeric.size());
    for (size_t i = 0; i < bound.size(); ++i)
      bound[i] = 8 * u * std::fabs(wv[i] * a_full[i]) + 1e-8;
    ExpectWithin(ToDoubles(dx.view()), numeric, bound,
                 absl::StrCat("scatter/gather gradient tp=", tp));
    EXPECT_EQ(c.counters().all_gather, 2);
    EXPECT_EQ(c.counters().calls(), 2);
  }
}

TEST_F(MappingsTest, BadShapesAreInvalidArgument) {
  const int tp = comm_->size();
  ASSERT_OK_AND_ASSIGN(auto ctx, Context(tp));
  Communicator& c = ctx->tp();
  float buf[256] = {};
  TensorView x(buf, Shape{2, 3}, DType::kF32);
  TensorView wrong_y(buf + 64, Shape{2, 3 * tp + 1}, DType::kF32);
  absl::Status s = GatherFromTensorParallelRegionForward(c, x, wrong_y);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("GatherFromTensorParallelRegion::Forward"), std::string::npos) << s;
  s = ScatterToTensorParallelRegionBackward(c, x, wrong_y);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("ScatterToTensorParallelRegion::Backward"), std::string::npos) << s;
  // A part whose last dim is not full / tp.
  TensorView part(buf + 128, Shape{2, 4}, DType::kF32);
  s = ScatterToTensorParallelRegionForward(c, TensorView(buf, Shape{2, 3 * tp}, DType::kF32), part);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("ScatterToTensorParallelRegion::Forward"), std::string::npos) << s;
  if (tp > 1) {
    s = GatherFromTensorParallelRegionBackward(c,
                                               TensorView(buf, Shape{2, 3 * tp + 1}, DType::kF32),
                                               TensorView(buf + 128, Shape{2, 3}, DType::kF32));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("not divisible"), std::string::npos) << s;
  }
  TensorView strided(buf, Shape{3, 2}, DType::kF32);
  strided.strides = {1, 3};
  for (absl::Status st : {CopyToTensorParallelRegionForward(c, strided),
                          CopyToTensorParallelRegionBackward(c, strided),
                          ReduceFromTensorParallelRegionForward(c, strided),
                          ReduceFromTensorParallelRegionBackward(c, strided)}) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("contiguous"), std::string::npos) << st;
  }
  TensorView bf(buf + 128, Shape{2, 3}, DType::kBF16);
  EXPECT_EQ(SplitLastDim("test", TensorView(buf, Shape{2, 3}, DType::kF32), 0, 1, bf).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitLastDim("test", x, 1, 1, TensorView(buf + 128, Shape{2, 3}, DType::kF32)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.counters(), CommCounters()) << c.counters().DebugString();
}

}  // namespace
}  // namespace comm
}  // namespace mt
