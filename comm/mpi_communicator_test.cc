// Multi-process test of the MPI communicator: run under mpirun (comm/mpi_test.sh) with 1-4 ranks.
// Every rank regenerates every rank's random data from a seed, computes the serial answer in
// float64, and checks its own result against it.
#include "comm/mpi_communicator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "comm/mpi_testutil.h"
#include "core/cuda_device.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace comm {
namespace {

using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;
using testing::ExpectWithin;
using testing::MpiTest;
using testing::RankData;

const DType kAllDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64};
const Shape kShapes[] = {{1}, {3}, {17}, {129}, {5, 7}, {3, 4, 5}, {70001}};

std::string Case(DType dtype, const Shape& shape) {
  return absl::StrCat(DTypeName(dtype), ShapeToString(shape));
}

// Bound on |computed - exact| for a sum over ranks of values x_r (per element): the result is
// rounded once to the dtype (u_dtype |exact|) after a sum of n terms in f32 ((n-1) u_f32 sum|x_r|,
// since 16-bit floats are reduced in f32); integer sums are exact.
std::vector<double> SumBound(DType dtype, const std::vector<double>& exact,
                             const std::vector<double>& abs_sum, int n) {
  std::vector<double> bound(exact.size(), 0.0);
  if (!IsFloating(dtype)) return bound;
  const double u32 = UnitRoundoff(DType::kF32);
  const double ud = dtype == DType::kF32 ? 0.0 : UnitRoundoff(dtype);
  for (size_t i = 0; i < exact.size(); ++i) {
    bound[i] = ud * std::fabs(exact[i]) + (1 + ud) * (n - 1) * u32 * abs_sum[i] * (1 + 2 * u32);
  }
  return bound;
}

// Serial sum (and sum of magnitudes) of every rank's data.
void SerialSum(const Shape& shape, DType dtype, uint64_t seed, int n, std::vector<double>* sum,
               std::vector<double>* abs_sum) {
  sum->assign(NumElements(shape), 0.0);
  abs_sum->assign(NumElements(shape), 0.0);
  for (int r = 0; r < n; ++r) {
    const std::vector<double> x = ToDoubles(RankData(shape, dtype, seed, r).view());
    for (size_t i = 0; i < x.size(); ++i) {
      (*sum)[i] += x[i];
      (*abs_sum)[i] += std::fabs(x[i]);
    }
  }
}

// Every rank's copy of t is bit-identical (replicas must not drift apart).
void ExpectIdenticalOnAllRanks(Communicator& comm, const TensorView& t, const std::string& what) {
  Shape gathered_shape = {comm.size() * t.numel()};
  Tensor gathered = Tensor::Host(gathered_shape, t.dtype);
  TensorView flat(t.data, Shape{t.numel()}, t.dtype);
  ASSERT_TRUE(comm.AllGather(flat, gathered.view()).ok()) << what;
  for (int r = 0; r < comm.size(); ++r) {
    EXPECT_EQ(0,
              std::memcmp(static_cast<char*>(gathered.data()) + r * t.nbytes(), t.data, t.nbytes()))
        << what << ": rank " << r << " holds a different result";
  }
}

TEST_F(MpiTest, WorldMatchesRuntime) {
  EXPECT_EQ(comm_->rank(), testing::Runtime().world_rank());
  EXPECT_EQ(comm_->size(), testing::Runtime().world_size());
  EXPECT_EQ(comm_->backend(), "mpi");
  EXPECT_EQ(comm_->name(), "world");
  EXPECT_GE(testing::Runtime().local_rank(), 0);
  EXPECT_LT(testing::Runtime().local_rank(), testing::Runtime().local_size());
  // All ranks run on this machine in the tests.
  EXPECT_EQ(testing::Runtime().local_size(), comm_->size());
  EXPECT_EQ(testing::Runtime().local_rank(), comm_->rank());
}

