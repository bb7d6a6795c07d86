// Multi-process test of the sequence-parallel mappings (comm/sequence_parallel.h): values forward
// and backward against serial float64 computations for every dtype and odd shapes, the gradient of
// gather -> local -> reduce-scatter against central differences of the serial function, counted
// collectives, and bad arguments. Run under mpirun (comm/mpi_test.sh); every TP degree that
// divides the world size is tested.
#include "comm/sequence_parallel.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/mpi_testutil.h"
#include "comm/parallel_context.h"
#include "core/cuda_device.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/testutil.h"
#include "core/status_testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace comm {
namespace {

using ::mt::testing::NaNTensor;
using ::mt::testing::NumericalGradient;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;
using testing::ExpectWithin;
using testing::MpiTest;
using testing::RankData;
using testing::ScaledTanh;
using testing::ScaledTanhBackward;

constexpr int kHeads = 12;

class SequenceParallelTest : public MpiTest {
 protected:
  absl::StatusOr<std::unique_ptr<ParallelContext>> Context(int tp) {
    ParallelConfig config;
    config.tensor_parallel = tp;
    return ParallelContext::Create(*comm_, config, kHeads);
  }
  std::vector<int> TpDegrees() const {
    std::vector<int> out;
    for (int tp = 1; tp <= comm_->size(); ++tp) {
      if (comm_->size() % tp == 0) out.push_back(tp);
    }
    return out;
  }
};

// Rank r's data of a test (differs between TP ranks and DP replicas).
Tensor Data(const ParallelContext& ctx, const Shape& shape, DType dtype, uint64_t seed, int r) {
  return RankData(shape, dtype, seed + 7717u * ctx.dp_rank(), r);
}

// The serial [B, n t, ...] concatenation along T of slices[r] ([B, t, ...] each, flat).
std::vector<double> ConcatSequence(const std::vector<std::vector<double>>& slices, int64_t B) {
  const int n = static_cast<int>(slices.size());
  const int64_t c = static_cast<int64_t>(slices[0].size()) / B;
  std::vector<double> full(n * B * c);
  for (int r = 0; r < n; ++r) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < c; ++i) full[(b * n + r) * c + i] = slices[r][b * c + i];
    }
  }
  return full;
}

// Positions [index t, (index + 1) t) of a flat serial [B, n t, ...].
std::vector<double> SliceSequence(const std::vector<double>& full, int64_t B, int n, int index) {
  const int64_t c = static_cast<int64_t>(full.size()) / (B * n);
  std::vector<double> part(B * c);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < c; ++i) part[b * c + i] = full[(b * n + index) * c + i];
  }
  return part;
}

