// Multi-process test of the NCCL communicator on CUDA tensors against serial float64 answers.
// Needs one CUDA device per rank; skips (with the reason) otherwise. Run under mpirun
// (comm/mpi_test.sh) with 1 or 2 ranks.
#include "comm/nccl_communicator.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/mappings.h"
#include "comm/mpi_testutil.h"
#include "core/cuda_device.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace comm {
namespace {

using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;
using testing::CaseName;
using testing::ExpectWithin;
using testing::GatheredLastDim;
using testing::MpiTest;
using testing::RankData;
using testing::SerialReduce;
using testing::SerialReduction;

class NcclTest : public MpiTest {
 protected:
  void SetUp() override {
    MpiTest::SetUp();
    if (!NcclAvailable()) {
      GTEST_SKIP() << "built without NCCL (CPU-only, or the CUDA emulator)";
    }
    const int devices = cuda::DeviceCount();
    if (devices < comm_->size()) {
      GTEST_SKIP() << "NCCL needs one CUDA device per rank: " << comm_->size() << " ranks, "
                   << devices << " devices (" << cuda::Describe() << ")";
    }
    device_ = testing::Runtime().local_rank() % devices;
    auto nccl = CreateNcclCommunicator(*comm_, device_, options_, "nccl");
    ASSERT_TRUE(nccl.ok()) << nccl.status();
    nccl_ = std::move(nccl).value();
  }
  void TearDown() override {
    nccl_.reset();
    MpiTest::TearDown();
  }

  // A copy of a host tensor on this rank's device, and an uninitialised tensor there.
  Tensor ToDevice(const Tensor& host) const { return ::mt::testing::ToDevice(host, device_); }
  Tensor DeviceEmpty(const Shape& shape, DType dtype) const {
    return ::mt::testing::EmptyDevice(shape, dtype, device_);
  }
  static std::vector<double> HostValues(const Tensor& d) {
    return ToDoubles(::mt::testing::ToHost(d.view()).view());
  }

  NcclOptions options_;
  int device_ = 0;
  std::unique_ptr<Communicator> nccl_;
};

// NCCL reduces natively in the dtype: n - 1 roundings to it, plus the last.
std::vector<double> NcclSumBound(DType dtype, const SerialReduction& want, int n) {
  std::vector<double> bound(want.exact.size(), 0.0);
  if (!IsFloating(dtype)) return bound;
  const double u = UnitRoundoff(dtype);
  for (size_t i = 0; i < bound.size(); ++i) bound[i] = n * u * want.abs_sum[i] * (1 + n * u);
  return bound;
}

TEST_F(NcclTest, AllReduceMatchesSerial) {
  const int n = nccl_->size(), me = nccl_->rank();
  EXPECT_EQ(nccl_->backend(), "nccl");
  EXPECT_EQ(me, comm_->rank());
  uint64_t seed = 10;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
    for (const Shape& shape : {Shape{1}, Shape{17}, Shape{5, 7}, Shape{70001}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        ++seed;
        Tensor d = ToDevice(RankData(shape, dtype, seed, me));
        ASSERT_TRUE(nccl_->AllReduce(d.view(), op).ok()) << CaseName(dtype, shape);
        const SerialReduction want = SerialReduce(shape, dtype, seed, n, op);
        const std::vector<double> bound = op == ReduceOp::kSum
                                              ? NcclSumBound(dtype, want, n)
                                              : std::vector<double>(want.exact.size(), 0.0);
        ExpectWithin(
            HostValues(d), want.exact, bound,
            absl::StrCat("nccl all-reduce ", ReduceOpName(op), " ", CaseName(dtype, shape)));
      }
    }
  }
}