TEST_F(MpiTest, AllReduceSumMatchesSerialSum) {
  const int n = comm_->size();
  uint64_t seed = 100;
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : kShapes) {
      ++seed;
      Tensor mine = RankData(shape, dtype, seed, comm_->rank());
      ASSERT_TRUE(comm_->AllReduce(mine.view(), ReduceOp::kSum).ok()) << Case(dtype, shape);
      std::vector<double> sum, abs_sum;
      SerialSum(shape, dtype, seed, n, &sum, &abs_sum);
      ExpectWithin(ToDoubles(mine.view()), sum, SumBound(dtype, sum, abs_sum, n),
                   "all-reduce sum " + Case(dtype, shape));
      ExpectIdenticalOnAllRanks(*comm_, mine.view(), "all-reduce sum " + Case(dtype, shape));
    }
  }
}

TEST_F(MpiTest, AllReduceMaxIsExact) {
  const int n = comm_->size();
  uint64_t seed = 200;
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : kShapes) {
      ++seed;
      Tensor mine = RankData(shape, dtype, seed, comm_->rank());
      ASSERT_TRUE(comm_->AllReduce(mine.view(), ReduceOp::kMax).ok()) << Case(dtype, shape);
      std::vector<double> expected(mine.numel(), -INFINITY);
      for (int r = 0; r < n; ++r) {
        const std::vector<double> x = ToDoubles(RankData(shape, dtype, seed, r).view());
        for (size_t i = 0; i < x.size(); ++i) expected[i] = std::max(expected[i], x[i]);
      }
      EXPECT_EQ(ToDoubles(mine.view()), expected) << "all-reduce max " << Case(dtype, shape);
    }
  }
}

TEST_F(MpiTest, AllGatherFirstDimConcatenatesInRankOrder) {
  const int n = comm_->size();
  const Shape shapes[] = {{1}, {3, 2}, {17, 5}, {129}, {2, 3, 4}, {40000}};
  uint64_t seed = 300;
  for (DType dtype :
       {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU16}) {
    for (const Shape& shape : shapes) {
      ++seed;
      Tensor mine = RankData(shape, dtype, seed, comm_->rank());
      Shape out_shape = shape;
      out_shape[0] *= n;
      Tensor out = Tensor::Host(out_shape, dtype);
      ASSERT_TRUE(comm_->AllGather(mine.view(), out.view()).ok()) << Case(dtype, shape);
      for (int r = 0; r < n; ++r) {
        Tensor expected = RankData(shape, dtype, seed, r);
        EXPECT_EQ(0, std::memcmp(static_cast<char*>(out.data()) + r * expected.nbytes(),
                                 expected.data(), expected.nbytes()))
            << "all-gather " << Case(dtype, shape) << ": block of rank " << r;
      }
    }
  }
}

TEST_F(MpiTest, AllGatherLastDimInterleavesColumns) {
  const int n = comm_->size();
  const Shape shapes[] = {{3}, {2, 5}, {3, 4, 7}, {1, 129}, {17, 1}, {300, 65}};
  uint64_t seed = 400;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
    for (const Shape& shape : shapes) {
      ++seed;
      Tensor mine = RankData(shape, dtype, seed, comm_->rank());
      Shape out_shape = shape;
      out_shape.back() *= n;
      Tensor out = Tensor::Host(out_shape, dtype);
      ASSERT_TRUE(comm_->AllGather(mine.view(), out.view(), GatherAxis::kLast).ok())
          << Case(dtype, shape);
      const int64_t c = shape.back();
      const int64_t rows = NumElements(shape) / c;
      std::vector<double> expected(out.numel());
      for (int r = 0; r < n; ++r) {
        const std::vector<double> x = ToDoubles(RankData(shape, dtype, seed, r).view());
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t j = 0; j < c; ++j) expected[i * n * c + r * c + j] = x[i * c + j];
        }
      }
      EXPECT_EQ(ToDoubles(out.view()), expected) << "last-dim all-gather " << Case(dtype, shape);
    }
  }
}