TEST_F(SequenceParallelTest, ForwardAndBackwardMatchSerial) {
  for (int tp : TpDegrees()) {
    ASSERT_OK_AND_ASSIGN(auto ctx, Context(tp));
    Communicator& c = ctx->tp();
    const int me = ctx->tp_rank();
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (const Shape& local : {Shape{1, 3, 5}, Shape{3, 2, 7}, Shape{2, 1, 3, 2}}) {
        const std::string what = absl::StrCat("tp=", tp, " ", testing::CaseName(dtype, local));
        const uint64_t seed = 100 * tp + 10 * static_cast<int>(dtype) + local.size();
        const int64_t B = local[0];
        Shape full = local;
        full[1] *= tp;
        // Slices of every rank, and the serial gathered tensor.
        std::vector<std::vector<double>> slices;
        for (int r = 0; r < tp; ++r)
          slices.push_back(ToDoubles(Data(*ctx, local, dtype, seed, r).view()));
        const std::vector<double> gathered = ConcatSequence(slices, B);
        Tensor x_local = Data(*ctx, local, dtype, seed, me);
        // All-gathers: Gather forward, Scatter backward, ReduceScatter backward.
        for (int which = 0; which < 3; ++which) {
          Tensor y = NaNTensor(full, dtype);
          const absl::Status s =
              which == 0 ? GatherFromSequenceParallelRegionForward(c, x_local.view(), y.view())
              : which == 1
                  ? ScatterToSequenceParallelRegionBackward(c, x_local.view(), y.view())
                  : ReduceScatterToSequenceParallelRegionBackward(c, x_local.view(), y.view());
          ASSERT_TRUE(s.ok()) << what << " " << s;
          EXPECT_EQ(ToDoubles(y.view()), gathered) << what << " all-gather " << which;
        }
        // Scatter forward: this rank's positions of a replicated x, no communication.
        Tensor x_full = Data(*ctx, full, dtype, seed + 1, /*r=*/1000);
        Tensor part = NaNTensor(local, dtype);
        ASSERT_TRUE(ScatterToSequenceParallelRegionForward(c, x_full.view(), part.view()).ok());
        EXPECT_EQ(ToDoubles(part.view()), SliceSequence(ToDoubles(x_full.view()), B, tp, me))
            << what << " scatter forward";
        // Reduce-scatters: Gather backward, ReduceScatter forward. Partial sums differ per rank.
        std::vector<double> sum(NumElements(full), 0.0), abs_sum(NumElements(full), 0.0);
        for (int r = 0; r < tp; ++r) {
          const std::vector<double> v = ToDoubles(Data(*ctx, full, dtype, seed + 2, r).view());
          for (size_t i = 0; i < v.size(); ++i) {
            sum[i] += v[i];
            abs_sum[i] += std::fabs(v[i]);
          }
        }
        const std::vector<double> want = SliceSequence(sum, B, tp, me);
        const std::vector<double> want_abs = SliceSequence(abs_sum, B, tp, me);
        std::vector<double> bound(want.size());
        for (size_t i = 0; i < bound.size(); ++i) {
          // Summed in f32 ((n - 1) u32 sum |x_r|), rounded once to the dtype.
          bound[i] = (tp - 1) * UnitRoundoff(DType::kF32) * want_abs[i] +
                     (dtype == DType::kF32 ? 0.0 : UnitRoundoff(dtype) * 1.01 * std::fabs(want[i]));
        }
        Tensor partial = Data(*ctx, full, dtype, seed + 2, me);
        for (int which = 0; which < 2; ++which) {
          Tensor y_local = NaNTensor(local, dtype);
          const absl::Status s =
              which == 0
                  ? GatherFromSequenceParallelRegionBackward(c, partial.view(), y_local.view())
                  : ReduceScatterToSequenceParallelRegionForward(c, partial.view(), y_local.view());
          ASSERT_TRUE(s.ok()) << what << " " << s;
          ExpectWithin(ToDoubles(y_local.view()), want, bound,
                       absl::StrCat(what, " reduce-scatter ", which));
        }
        EXPECT_EQ(c.counters().all_gather, 3) << what;
        EXPECT_EQ(c.counters().reduce_scatter, 2) << what;
        EXPECT_EQ(c.counters().calls(), 5) << what;
        c.ResetCounters();
      }
    }
    EXPECT_EQ(ctx->dp().counters(), CommCounters());
  }
}