// Non-blocking all-reduce of buckets of one buffer, with blocking calls and a CPU-tensor request
// (through the MPI bootstrap) in between; Test() polling, Wait(), and a request destroyed unwaited.
TEST_F(NcclTest, AsyncAllReduceBuckets) {
  const int n = nccl_->size(), me = nccl_->rank();
  const uint64_t seed = 20;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI32}) {
    const int64_t total = 70001;
    Tensor d = ToDevice(RankData({total}, dtype, seed + static_cast<int>(dtype), me));
    const int64_t bounds[] = {0, 1, 4, 21, 150, 4246, 34246, total};
    std::vector<std::unique_ptr<CommRequest>> requests;
    for (int b = 0; b + 1 < 8; ++b) {
      auto r = nccl_->AllReduceAsync(d.view().Slice(bounds[b], bounds[b + 1]), ReduceOp::kSum);
      ASSERT_TRUE(r.ok()) << r.status();
      requests.push_back(std::move(r).value());
      if (b == 3) {
        Tensor side = ToDevice(RankData({17}, DType::kF32, seed + 50, me));
        ASSERT_TRUE(nccl_->AllReduce(side.view(), ReduceOp::kMax).ok());
        int64_t v = me + 1;
        auto cpu = nccl_->AllReduceAsync(TensorView(&v, Shape{1}, DType::kI64), ReduceOp::kSum);
        ASSERT_TRUE(cpu.ok()) << cpu.status();
        ASSERT_TRUE((*cpu)->Wait().ok());
        EXPECT_EQ(v, n * (n + 1) / 2);
      }
    }
    while (true) {
      absl::StatusOr<bool> complete = requests.front()->Test();
      ASSERT_TRUE(complete.ok()) << complete.status();
      if (*complete) break;
    }
    for (auto it = requests.rbegin(); it != requests.rend(); ++it) {
      ASSERT_TRUE((*it)->Wait().ok());
    }
    EXPECT_EQ(nccl_->pending_requests(), 0);
    const SerialReduction want =
        SerialReduce({total}, dtype, seed + static_cast<int>(dtype), n, ReduceOp::kSum);
    ExpectWithin(HostValues(d), want.exact, NcclSumBound(dtype, want, n),
                 "nccl async buckets " + CaseName(dtype, {total}));
  }
  // Destroyed without a wait: the destructor waits, the result lands.
  Tensor t = ToDevice(RankData({1000}, DType::kF32, seed + 99, me));
  {
    auto r = nccl_->AllReduceAsync(t.view(), ReduceOp::kMax);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  EXPECT_EQ(nccl_->pending_requests(), 0);
  EXPECT_EQ(HostValues(t), SerialReduce({1000}, DType::kF32, seed + 99, n, ReduceOp::kMax).exact);
  // Validation as AllReduce.
  uint16_t raw[2] = {1, 2};
  EXPECT_EQ(
      nccl_->AllReduceAsync(TensorView(raw, Shape{2}, DType::kU16), ReduceOp::kSum).status().code(),
      absl::StatusCode::kUnimplemented);
}

TEST_F(NcclTest, GathersScatterBroadcast) {
  const int n = nccl_->size(), me = nccl_->rank();
  uint64_t seed = 100;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64, DType::kU16}) {
    const Shape shape = {6, 5};
    ++seed;
    Tensor x = ToDevice(RankData(shape, dtype, seed, me));
    Tensor first = DeviceEmpty({6 * n, 5}, dtype);
    Tensor last = DeviceEmpty({6, 5 * n}, dtype);
    ASSERT_TRUE(nccl_->AllGather(x.view(), first.view()).ok());
    ASSERT_TRUE(nccl_->AllGather(x.view(), last.view(), GatherAxis::kLast).ok());
    std::vector<double> want_first;
    for (int r = 0; r < n; ++r) {
      const std::vector<double> xr = ToDoubles(RankData(shape, dtype, seed, r).view());
      want_first.insert(want_first.end(), xr.begin(), xr.end());
    }
    EXPECT_EQ(HostValues(first), want_first) << CaseName(dtype, shape);
    EXPECT_EQ(HostValues(last), GatheredLastDim(shape, dtype, seed, n)) << CaseName(dtype, shape);
    for (int root = 0; root < n; ++root) {
      Tensor b = ToDevice(RankData(shape, dtype, seed + 50 + root, me));
      ASSERT_TRUE(nccl_->Broadcast(b.view(), root).ok());
      EXPECT_EQ(HostValues(b), ToDoubles(RankData(shape, dtype, seed + 50 + root, root).view()));
    }
    if (dtype == DType::kU16) continue;  // Not reducible.
    Tensor in = ToDevice(RankData({6 * n, 5}, dtype, seed + 99, me));
    Tensor out = DeviceEmpty(shape, dtype);
    ASSERT_TRUE(nccl_->ReduceScatter(in.view(), out.view()).ok());
    const SerialReduction want =
        SerialReduce({6 * n, 5}, dtype, seed + 99, n, ReduceOp::kSum, me * 30, 30);
    std::vector<double> bound(30, 0.0);
    if (IsFloating(dtype)) {
      for (int i = 0; i < 30; ++i) bound[i] = n * UnitRoundoff(dtype) * want.abs_sum[i] * 1.01;
    }
    ExpectWithin(HostValues(out), want.exact, bound,
                 "nccl reduce-scatter " + CaseName(dtype, shape));
  }
  EXPECT_EQ(nccl_->counters().all_gather, 8);
  EXPECT_EQ(nccl_->counters().reduce_scatter, 3);
}