TEST_F(MpiTest, ReduceScatterMatchesSerialSum) {
  const int n = comm_->size();
  const int me = comm_->rank();
  const Shape out_shapes[] = {{1}, {3}, {17, 3}, {129}, {2, 3, 5}, {20000}};
  uint64_t seed = 500;
  for (DType dtype : kAllDTypes) {
    for (const Shape& out_shape : out_shapes) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        ++seed;
        Shape in_shape = out_shape;
        in_shape[0] *= n;
        Tensor in = RankData(in_shape, dtype, seed, me);
        Tensor out = Tensor::Host(out_shape, dtype);
        const std::string what =
            absl::StrCat("reduce-scatter ", ReduceOpName(op), " ", Case(dtype, out_shape));
        ASSERT_TRUE(comm_->ReduceScatter(in.view(), out.view(), op).ok()) << what;
        const int64_t m = out.numel();
        std::vector<double> exact(m, op == ReduceOp::kSum ? 0.0 : -INFINITY), abs_sum(m, 0.0);
        for (int r = 0; r < n; ++r) {
          const std::vector<double> x = ToDoubles(RankData(in_shape, dtype, seed, r).view());
          for (int64_t i = 0; i < m; ++i) {
            const double v = x[me * m + i];
            exact[i] = op == ReduceOp::kSum ? exact[i] + v : std::max(exact[i], v);
            abs_sum[i] += std::fabs(v);
          }
        }
        if (op == ReduceOp::kSum) {
          ExpectWithin(ToDoubles(out.view()), exact, SumBound(dtype, exact, abs_sum, n), what);
        } else {
          EXPECT_EQ(ToDoubles(out.view()), exact) << what;
        }
      }
    }
  }
}

TEST_F(MpiTest, BroadcastFromEveryRoot) {
  const int n = comm_->size();
  uint64_t seed = 600;
  for (DType dtype :
       {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU16}) {
    for (const Shape& shape : {Shape{1}, Shape{17, 3}, Shape{50000}}) {
      for (int root = 0; root < n; ++root) {
        ++seed;
        Tensor t = RankData(shape, dtype, seed, comm_->rank());
        ASSERT_TRUE(comm_->Broadcast(t.view(), root).ok());
        Tensor expected = RankData(shape, dtype, seed, root);
        EXPECT_EQ(0, std::memcmp(t.data(), expected.data(), t.nbytes()))
            << "broadcast " << Case(dtype, shape) << " from root " << root;
      }
    }
  }
}

TEST_F(MpiTest, SendRecvAroundTheRing) {
  const int n = comm_->size();
  if (n == 1) GTEST_SKIP() << "point-to-point needs two ranks";
  const int me = comm_->rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  uint64_t seed = 700;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
    for (const Shape& shape : {Shape{1}, Shape{3, 5}, Shape{100000}}) {
      ++seed;
      Tensor mine = RankData(shape, dtype, seed, me);
      Tensor got = Tensor::Zeros(shape, dtype);
      // Even ranks send first, odd ranks receive first: no cycle of blocked sends (n >= 2; with
      // an odd n the last rank and rank 0 are both even, which is still acyclic).
      if (me % 2 == 0) {
        ASSERT_TRUE(comm_->Send(mine.view(), next, /*tag=*/3).ok());
        ASSERT_TRUE(comm_->Recv(got.view(), prev, /*tag=*/3).ok());
      } else {
        ASSERT_TRUE(comm_->Recv(got.view(), prev, /*tag=*/3).ok());
        ASSERT_TRUE(comm_->Send(mine.view(), next, /*tag=*/3).ok());
      }
      Tensor expected = RankData(shape, dtype, seed, prev);
      EXPECT_EQ(0, std::memcmp(got.data(), expected.data(), got.nbytes()))
          << "message from rank " << prev << " " << Case(dtype, shape);
    }
  }
}

