// Multi-process test of the MPI communicator's non-blocking all-reduce and reduce-scatter
// (CommRequest), and of CUDA
// tensors staged through host memory. Linked into mpi_communicator_test_bin with
// mpi_communicator_test.cc; run under mpirun (comm/mpi_test.sh) with 1-4 ranks. Every rank
// regenerates every rank's data and checks its own result against the serial float64 answer.
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_testutil.h"
#include "core/cuda_device.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace comm {
namespace {

using ::mt::testing::ToDoubles;
using testing::CaseName;
using testing::ExpectIdenticalOnAllRanks;
using testing::ExpectMpiSum;
using testing::ExpectWithin;
using testing::GatheredLastDim;
using testing::MpiSumBound;
using testing::MpiTest;
using testing::RankData;
using testing::SerialReduce;
using testing::SerialReduction;

// Waits for every request, latest first (completion order need not follow start order).
void WaitAll(std::vector<std::unique_ptr<CommRequest>>* requests, const std::string& what) {
  for (auto it = requests->rbegin(); it != requests->rend(); ++it) {
    absl::Status s = (*it)->Wait();
    ASSERT_TRUE(s.ok()) << what << ": " << s;
    EXPECT_TRUE((*it)->done()) << what;
  }
}

int64_t NotDone(const std::vector<std::unique_ptr<CommRequest>>& requests) {
  int64_t count = 0;
  for (const auto& r : requests) count += r->done() ? 0 : 1;
  return count;
}

// ---- A trainer's pattern: one f32 gradient buffer all-reduced in buckets of odd sizes, each
// started as soon as it is ready and polled now and then, with blocking all-reduces on the same
// communicator and on a sub-communicator issued in between, and the waits at the end.

constexpr uint64_t kBucketSeed = 1000;
constexpr int64_t kGradElements = 70001;
constexpr int kBuckets = 7;

// One rank's tensors in that pattern, and how their data was made.
struct BucketTraffic {
  Tensor grads;              // [kGradElements]: all-reduced in kBuckets buckets on comm
  std::vector<Tensor> side;  // [5, 7] each: blocking all-reduces on comm after odd buckets
  // On the sub-communicator: a max (idempotent, so repeating it keeps the reference simple) of
  // data that differs between the two parity groups, and an async sum started on it while
  // comm's are pending.
  uint64_t sub_seed;
  Tensor sub_max;  // [17, 3]
  Tensor sub_sum;  // [129]
};

uint64_t SideSeed(int bucket) { return kBucketSeed + 20 + bucket; }

BucketTraffic MakeTraffic(int rank, int sub_rank) {
  BucketTraffic t;
  t.grads = RankData({kGradElements}, DType::kF32, kBucketSeed, rank);
  t.sub_seed = kBucketSeed + 1 + rank % 2;
  t.sub_max = RankData({17, 3}, DType::kF32, t.sub_seed, sub_rank);
  t.sub_sum = RankData({129}, DType::kF32, t.sub_seed + 10, sub_rank);
  return t;
}

// Issues the pattern on `comm` and `sub` and waits for every request.
void RunBuckets(Communicator& comm, Communicator& sub, BucketTraffic* t) {
  const int64_t sizes[] = {1, 3, 17, 129, 4096, 30000};  // The last bucket takes the rest.
  std::vector<std::unique_ptr<CommRequest>> requests;
  std::unique_ptr<CommRequest> sub_request;
  int64_t begin = 0;
  for (int b = 0; b < kBuckets; ++b) {
    const int64_t end = b + 1 == kBuckets ? kGradElements : begin + sizes[b];
    auto r = comm.AllReduceAsync(t->grads.view().Slice(begin, end), ReduceOp::kSum);
    ASSERT_TRUE(r.ok()) << "bucket " << b << ": " << r.status();
    requests.push_back(std::move(r).value());
    begin = end;
    ASSERT_TRUE(sub.AllReduce(t->sub_max.view(), ReduceOp::kMax).ok());
    if (b == 2) {
      auto sr = sub.AllReduceAsync(t->sub_sum.view(), ReduceOp::kSum);
      ASSERT_TRUE(sr.ok()) << sr.status();
      sub_request = std::move(sr).value();
    }
    if (b % 2 == 1) {
      t->side.push_back(RankData({5, 7}, DType::kF32, SideSeed(b), comm.rank()));
      ASSERT_TRUE(comm.AllReduce(t->side.back().view(), ReduceOp::kSum).ok());
    }
    // Poll the earlier requests, as the trainer does after each layer's backward.
    for (auto& req : requests) ASSERT_TRUE(req->Test().ok());
    EXPECT_EQ(comm.pending_requests(), NotDone(requests));
  }
  ASSERT_TRUE(sub_request->Wait().ok());
  WaitAll(&requests, "buckets");
}

TEST_F(MpiTest, AsyncBucketsInterleavedWithBlockingCalls) {
  const int n = comm_->size(), me = comm_->rank();
  auto sub_or = comm_->Split(me % 2, me, "parity");
  ASSERT_TRUE(sub_or.ok()) << sub_or.status();
  Communicator& sub = **sub_or;
  BucketTraffic t = MakeTraffic(me, sub.rank());
  RunBuckets(*comm_, sub, &t);
  if (HasFatalFailure()) return;
  EXPECT_EQ(comm_->pending_requests(), 0);
  EXPECT_EQ(sub.pending_requests(), 0);

  // The same data through the blocking call.
  Tensor blocking = RankData({kGradElements}, DType::kF32, kBucketSeed, me);
  ASSERT_TRUE(comm_->AllReduce(blocking.view(), ReduceOp::kSum).ok());
  const int64_t sides = static_cast<int64_t>(t.side.size());
  CommCounters expected;
  expected.all_reduce = kBuckets + sides + 1;
  expected.bytes = 2 * kGradElements * 4 + sides * 35 * 4;
  EXPECT_EQ(comm_->counters(), expected) << comm_->counters().DebugString();
  EXPECT_EQ(sub.counters().all_reduce, kBuckets + 1);

  ExpectMpiSum(t.grads.view(), {kGradElements}, DType::kF32, kBucketSeed, n, "async buckets");
  if (n <= 2) {
    // One addition per element (a + b == b + a): any algorithm gives the blocking call's bits.
    EXPECT_EQ(0, std::memcmp(t.grads.data(), blocking.data(), t.grads.nbytes()))
        << "async buckets differ from the blocking all-reduce";
  }
  ExpectIdenticalOnAllRanks(*comm_, t.grads.view(), "async buckets");
  for (int64_t i = 0; i < sides; ++i) {
    const int b = 2 * static_cast<int>(i) + 1;
    ExpectMpiSum(t.side[i].view(), {5, 7}, DType::kF32, SideSeed(b), n,
                 absl::StrCat("blocking all-reduce between buckets ", b, " and ", b + 1));
  }
  // sub: ranks of my parity, in rank order (key = me).
  EXPECT_EQ(ToDoubles(t.sub_max.view()),
            SerialReduce({17, 3}, DType::kF32, t.sub_seed, sub.size(), ReduceOp::kMax).exact)
      << "blocking max on the sub-communicator";
  ExpectMpiSum(t.sub_sum.view(), {129}, DType::kF32, t.sub_seed + 10, sub.size(),
               "async sum on the sub-communicator");
}

// ---- Every dtype, polling, requests destroyed unwaited, counters and local errors

// Every dtype (16-bit floats through the staged f32 path), sums and maxima, several requests
// outstanding at once, against float64.
TEST_F(MpiTest, AsyncAllReduceMatchesSerialForEveryDtype) {
  const DType kAllDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64};
  const Shape kShapes[] = {{1}, {3}, {17}, {129}, {5, 7}, {3, 4, 5}, {70001}};
  const int n = comm_->size(), me = comm_->rank();
  uint64_t seed = 1100;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    for (DType dtype : kAllDTypes) {
      std::vector<Tensor> data;
      std::vector<uint64_t> seeds;
      std::vector<std::unique_ptr<CommRequest>> requests;
      for (const Shape& shape : kShapes) {
        seeds.push_back(++seed);
        data.push_back(RankData(shape, dtype, seed, me));
        auto r = comm_->AllReduceAsync(data.back().view(), op);
        ASSERT_TRUE(r.ok()) << CaseName(dtype, shape) << ": " << r.status();
        requests.push_back(std::move(r).value());
      }
      WaitAll(&requests, std::string(DTypeName(dtype)));
      for (size_t k = 0; k < data.size(); ++k) {
        const Shape& shape = kShapes[k];
        const std::string what =
            absl::StrCat("async all-reduce ", ReduceOpName(op), " ", CaseName(dtype, shape));
        if (op == ReduceOp::kSum) {
          ExpectMpiSum(data[k].view(), shape, dtype, seeds[k], n, what);
        } else {
          EXPECT_EQ(ToDoubles(data[k].view()),
                    SerialReduce(shape, dtype, seeds[k], n, ReduceOp::kMax).exact)
              << what;
        }
      }
    }
  }
  EXPECT_EQ(comm_->pending_requests(), 0);
}

