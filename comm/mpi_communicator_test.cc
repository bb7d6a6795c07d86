// Multi-process test of the MPI communicator: run under mpirun (comm/mpi_test.sh) with 1-4 ranks.
// Every rank regenerates every rank's random data from a seed, computes the serial answer in
// float64, and checks its own result against it.
#include "comm/mpi_communicator.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "comm/mpi_testutil.h"
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

const DType kAllDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64};
const Shape kShapes[] = {{1}, {3}, {17}, {129}, {5, 7}, {3, 4, 5}, {70001}};

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
      ASSERT_TRUE(comm_->AllReduce(mine.view(), ReduceOp::kSum).ok()) << CaseName(dtype, shape);
      ExpectMpiSum(mine.view(), shape, dtype, seed, n, "all-reduce sum " + CaseName(dtype, shape));
      ExpectIdenticalOnAllRanks(*comm_, mine.view(), "all-reduce sum " + CaseName(dtype, shape));
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
      ASSERT_TRUE(comm_->AllReduce(mine.view(), ReduceOp::kMax).ok()) << CaseName(dtype, shape);
      EXPECT_EQ(ToDoubles(mine.view()), SerialReduce(shape, dtype, seed, n, ReduceOp::kMax).exact)
          << "all-reduce max " << CaseName(dtype, shape);
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
      ASSERT_TRUE(comm_->AllGather(mine.view(), out.view()).ok()) << CaseName(dtype, shape);
      for (int r = 0; r < n; ++r) {
        Tensor expected = RankData(shape, dtype, seed, r);
        EXPECT_EQ(0, std::memcmp(static_cast<char*>(out.data()) + r * expected.nbytes(),
                                 expected.data(), expected.nbytes()))
            << "all-gather " << CaseName(dtype, shape) << ": block of rank " << r;
      }
    }
  }
}

// Rank s sends (s + 2 d + k) % 3 rows to rank d (zero-row blocks included), each value a small
// integer exact in every dtype that names its sender, receiver, row and column.
TEST_F(MpiTest, AllToAllVDeliversEachBlockInRankOrder) {
  const int n = comm_->size(), me = comm_->rank();
  auto rows = [](int s, int d, int k) -> int64_t { return (s + 2 * d + k) % 3; };
  auto value = [](int s, int d, int64_t i, int64_t c) {
    return static_cast<double>((s * 7 + d * 3 + i * 5 + c) % 61);
  };
  for (DType dtype :
       {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU16}) {
    for (int k = 0; k < 3; ++k) {
      for (int64_t cols : {1, 3}) {
        std::vector<int64_t> send(n), recv(n);
        std::vector<double> in_values, want;
        for (int d = 0; d < n; ++d) {
          send[d] = rows(me, d, k);
          for (int64_t i = 0; i < send[d]; ++i) {
            for (int64_t c = 0; c < cols; ++c) in_values.push_back(value(me, d, i, c));
          }
        }
        for (int s = 0; s < n; ++s) {
          recv[s] = rows(s, me, k);
          for (int64_t i = 0; i < recv[s]; ++i) {
            for (int64_t c = 0; c < cols; ++c) want.push_back(value(s, me, i, c));
          }
        }
        const int64_t in_rows = static_cast<int64_t>(in_values.size()) / cols;
        const int64_t out_rows = static_cast<int64_t>(want.size()) / cols;
        const Tensor in = ::mt::testing::FromDoubles({in_rows, cols}, dtype, in_values);
        const Tensor out = ::mt::testing::FromDoubles({out_rows, cols}, dtype,
                                                      std::vector<double>(want.size(), 60.0));
        const std::string name = absl::StrCat(DTypeName(dtype), " k=", k, " cols=", cols);
        ASSERT_TRUE(comm_->AllToAllV(in.view(), send, out.view(), recv).ok()) << name;
        EXPECT_EQ(ToDoubles(out.view()), want) << name;
      }
    }
  }
}

TEST_F(MpiTest, AllToAllVRefusesCountsThatDoNotFit) {
  const int n = comm_->size();
  const Tensor in = Tensor::Zeros({4, 2}, DType::kF32);
  const Tensor out = Tensor::Zeros({4, 2}, DType::kF32);
  std::vector<int64_t> counts(n, 0);
  counts[0] = 3;  // Sums to 3, not 4.
  const CommCounters before = comm_->counters();
  const absl::Status s = comm_->AllToAllV(in.view(), counts, out.view(), counts);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("send_rows"), std::string::npos) << s;
  const std::vector<int64_t> short_counts(n + 1, 0);
  EXPECT_EQ(comm_->AllToAllV(in.view(), short_counts, out.view(), short_counts).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->counters(), before);
  // Every rank sends everything to rank 0: then only rank 0 receives.
  std::vector<int64_t> send(n, 0), recv(n, 0);
  send[0] = 4;
  if (comm_->rank() == 0) recv.assign(n, 4);
  const Tensor got = Tensor::Zeros({comm_->rank() == 0 ? 4 * n : 0, 2}, DType::kF32);
  ASSERT_TRUE(comm_->AllToAllV(in.view(), send, got.view(), recv).ok());
  EXPECT_EQ(comm_->counters().all_to_all, before.all_to_all + 1);
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
          << CaseName(dtype, shape);
      EXPECT_EQ(ToDoubles(out.view()), GatheredLastDim(shape, dtype, seed, n))
          << "last-dim all-gather " << CaseName(dtype, shape);
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
            absl::StrCat("reduce-scatter ", ReduceOpName(op), " ", CaseName(dtype, out_shape));
        ASSERT_TRUE(comm_->ReduceScatter(in.view(), out.view(), op).ok()) << what;
        const int64_t m = out.numel();
        const SerialReduction want = SerialReduce(in_shape, dtype, seed, n, op, me * m, m);
        if (op == ReduceOp::kSum) {
          ExpectWithin(ToDoubles(out.view()), want.exact, MpiSumBound(dtype, want, n), what);
        } else {
          EXPECT_EQ(ToDoubles(out.view()), want.exact) << what;
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
            << "broadcast " << CaseName(dtype, shape) << " from root " << root;
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
          << "message from rank " << prev << " " << CaseName(dtype, shape);
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

}  // namespace
}  // namespace comm
}  // namespace mt