TEST_F(MpiTest, RecvWithWrongSizeIsAnError) {
  if (comm_->size() == 1) GTEST_SKIP() << "point-to-point needs two ranks";
  float data[5] = {1, 2, 3, 4, 5};
  if (comm_->rank() == 0) {
    ASSERT_TRUE(comm_->Send(TensorView(data, Shape{3}, DType::kF32), 1, /*tag=*/9).ok());
  } else if (comm_->rank() == 1) {
    absl::Status s = comm_->Recv(TensorView(data, Shape{5}, DType::kF32), 0, /*tag=*/9);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("received 3 elements"), std::string::npos) << s;
  }
}

TEST_F(MpiTest, SplitMakesEvenAndOddGroups) {
  const int me = comm_->rank(), n = comm_->size();
  // Reverse order inside each group: key = -rank.
  auto sub_or = comm_->Split(me % 2, -me, "parity");
  ASSERT_TRUE(sub_or.ok()) << sub_or.status();
  Communicator& sub = **sub_or;
  std::vector<int> members;
  for (int r = n - 1; r >= 0; --r) {
    if (r % 2 == me % 2) members.push_back(r);
  }
  EXPECT_EQ(sub.size(), static_cast<int>(members.size()));
  EXPECT_EQ(members[sub.rank()], me);
  EXPECT_EQ(sub.name(), "parity");
  EXPECT_EQ(sub.backend(), "mpi");
  int64_t value = me + 1;
  ASSERT_TRUE(sub.AllReduce(TensorView(&value, Shape{1}, DType::kI64), ReduceOp::kSum).ok());
  int64_t expected = 0;
  for (int r : members) expected += r + 1;
  EXPECT_EQ(value, expected);
  // Counters are per communicator.
  EXPECT_EQ(sub.counters().all_reduce, 1);
  EXPECT_EQ(comm_->counters().all_reduce, 0);
  absl::Status bad = comm_->Split(-1, 0, "bad").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
}

TEST_F(MpiTest, BarrierCompletes) {
  ASSERT_TRUE(comm_->Barrier().ok());
  ASSERT_TRUE(comm_->Barrier().ok());
  EXPECT_EQ(comm_->counters().barrier, 2);
}

TEST_F(MpiTest, CountersCountEachKind) {
  const int n = comm_->size();
  EXPECT_EQ(comm_->counters(), CommCounters());
  Tensor a = RankData({6}, DType::kF32, 1, comm_->rank());      // 24 bytes
  Tensor b = Tensor::Host({6 * n}, DType::kF32);                // 24 n bytes
  Tensor h = RankData({4, 2}, DType::kBF16, 2, comm_->rank());  // 16 bytes
  ASSERT_TRUE(comm_->AllReduce(a.view(), ReduceOp::kSum).ok());
  ASSERT_TRUE(comm_->AllReduce(h.view(), ReduceOp::kMax).ok());
  ASSERT_TRUE(comm_->AllGather(a.view(), b.view()).ok());
  ASSERT_TRUE(comm_->ReduceScatter(b.view(), a.view()).ok());
  ASSERT_TRUE(comm_->Broadcast(h.view(), 0).ok());
  ASSERT_TRUE(comm_->Barrier().ok());
  CommCounters expected;
  expected.all_reduce = 2;
  expected.all_gather = 1;
  expected.reduce_scatter = 1;
  expected.broadcast = 1;
  expected.barrier = 1;
  expected.bytes = 24 + 16 + 24 + 24 * n + 16;
  EXPECT_EQ(comm_->counters(), expected) << comm_->counters().DebugString();
  EXPECT_EQ(comm_->counters().calls(), 6);
  const CommCounters old = comm_->ResetCounters();
  EXPECT_EQ(old, expected);
  EXPECT_EQ(comm_->counters(), CommCounters());
  if (n > 1) {
    const int me = comm_->rank();
    if (me == 0) {
      ASSERT_TRUE(comm_->Send(a.view(), 1).ok());
    } else if (me == 1) {
      ASSERT_TRUE(comm_->Recv(a.view(), 0).ok());
    }
    EXPECT_EQ(comm_->counters().send, me == 0 ? 1 : 0);
    EXPECT_EQ(comm_->counters().recv, me == 1 ? 1 : 0);
  }
}