// The non-blocking reduce-scatter: every dtype, sums and maxima, several requests outstanding at
// once (each waited for latest first) with a blocking all-reduce issued between them, counted as
// reduce-scatters; each rank's rows against float64.
TEST_F(MpiTest, AsyncReduceScatterMatchesSerialForEveryDtype) {
  const DType kAllDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64};
  const Shape kOutShapes[] = {{1}, {17, 3}, {129}, {20001}};
  const int n = comm_->size(), me = comm_->rank();
  uint64_t seed = 1400;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    for (DType dtype : kAllDTypes) {
      const CommCounters before = comm_->counters();
      std::vector<Tensor> ins, outs;
      std::vector<uint64_t> seeds;
      std::vector<std::unique_ptr<CommRequest>> requests;
      for (const Shape& out_shape : kOutShapes) {
        Shape in_shape = out_shape;
        in_shape[0] *= n;
        seeds.push_back(++seed);
        ins.push_back(RankData(in_shape, dtype, seed, me));
        outs.push_back(Tensor::Host(out_shape, dtype));
        auto r = comm_->ReduceScatterAsync(ins.back().view(), outs.back().view(), op);
        ASSERT_TRUE(r.ok()) << CaseName(dtype, out_shape) << ": " << r.status();
        requests.push_back(std::move(r).value());
        if (requests.size() == 2) {
          int64_t one = 1;
          ASSERT_TRUE(
              comm_->AllReduce(TensorView(&one, Shape{1}, DType::kI64), ReduceOp::kSum).ok());
          EXPECT_EQ(one, n);
        }
      }
      EXPECT_EQ(comm_->counters().reduce_scatter - before.reduce_scatter, 4);
      WaitAll(&requests, std::string(DTypeName(dtype)));
      EXPECT_EQ(comm_->pending_requests(), 0);
      for (size_t k = 0; k < outs.size(); ++k) {
        const Shape& out_shape = kOutShapes[k];
        Shape in_shape = out_shape;
        in_shape[0] *= n;
        const int64_t m = outs[k].numel();
        const SerialReduction want = SerialReduce(in_shape, dtype, seeds[k], n, op, me * m, m);
        const std::string what = absl::StrCat("async reduce-scatter ", ReduceOpName(op), " ",
                                              CaseName(dtype, out_shape));
        if (op == ReduceOp::kSum) {
          ExpectWithin(ToDoubles(outs[k].view()), want.exact, MpiSumBound(dtype, want, n), what);
        } else {
          EXPECT_EQ(ToDoubles(outs[k].view()), want.exact) << what;
        }
      }
    }
  }
  // Local errors are statuses, named after the call, and not counted.
  const CommCounters before = comm_->counters();
  float data[8] = {};
  auto bad = comm_->ReduceScatterAsync(TensorView(data, Shape{3 * n + 1}, DType::kF32),
                                       TensorView(data + 4, Shape{3}, DType::kF32));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_NE(bad.status().message().find("ReduceScatterAsync"), std::string::npos) << bad.status();
  EXPECT_EQ(comm_->counters(), before);
}