// L(x) = <w, RS(a_r * tanh(AG(x_local)))>: x [B, T, H] split along T, a_r [B, T, H] per rank, w
// [B, T, H] split like the output. The distributed backward (RS backward: all-gather of w's
// slices; AG backward: reduce-scatter of the partial gradients) must equal the gradient of the
// serial L(x) = sum_i w_i tanh(x_i) sum_r a_r,i on this rank's positions.
TEST_F(SequenceParallelTest, GatherThenReduceScatterGradientMatchesFiniteDifferences) {
  const double u = UnitRoundoff(DType::kF32);
  for (int tp : TpDegrees()) {
    ASSERT_OK_AND_ASSIGN(auto ctx, Context(tp));
    Communicator& c = ctx->tp();
    const int me = ctx->tp_rank();
    const int64_t B = 2, t = 3, H = 5;
    const Shape local = {B, t, H}, full = {B, tp * t, H};
    const uint64_t seed = 5000 + tp;
    std::vector<std::vector<double>> xs, ws;
    for (int r = 0; r < tp; ++r) {
      xs.push_back(ToDoubles(Data(*ctx, local, DType::kF32, seed, r).view()));
      ws.push_back(ToDoubles(Data(*ctx, local, DType::kF32, seed + 1, r).view()));
    }
    const std::vector<double> x_serial = ConcatSequence(xs, B), w_serial = ConcatSequence(ws, B);
    std::vector<double> a_sum(NumElements(full), 0.0), a_abs(NumElements(full), 0.0);
    for (int r = 0; r < tp; ++r) {
      const std::vector<double> ar = ToDoubles(Data(*ctx, full, DType::kF32, seed + 2, r).view());
      for (size_t i = 0; i < ar.size(); ++i) {
        a_sum[i] += ar[i];
        a_abs[i] += std::fabs(ar[i]);
      }
    }
    // The serial loss as a function of this rank's positions only.
    auto serial_loss = [&](const std::vector<double>& mine) {
      std::vector<std::vector<double>> parts = xs;
      parts[me] = mine;
      const std::vector<double> xf = ConcatSequence(parts, B);
      double l = 0;
      for (size_t i = 0; i < xf.size(); ++i) l += w_serial[i] * std::tanh(xf[i]) * a_sum[i];
      return l;
    };
    Tensor x_local = Data(*ctx, local, DType::kF32, seed, me);
    Tensor w_local = Data(*ctx, local, DType::kF32, seed + 1, me);
    Tensor a = Data(*ctx, full, DType::kF32, seed + 2, me);
    // Forward: x_full = AG(x_local); z = a_r tanh(x_full); y_local = RS(z).
    Tensor x_full = Tensor::Host(full, DType::kF32);
    ASSERT_TRUE(GatherFromSequenceParallelRegionForward(c, x_local.view(), x_full.view()).ok());
    Tensor z = ScaledTanh(a, x_full);
    Tensor y_local = Tensor::Host(local, DType::kF32);
    ASSERT_TRUE(ReduceScatterToSequenceParallelRegionForward(c, z.view(), y_local.view()).ok());
    // Backward: dz = RS'(w_local) = AG(w_local); dx_full = a_r (1 - tanh^2) dz; dx = AG'(dx_full).
    Tensor dz = Tensor::Host(full, DType::kF32);
    ASSERT_TRUE(ReduceScatterToSequenceParallelRegionBackward(c, w_local.view(), dz.view()).ok());
    Tensor dx_full = ScaledTanhBackward(a, x_full, dz);
    Tensor dx = Tensor::Host(local, DType::kF32);
    ASSERT_TRUE(GatherFromSequenceParallelRegionBackward(c, dx_full.view(), dx.view()).ok());
    // The forward value of this rank's positions: the serial y restricted to them.
    std::vector<double> y_serial(x_serial.size()), y_bound(x_serial.size());
    for (size_t i = 0; i < y_serial.size(); ++i) {
      y_serial[i] = a_sum[i] * std::tanh(x_serial[i]);
      y_bound[i] = 4 * (tp + 2) * u * a_abs[i];
    }
    ExpectWithin(ToDoubles(y_local.view()), SliceSequence(y_serial, B, tp, me),
                 SliceSequence(y_bound, B, tp, me), absl::StrCat("forward tp=", tp));
    const std::vector<double> numeric = NumericalGradient(serial_loss, xs[me]);
    const std::vector<double> w_mine = SliceSequence(w_serial, B, tp, me);
    const std::vector<double> a_mine = SliceSequence(a_abs, B, tp, me);
    std::vector<double> bound(numeric.size());
    for (size_t i = 0; i < bound.size(); ++i) {
      bound[i] = 8 * (tp + 2) * u * std::fabs(w_mine[i]) * a_mine[i] + 1e-8;
    }
    ExpectWithin(ToDoubles(dx.view()), numeric, bound, absl::StrCat("gradient tp=", tp));
    // One all-gather and one reduce-scatter each way.
    EXPECT_EQ(c.counters().all_gather, 2);
    EXPECT_EQ(c.counters().reduce_scatter, 2);
    EXPECT_EQ(c.counters().calls(), 4);
  }
}

// CUDA tensors through the MPI backend's host staging (the CUDA emulator runs it; skipped without
// a device): every mapping gives bitwise what it gives for the same host tensors, the
// reduce-scatter's rank-major scratch included (B > 1).
TEST_F(SequenceParallelTest, CudaTensorsGiveTheHostResults) {
  const int devices = cuda::DeviceCount();
  if (devices == 0) GTEST_SKIP() << cuda::Describe();
  const int dev = testing::Runtime().local_rank() % devices;
  const int tp = comm_->size(), me = comm_->rank();
  const Shape local = {3, 2, 5}, full = {3, 2 * tp, 5};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tensor x_local = RankData(local, dtype, 71, me), x_full = RankData(full, dtype, 72, me);
    const Tensor d_local = ::mt::testing::ToDevice(x_local, dev);
    const Tensor d_full = ::mt::testing::ToDevice(x_full, dev);
    Tensor host_full = NaNTensor(full, dtype), host_local = NaNTensor(local, dtype);
    Tensor dev_full = ::mt::testing::EmptyDevice(full, dtype, dev);
    Tensor dev_local = ::mt::testing::EmptyDevice(local, dtype, dev);
    ASSERT_TRUE(
        GatherFromSequenceParallelRegionForward(*comm_, x_local.view(), host_full.view()).ok());
    ASSERT_TRUE(
        GatherFromSequenceParallelRegionForward(*comm_, d_local.view(), dev_full.view()).ok());
    EXPECT_EQ(ToDoubles(::mt::testing::ToHost(dev_full.view()).view()), ToDoubles(host_full.view()))
        << DTypeName(dtype) << " all-gather";
    ASSERT_TRUE(
        GatherFromSequenceParallelRegionBackward(*comm_, x_full.view(), host_local.view()).ok());
    ASSERT_TRUE(
        GatherFromSequenceParallelRegionBackward(*comm_, d_full.view(), dev_local.view()).ok());
    EXPECT_EQ(ToDoubles(::mt::testing::ToHost(dev_local.view()).view()),
              ToDoubles(host_local.view()))
        << DTypeName(dtype) << " reduce-scatter";
    ASSERT_TRUE(
        ScatterToSequenceParallelRegionForward(*comm_, d_full.view(), dev_local.view()).ok());
    ASSERT_TRUE(
        ScatterToSequenceParallelRegionForward(*comm_, x_full.view(), host_local.view()).ok());
    EXPECT_EQ(ToDoubles(::mt::testing::ToHost(dev_local.view()).view()),
              ToDoubles(host_local.view()))
        << DTypeName(dtype) << " scatter";
  }
}