TEST_F(MpiTest, LocalErrorsAreStatusesAndNotCounted) {
  const int n = comm_->size();
  float data[64] = {};
  // A transposed [2, 3] view: not contiguous.
  TensorView strided(data, Shape{2, 3}, DType::kF32);
  strided.strides = {1, 2};
  absl::Status s = comm_->AllReduce(strided, ReduceOp::kSum);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("AllReduce"), std::string::npos) << s;
  EXPECT_NE(s.message().find("contiguous"), std::string::npos) << s;

  TensorView null_view(nullptr, Shape{4}, DType::kF32);
  EXPECT_EQ(comm_->AllReduce(null_view, ReduceOp::kSum).code(), absl::StatusCode::kInvalidArgument);

  uint16_t raw[4] = {};
  s = comm_->AllReduce(TensorView(raw, Shape{4}, DType::kU16), ReduceOp::kSum);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;

  TensorView in(data, Shape{2, 3}, DType::kF32);
  TensorView wrong_out(data + 16, Shape{2 * n + 1, 3}, DType::kF32);
  s = comm_->AllGather(in, wrong_out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("out"), std::string::npos) << s;
  // Last-dim gather wants [2, 3n], not [2n, 3] (unless n == 1).
  TensorView first_dim_out(data + 16, Shape{2 * n, 3}, DType::kF32);
  if (n > 1) {
    EXPECT_EQ(comm_->AllGather(in, first_dim_out, GatherAxis::kLast).code(),
              absl::StatusCode::kInvalidArgument);
  }
  TensorView bf_out(data + 16, Shape{2 * n, 3}, DType::kBF16);
  EXPECT_EQ(comm_->AllGather(in, bf_out).code(), absl::StatusCode::kInvalidArgument);
  TensorView overlapping(data + 2, Shape{2 * n, 3}, DType::kF32);
  s = comm_->AllGather(in, overlapping);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("overlap"), std::string::npos) << s;
  TensorView scalar(data, Shape{}, DType::kF32);
  EXPECT_EQ(comm_->AllGather(scalar, TensorView(data + 16, Shape{n}, DType::kF32)).code(),
            absl::StatusCode::kInvalidArgument);

  TensorView rs_out(data + 32, Shape{3}, DType::kF32);
  TensorView rs_in(data, Shape{3 * n + 1}, DType::kF32);
  EXPECT_EQ(comm_->ReduceScatter(rs_in, rs_out).code(), absl::StatusCode::kInvalidArgument);

  TensorView t(data, Shape{4}, DType::kF32);
  EXPECT_EQ(comm_->Broadcast(t, -1).code(), absl::StatusCode::kInvalidArgument);
  s = comm_->Broadcast(t, n);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("root"), std::string::npos) << s;

  s = comm_->Send(t, comm_->rank());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("peer"), std::string::npos) << s;
  EXPECT_EQ(comm_->Recv(t, n).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->Send(t, (comm_->rank() + 1) % n, /*tag=*/-1).code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(comm_->counters(), CommCounters()) << comm_->counters().DebugString();
}

TEST_F(MpiTest, EmptyTensorsAreNoOps) {
  Tensor e = Tensor::Host({0, 3}, DType::kF32);
  Tensor eo = Tensor::Host({0, 3}, DType::kF32);
  EXPECT_TRUE(comm_->AllReduce(e.view(), ReduceOp::kSum).ok());
  EXPECT_TRUE(comm_->AllGather(e.view(), eo.view()).ok());
  EXPECT_TRUE(comm_->Broadcast(e.view(), 0).ok());
  EXPECT_EQ(comm_->counters().all_reduce, 1);
  EXPECT_EQ(comm_->counters().bytes, 0);
}

// ---- Non-blocking all-reduce ----

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