// Test() drives the collective to completion; after it has reported true, Test() and Wait()
// return at once and leave the result alone.
TEST_F(MpiTest, AsyncTestPollsUntilComplete) {
  const int n = comm_->size(), me = comm_->rank();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI32}) {
    const Shape shape = {70001};
    const uint64_t seed = 1200 + static_cast<int>(dtype);
    Tensor t = RankData(shape, dtype, seed, me);
    auto r = comm_->AllReduceAsync(t.view(), ReduceOp::kSum);
    ASSERT_TRUE(r.ok()) << r.status();
    CommRequest& request = **r;
    EXPECT_EQ(comm_->pending_requests(), request.done() ? 0 : 1);
    int64_t polls = 0;
    while (true) {
      absl::StatusOr<bool> complete = request.Test();
      ASSERT_TRUE(complete.ok()) << complete.status();
      ++polls;
      if (*complete) break;
    }
    EXPECT_GE(polls, 1);
    EXPECT_TRUE(request.done());
    EXPECT_EQ(comm_->pending_requests(), 0);
    ExpectMpiSum(t.view(), shape, dtype, seed, n, "polled " + CaseName(dtype, shape));
    const std::vector<double> first = ToDoubles(t.view());
    // Already complete: no second conversion or copy back.
    absl::StatusOr<bool> again = request.Test();
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(*again);
    EXPECT_TRUE(request.Wait().ok());
    EXPECT_TRUE(request.Wait().ok());
    EXPECT_EQ(ToDoubles(t.view()), first) << CaseName(dtype, shape);
  }
}