TEST_F(SequenceParallelTest, BadArgumentsAreInvalidArgument) {
  const int tp = comm_->size();
  ASSERT_OK_AND_ASSIGN(auto ctx, Context(tp));
  Communicator& c = ctx->tp();
  std::vector<float> buf(1024, 0.0f);
  const TensorView local(buf.data(), Shape{2, 3, 4}, DType::kF32);
  const TensorView full(buf.data() + 256, Shape{2, 3 * tp, 4}, DType::kF32);
  const TensorView wrong(buf.data() + 256, Shape{2, 3 * tp + 1, 4}, DType::kF32);
  struct Case {
    absl::Status status;
    const char* label;
  };
  const std::vector<Case> cases = {
      {GatherFromSequenceParallelRegionForward(c, local, wrong),
       "GatherFromSequenceParallelRegion::Forward"},
      {GatherFromSequenceParallelRegionBackward(c, wrong, local),
       "GatherFromSequenceParallelRegion::Backward"},
      {ReduceScatterToSequenceParallelRegionForward(c, wrong, local),
       "ReduceScatterToSequenceParallelRegion::Forward"},
      {ReduceScatterToSequenceParallelRegionBackward(c, local, wrong),
       "ReduceScatterToSequenceParallelRegion::Backward"},
      {ScatterToSequenceParallelRegionForward(c, wrong, local),
       "ScatterToSequenceParallelRegion::Forward"},
      {ScatterToSequenceParallelRegionBackward(c, local, wrong),
       "ScatterToSequenceParallelRegion::Backward"},
      // Rank 1 has no sequence dimension.
      {GatherFromSequenceParallelRegionForward(
           c, TensorView(buf.data(), Shape{4}, DType::kF32),
           TensorView(buf.data() + 256, Shape{4 * tp}, DType::kF32)),
       "rank >= 2"},
      // Another dtype.
      {ReduceScatterToSequenceParallelRegionForward(
           c, full, TensorView(buf.data(), Shape{2, 3, 4}, DType::kBF16)),
       "ReduceScatterToSequenceParallelRegion::Forward"},
      {SplitSequence("test", full, tp, tp, local), "part index"},
  };
  for (const Case& k : cases) {
    EXPECT_EQ(k.status.code(), absl::StatusCode::kInvalidArgument) << k.status;
    EXPECT_NE(k.status.message().find(k.label), std::string::npos) << k.status;
  }
  if (tp > 1) {
    const absl::Status s = GatherFromSequenceParallelRegionBackward(
        c, TensorView(buf.data() + 256, Shape{2, 3 * tp + 1, 4}, DType::kF32),
        TensorView(buf.data(), Shape{2, 3, 4}, DType::kF32));
    EXPECT_NE(s.message().find("not divisible"), std::string::npos) << s;
  }
  TensorView strided(buf.data(), Shape{2, 3, 4}, DType::kF32);
  strided.strides = {1, 2, 6};
  const absl::Status s = GatherFromSequenceParallelRegionForward(c, strided, full);
  EXPECT_NE(s.message().find("contiguous"), std::string::npos) << s;
  EXPECT_EQ(c.counters(), CommCounters()) << c.counters().DebugString();
}

}  // namespace
}  // namespace comm
}  // namespace mt