// A trainer's pattern: one f32 gradient buffer all-reduced in buckets of odd sizes, each started
// as soon as it is ready and polled now and then, with blocking all-reduces on the same
// communicator and on a sub-communicator issued in between, and the waits at the end.
TEST_F(MpiTest, AsyncBucketsInterleavedWithBlockingCalls) {
  const int n = comm_->size(), me = comm_->rank();
  auto sub_or = comm_->Split(me % 2, me, "parity");
  ASSERT_TRUE(sub_or.ok()) << sub_or.status();
  Communicator& sub = **sub_or;
  const int64_t total = 70001;
  const uint64_t seed = 1000;
  Tensor grads = RankData({total}, DType::kF32, seed, me);
  const int64_t sizes[] = {1, 3, 17, 129, 4096, 30000};  // The last bucket takes the rest.
  const int buckets = 7;
  // sub: a max (idempotent, so repeating it keeps the reference simple) of data that differs
  // between the two parity groups, and an async sum started on it while comm_'s are pending.
  const uint64_t sub_seed = seed + 1 + me % 2;
  Tensor sub_max = RankData({17, 3}, DType::kF32, sub_seed, sub.rank());
  Tensor sub_sum = RankData({129}, DType::kF32, sub_seed + 10, sub.rank());
  std::vector<std::unique_ptr<CommRequest>> requests;
  std::unique_ptr<CommRequest> sub_request;
  std::vector<Tensor> side;  // Blocking all-reduces on comm_ between buckets.
  int64_t begin = 0;
  for (int b = 0; b < buckets; ++b) {
    const int64_t end = b + 1 == buckets ? total : begin + sizes[b];
    auto r = comm_->AllReduceAsync(grads.view().Slice(begin, end), ReduceOp::kSum);
    ASSERT_TRUE(r.ok()) << "bucket " << b << ": " << r.status();
    requests.push_back(std::move(r).value());
    begin = end;
    ASSERT_TRUE(sub.AllReduce(sub_max.view(), ReduceOp::kMax).ok());
    if (b == 2) {
      auto sr = sub.AllReduceAsync(sub_sum.view(), ReduceOp::kSum);
      ASSERT_TRUE(sr.ok()) << sr.status();
      sub_request = std::move(sr).value();
    }
    if (b % 2 == 1) {
      side.push_back(RankData({5, 7}, DType::kF32, seed + 20 + b, me));
      ASSERT_TRUE(comm_->AllReduce(side.back().view(), ReduceOp::kSum).ok());
    }
    // Poll the earlier requests, as the trainer does after each layer's backward.
    for (auto& req : requests) ASSERT_TRUE(req->Test().ok());
    EXPECT_EQ(comm_->pending_requests(), NotDone(requests));
  }
  ASSERT_TRUE(sub_request->Wait().ok());
  WaitAll(&requests, "buckets");
  EXPECT_EQ(comm_->pending_requests(), 0);
  EXPECT_EQ(sub.pending_requests(), 0);

  // The same data through the blocking call.
  Tensor blocking = RankData({total}, DType::kF32, seed, me);
  ASSERT_TRUE(comm_->AllReduce(blocking.view(), ReduceOp::kSum).ok());
  CommCounters expected;
  expected.all_reduce = buckets + static_cast<int64_t>(side.size()) + 1;
  expected.bytes = 2 * total * 4 + static_cast<int64_t>(side.size()) * 35 * 4;
  EXPECT_EQ(comm_->counters(), expected) << comm_->counters().DebugString();
  EXPECT_EQ(sub.counters().all_reduce, buckets + 1);

  std::vector<double> sum, abs_sum;
  SerialSum({total}, DType::kF32, seed, n, &sum, &abs_sum);
  ExpectWithin(ToDoubles(grads.view()), sum, SumBound(DType::kF32, sum, abs_sum, n),
               "async buckets");
  if (n <= 2) {
    // One addition per element (a + b == b + a): any algorithm gives the blocking call's bits.
    EXPECT_EQ(0, std::memcmp(grads.data(), blocking.data(), grads.nbytes()))
        << "async buckets differ from the blocking all-reduce";
  }
  ExpectIdenticalOnAllRanks(*comm_, grads.view(), "async buckets");
  for (size_t i = 0; i < side.size(); ++i) {
    const int b = 2 * static_cast<int>(i) + 1;
    SerialSum({5, 7}, DType::kF32, seed + 20 + b, n, &sum, &abs_sum);
    ExpectWithin(ToDoubles(side[i].view()), sum, SumBound(DType::kF32, sum, abs_sum, n),
                 absl::StrCat("blocking all-reduce between buckets ", b, " and ", b + 1));
  }
  // sub: ranks of my parity, in rank order (key = me).
  std::vector<double> want_max(51, -INFINITY), sub_exact(129, 0.0), sub_abs(129, 0.0);
  for (int r = 0; r < sub.size(); ++r) {
    const std::vector<double> x = ToDoubles(RankData({17, 3}, DType::kF32, sub_seed, r).view());
    for (int i = 0; i < 51; ++i) want_max[i] = std::max(want_max[i], x[i]);
    const std::vector<double> y = ToDoubles(RankData({129}, DType::kF32, sub_seed + 10, r).view());
    for (int i = 0; i < 129; ++i) {
      sub_exact[i] += y[i];
      sub_abs[i] += std::fabs(y[i]);
    }
  }
  EXPECT_EQ(ToDoubles(sub_max.view()), want_max) << "blocking max on the sub-communicator";
  ExpectWithin(ToDoubles(sub_sum.view()), sub_exact,
               SumBound(DType::kF32, sub_exact, sub_abs, sub.size()),
               "async sum on the sub-communicator");
}