// A request destroyed before anyone waited for it completes in its destructor: the peers (which
// wait for theirs) finish, the tensor holds the result, and nothing stays pending.
TEST_F(MpiTest, DestroyingAnUnwaitedRequestCompletesIt) {
  const int n = comm_->size(), me = comm_->rank();
  for (DType dtype : {DType::kF32, DType::kF16}) {
    const Shape shape = {40000};
    const uint64_t seed = 1300 + static_cast<int>(dtype);
    Tensor t = RankData(shape, dtype, seed, me);
    {
      auto r = comm_->AllReduceAsync(t.view(), ReduceOp::kSum);
      ASSERT_TRUE(r.ok()) << r.status();
      // Even ranks drop theirs unwaited; odd ranks wait (so both kinds meet in one collective).
      if (me % 2 == 1) {
        ASSERT_TRUE((*r)->Wait().ok());
      }
    }
    EXPECT_EQ(comm_->pending_requests(), 0);
    ExpectMpiSum(t.view(), shape, dtype, seed, n, "destroyed unwaited " + CaseName(dtype, shape));
    // The communicator is still in step on every rank.
    int64_t one = 1;
    ASSERT_TRUE(comm_->AllReduce(TensorView(&one, Shape{1}, DType::kI64), ReduceOp::kSum).ok());
    EXPECT_EQ(one, n);
  }
}

TEST_F(MpiTest, AsyncCountersAndEmptyTensors) {
  Tensor a = RankData({6}, DType::kF32, 1, comm_->rank());      // 24 bytes
  Tensor h = RankData({4, 2}, DType::kBF16, 2, comm_->rank());  // 16 bytes
  Tensor e = Tensor::Host({0, 3}, DType::kF32);
  auto ra = comm_->AllReduceAsync(a.view(), ReduceOp::kSum);
  auto rh = comm_->AllReduceAsync(h.view(), ReduceOp::kMax);
  auto re = comm_->AllReduceAsync(e.view(), ReduceOp::kSum);
  ASSERT_TRUE(ra.ok() && rh.ok() && re.ok());
  // Counted when started.
  CommCounters expected;
  expected.all_reduce = 3;
  expected.bytes = 24 + 16;
  EXPECT_EQ(comm_->counters(), expected) << comm_->counters().DebugString();
  // An empty tensor has nothing to move: complete at once.
  absl::StatusOr<bool> empty_done = (*re)->Test();
  ASSERT_TRUE(empty_done.ok());
  EXPECT_TRUE(*empty_done);
  EXPECT_TRUE((*ra)->Wait().ok());
  EXPECT_TRUE((*rh)->Wait().ok());
  EXPECT_EQ(comm_->counters(), expected) << "completion is not counted again";
  EXPECT_EQ(comm_->pending_requests(), 0);
}