TEST_F(NcclTest, SendRecvBarrierAndCpuTensors) {
  const int n = nccl_->size(), me = nccl_->rank();
  ASSERT_TRUE(nccl_->Barrier().ok());
  if (n > 1) {
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    Tensor mine = ToDevice(RankData({1000}, DType::kF32, 7, me));
    Tensor got = DeviceEmpty({1000}, DType::kF32);
    if (me % 2 == 0) {
      ASSERT_TRUE(nccl_->Send(mine.view(), next).ok());
      ASSERT_TRUE(nccl_->Recv(got.view(), prev).ok());
    } else {
      ASSERT_TRUE(nccl_->Recv(got.view(), prev).ok());
      ASSERT_TRUE(nccl_->Send(mine.view(), next).ok());
    }
    EXPECT_EQ(HostValues(got), ToDoubles(RankData({1000}, DType::kF32, 7, prev).view()));
  }
  // CPU tensors go through the bootstrap (MPI).
  int64_t v = me + 1;
  ASSERT_TRUE(nccl_->AllReduce(TensorView(&v, Shape{1}, DType::kI64), ReduceOp::kSum).ok());
  EXPECT_EQ(v, n * (n + 1) / 2);
  // A CUDA view on another device is rejected before anything moves (the pointer is not used).
  TensorView elsewhere(reinterpret_cast<void*>(0x1000), Shape{4}, DType::kF32,
                       Device::Cuda(device_ + 1));
  absl::Status s = nccl_->AllReduce(elsewhere, ReduceOp::kSum);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(nccl_->counters().barrier, 1);
}

TEST_F(NcclTest, SplitAndMappingsOnDevice) {
  const int me = nccl_->rank();
  auto sub_or = nccl_->Split(me % 2, me, "parity");
  ASSERT_TRUE(sub_or.ok()) << sub_or.status();
  Communicator& sub = **sub_or;
  EXPECT_EQ(sub.backend(), "nccl");
  const int t = sub.size();
  // f backward (all-reduce) and the last-dim gather/split on CUDA tensors.
  Tensor dx = ToDevice(RankData({4, 3}, DType::kF32, 55 + me % 2, sub.rank()));
  ASSERT_TRUE(CopyToTensorParallelRegionBackward(sub, dx.view()).ok());
  const SerialReduction want = SerialReduce({4, 3}, DType::kF32, 55 + me % 2, t, ReduceOp::kSum);
  std::vector<double> bound(12);
  for (int i = 0; i < 12; ++i) bound[i] = t * UnitRoundoff(DType::kF32) * want.abs_sum[i];
  ExpectWithin(HostValues(dx), want.exact, bound, "f backward on nccl");
  Tensor x = ToDevice(RankData({4, 3}, DType::kBF16, 66, sub.rank()));
  Tensor y = DeviceEmpty({4, 3 * t}, DType::kBF16);
  ASSERT_TRUE(GatherFromTensorParallelRegionForward(sub, x.view(), y.view()).ok());
  Tensor back = DeviceEmpty({4, 3}, DType::kBF16);
  ASSERT_TRUE(GatherFromTensorParallelRegionBackward(sub, y.view(), back.view()).ok());
  EXPECT_EQ(HostValues(back), ToDoubles(RankData({4, 3}, DType::kBF16, 66, sub.rank()).view()));
  EXPECT_EQ(sub.counters().all_reduce, 1);
  EXPECT_EQ(sub.counters().all_gather, 1);
}

// A rank that never joins: the waiting rank's call returns DeadlineExceeded after the timeout and
// the communicator is aborted.
class NcclTimeoutTest : public NcclTest {
 protected:
  void SetUp() override {
    options_.timeout = absl::Seconds(3);
    NcclTest::SetUp();
  }
};

TEST_F(NcclTimeoutTest, MissingPeerTimesOutAndAborts) {
  if (nccl_->size() < 2) GTEST_SKIP() << "needs two ranks";
  Tensor t = ToDevice(RankData({1 << 16}, DType::kF32, 3, nccl_->rank()));
  if (nccl_->rank() == 0) {
    absl::Status s = nccl_->AllReduce(t.view(), ReduceOp::kSum);
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find("ncclCommAbort"), std::string::npos) << s;
    s = nccl_->AllReduce(t.view(), ReduceOp::kSum);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  }
  ASSERT_TRUE(comm_->Barrier().ok());  // Over MPI.
}

}  // namespace
}  // namespace comm
}  // namespace mt