// Every dtype (16-bit floats through the staged f32 path), sums and maxima, several requests
// outstanding at once, against float64.
TEST_F(MpiTest, AsyncAllReduceMatchesSerialForEveryDtype) {
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
        ASSERT_TRUE(r.ok()) << Case(dtype, shape) << ": " << r.status();
        requests.push_back(std::move(r).value());
      }
      WaitAll(&requests, std::string(DTypeName(dtype)));
      for (size_t k = 0; k < data.size(); ++k) {
        const Shape& shape = kShapes[k];
        const std::string what =
            absl::StrCat("async all-reduce ", ReduceOpName(op), " ", Case(dtype, shape));
        if (op == ReduceOp::kSum) {
          std::vector<double> sum, abs_sum;
          SerialSum(shape, dtype, seeds[k], n, &sum, &abs_sum);
          ExpectWithin(ToDoubles(data[k].view()), sum, SumBound(dtype, sum, abs_sum, n), what);
        } else {
          std::vector<double> expected(NumElements(shape), -INFINITY);
          for (int r = 0; r < n; ++r) {
            const std::vector<double> x = ToDoubles(RankData(shape, dtype, seeds[k], r).view());
            for (size_t i = 0; i < x.size(); ++i) expected[i] = std::max(expected[i], x[i]);
          }
          EXPECT_EQ(ToDoubles(data[k].view()), expected) << what;
        }
      }
    }
  }
  EXPECT_EQ(comm_->pending_requests(), 0);
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
    std::vector<double> sum, abs_sum;
    SerialSum(shape, dtype, seed, n, &sum, &abs_sum);
    const std::vector<double> first = ToDoubles(t.view());
    ExpectWithin(first, sum, SumBound(dtype, sum, abs_sum, n), "polled " + Case(dtype, shape));
    // Already complete: no second conversion or copy back.
    absl::StatusOr<bool> again = request.Test();
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(*again);
    EXPECT_TRUE(request.Wait().ok());
    EXPECT_TRUE(request.Wait().ok());
    EXPECT_EQ(ToDoubles(t.view()), first) << Case(dtype, shape);
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
    std::vector<double> sum, abs_sum;
    SerialSum(shape, dtype, seed, n, &sum, &abs_sum);
    ExpectWithin(ToDoubles(t.view()), sum, SumBound(dtype, sum, abs_sum, n),
                 "destroyed unwaited " + Case(dtype, shape));
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
  const int devices = cuda::DeviceCount();
  if (devices == 0) GTEST_SKIP() << cuda::Describe();
  const int n = comm_->size(), me = comm_->rank();
  const Device dev = Device::Cuda(testing::Runtime().local_rank() % devices);
  auto to_device = [&](const Tensor& host) {
    auto d = Tensor::Empty(host.shape(), host.dtype(), dev);
    CHECK(d.ok()) << d.status();
    CHECK(cuda::Memcpy(d->data(), host.data(), host.nbytes(), cuda::CopyKind::kHostToDevice).ok());
    return std::move(d).value();
  };
  auto to_host = [&](const Tensor& d) {
    Tensor h = Tensor::Host(d.shape(), d.dtype());
    CHECK(cuda::Memcpy(h.data(), d.data(), d.nbytes(), cuda::CopyKind::kDeviceToHost).ok());
    return h;
  };
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
    const Shape shape = {7, 9};
    const uint64_t seed = 900 + static_cast<int>(dtype);
    // All-reduce.
    Tensor d = to_device(RankData(shape, dtype, seed, me));
    ASSERT_TRUE(comm_->AllReduce(d.view(), ReduceOp::kSum).ok());
    std::vector<double> sum, abs_sum;
    SerialSum(shape, dtype, seed, n, &sum, &abs_sum);
    ExpectWithin(ToDoubles(to_host(d).view()), sum, SumBound(dtype, sum, abs_sum, n),
                 "cuda all-reduce " + Case(dtype, shape));
    // Last-dim all-gather.
    Tensor x = to_device(RankData(shape, dtype, seed + 1, me));
    auto y = Tensor::Empty({7, 9 * n}, dtype, dev);
    ASSERT_TRUE(y.ok());
    ASSERT_TRUE(comm_->AllGather(x.view(), y->view(), GatherAxis::kLast).ok());
    const std::vector<double> got = ToDoubles(to_host(*y).view());
    for (int r = 0; r < n; ++r) {
      const std::vector<double> xr = ToDoubles(RankData(shape, dtype, seed + 1, r).view());
      for (int i = 0; i < 7; ++i) {
        for (int j = 0; j < 9; ++j) {
          EXPECT_EQ(got[i * 9 * n + r * 9 + j], xr[i * 9 + j]) << Case(dtype, shape);
        }
      }
    }
    // Broadcast from the last rank.
    Tensor b = to_device(RankData(shape, dtype, seed + 2, me));
    ASSERT_TRUE(comm_->Broadcast(b.view(), n - 1).ok());
    EXPECT_EQ(ToDoubles(to_host(b).view()),
              ToDoubles(RankData(shape, dtype, seed + 2, n - 1).view()));
    // Non-blocking all-reduce: staged through the request's own host buffer, two outstanding.
    Tensor a1 = to_device(RankData(shape, dtype, seed + 3, me));
    Tensor a2 = to_device(RankData(shape, dtype, seed + 4, me));
    auto r1 = comm_->AllReduceAsync(a1.view(), ReduceOp::kSum);
    auto r2 = comm_->AllReduceAsync(a2.view(), ReduceOp::kSum);
    ASSERT_TRUE(r1.ok() && r2.ok());
    ASSERT_TRUE((*r2)->Wait().ok());
    ASSERT_TRUE((*r1)->Wait().ok());
    for (const auto& [tensor, s] : {std::pair<const Tensor*, uint64_t>{&a1, seed + 3},
                                    std::pair<const Tensor*, uint64_t>{&a2, seed + 4}}) {
      SerialSum(shape, dtype, s, n, &sum, &abs_sum);
      ExpectWithin(ToDoubles(to_host(*tensor).view()), sum, SumBound(dtype, sum, abs_sum, n),
                   "cuda async all-reduce " + Case(dtype, shape));
    }
  }
}

}  // namespace
}  // namespace comm
}  // namespace mt