TEST_F(MpiTest, AsyncLocalErrorsAreStatusesAndNotCounted) {
  float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  TensorView strided(data, Shape{2, 3}, DType::kF32);
  strided.strides = {1, 2};
  auto r = comm_->AllReduceAsync(strided, ReduceOp::kSum);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("AllReduceAsync"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("contiguous"), std::string::npos) << r.status();
  EXPECT_EQ(comm_->AllReduceAsync(TensorView(nullptr, Shape{4}, DType::kF32), ReduceOp::kSum)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  uint16_t raw[4] = {1, 2, 3, 4};
  r = comm_->AllReduceAsync(TensorView(raw, Shape{4}, DType::kU16), ReduceOp::kSum);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented) << r.status();
  EXPECT_EQ(comm_->counters(), CommCounters()) << comm_->counters().DebugString();
  EXPECT_EQ(comm_->pending_requests(), 0);
}

// CUDA tensors through the MPI backend's host staging; several ranks may share one device.
TEST_F(MpiTest, CudaTensorsAreStagedThroughHost) {
  using ::mt::testing::EmptyDevice;
  using ::mt::testing::ToHost;
  const int devices = cuda::DeviceCount();
  if (devices == 0) GTEST_SKIP() << cuda::Describe();
  const int n = comm_->size(), me = comm_->rank();
  const int dev = testing::Runtime().local_rank() % devices;
  auto rank_data_on_device = [&](const Shape& shape, DType dtype, uint64_t seed) {
    return ::mt::testing::ToDevice(RankData(shape, dtype, seed, me), dev);
  };
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
    const Shape shape = {7, 9};
    const std::string what = CaseName(dtype, shape);
    const uint64_t seed = 900 + static_cast<int>(dtype);
    // All-reduce.
    Tensor d = rank_data_on_device(shape, dtype, seed);
    ASSERT_TRUE(comm_->AllReduce(d.view(), ReduceOp::kSum).ok());
    ExpectMpiSum(ToHost(d.view()).view(), shape, dtype, seed, n, "cuda all-reduce " + what);
    // Last-dim all-gather.
    Tensor x = rank_data_on_device(shape, dtype, seed + 1);
    Tensor y = EmptyDevice({7, 9 * n}, dtype, dev);
    ASSERT_TRUE(comm_->AllGather(x.view(), y.view(), GatherAxis::kLast).ok());
    EXPECT_EQ(ToDoubles(ToHost(y.view()).view()), GatheredLastDim(shape, dtype, seed + 1, n))
        << what;
    // Broadcast from the last rank.
    Tensor b = rank_data_on_device(shape, dtype, seed + 2);
    ASSERT_TRUE(comm_->Broadcast(b.view(), n - 1).ok());
    EXPECT_EQ(ToDoubles(ToHost(b.view()).view()),
              ToDoubles(RankData(shape, dtype, seed + 2, n - 1).view()));
    // Non-blocking all-reduce: staged through the request's own host buffer, two outstanding.
    Tensor a1 = rank_data_on_device(shape, dtype, seed + 3);
    Tensor a2 = rank_data_on_device(shape, dtype, seed + 4);
    auto r1 = comm_->AllReduceAsync(a1.view(), ReduceOp::kSum);
    auto r2 = comm_->AllReduceAsync(a2.view(), ReduceOp::kSum);
    ASSERT_TRUE(r1.ok() && r2.ok());
    ASSERT_TRUE((*r2)->Wait().ok());
    ASSERT_TRUE((*r1)->Wait().ok());
    ExpectMpiSum(ToHost(a1.view()).view(), shape, dtype, seed + 3, n, "cuda async " + what);
    ExpectMpiSum(ToHost(a2.view()).view(), shape, dtype, seed + 4, n, "cuda async " + what);
    // Non-blocking reduce-scatter: the device output filled when the request completes.
    Tensor rs_in = rank_data_on_device({7 * n, 9}, dtype, seed + 5);
    Tensor rs_out = EmptyDevice(shape, dtype, dev);
    auto rs = comm_->ReduceScatterAsync(rs_in.view(), rs_out.view());
    ASSERT_TRUE(rs.ok()) << rs.status();
    ASSERT_TRUE((*rs)->Wait().ok());
    const SerialReduction want =
        SerialReduce({7 * n, 9}, dtype, seed + 5, n, ReduceOp::kSum, me * 63, 63);
    ExpectWithin(ToDoubles(ToHost(rs_out.view()).view()), want.exact, MpiSumBound(dtype, want, n),
                 "cuda async reduce-scatter " + what);
  }
}

}  // namespace
}  // namespace comm
}  // namespace mt
