// Test support for multi-process tests: a gtest main() that owns the MpiRuntime, fresh
// communicators per test, failure agreement across ranks, and per-rank random data. testonly.
//
// A test binary that links :mpi_testutil runs its tests on every rank (launch it with
// comm/mpi_test.sh, which wraps mpirun). Ranks must execute the same collectives in the same order:
// use EXPECT_* around data checks and ASSERT_* only for conditions that hold on every rank alike
// (e.g. the status of a collective). MpiTest::TearDown makes a failure on any rank fail the test on
// every rank, so rank 0's log shows it.
#ifndef MT_COMM_MPI_TESTUTIL_H_
#define MT_COMM_MPI_TESTUTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace mt {
namespace comm {
namespace testing {

// The runtime created by this binary's main().
MpiRuntime& Runtime();
// A new communicator over every rank (counters at zero); never null. If MPI fails to make one,
// the failure is recorded and the job ends (MpiRuntime::Abort): the other ranks could not go on.
std::unique_ptr<Communicator> NewWorld();

// Fixture: comm_ is a fresh world communicator; TearDown agrees on failure across ranks.
class MpiTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  std::unique_ptr<Communicator> comm_;
};

// Rank r's data for a test: a host tensor of `shape`/`dtype` from a seed derived from (seed, r),
// so every rank can regenerate every other rank's data. Floats uniform in [-1, 1); i32 in
// [-2^20, 2^20); i64 in [-2^40, 2^40) (sums of a few stay exact in double); u16 in [0, 65535).
Tensor RankData(const Shape& shape, DType dtype, uint64_t seed, int r);

// EXPECTs |actual[i] - expected[i]| <= bound[i] for all i (core/ops/testutil.h WithinBounds);
// names the worst element and `what`.
void ExpectWithin(const std::vector<double>& actual, const std::vector<double>& expected,
                  const std::vector<double>& bound, const std::string& what);

// ---- Serial answers: every rank computes them from every rank's RankData, in float64.

// "f32[3, 4]": a dtype and shape, for failure messages.
std::string CaseName(DType dtype, const Shape& shape);

// The element-wise reduction by `op` over ranks 0..n-1 of RankData(shape, dtype, seed, r),
// restricted to the flat elements [begin, begin + count) (count < 0: to the end), with the sum of
// the magnitudes (for error bounds).
struct SerialReduction {
  std::vector<double> exact;
  std::vector<double> abs_sum;
};
SerialReduction SerialReduce(const Shape& shape, DType dtype, uint64_t seed, int n, ReduceOp op,
                             int64_t begin = 0, int64_t count = -1);

// Bound on |computed - exact| for the MPI backend's sums over n ranks (per element): the result is
// rounded once to the dtype (u_dtype |exact|) after a sum of n terms in f32 ((n-1) u_f32 sum|x_r|,
// since 16-bit floats are reduced in f32); integer sums are exact.
std::vector<double> MpiSumBound(DType dtype, const SerialReduction& want, int n);

// EXPECTs that `got` (a host view) holds the sum over ranks 0..n-1 of RankData(shape, dtype, seed,
// r) within MpiSumBound; names `what`.
void ExpectMpiSum(const TensorView& got, const Shape& shape, DType dtype, uint64_t seed, int n,
                  const std::string& what);

// EXPECTs that every rank's copy of the host view t is bit-identical (replicas must not drift
// apart). A collective: call it on every rank of comm.
void ExpectIdenticalOnAllRanks(Communicator& comm, const TensorView& t, const std::string& what);

// What an all-gather along the last dimension of every rank's RankData(shape, dtype, seed, r)
// holds: [..., n * shape.back()], rank r's columns at [r c, (r + 1) c) of each row.
std::vector<double> GatheredLastDim(const Shape& shape, DType dtype, uint64_t seed, int n);

// The element-wise layer the mapping tests put between two mappings, on f32 host tensors of one
// shape: z = a tanh(x), and its backward dx = a (1 - tanh(x)^2) dz (in f32, as the ranks compute).
// Operands of other dtypes or shapes are a test failure (the result is then unspecified).
Tensor ScaledTanh(const Tensor& a, const Tensor& x);
Tensor ScaledTanhBackward(const Tensor& a, const Tensor& x, const Tensor& dz);

}  // namespace testing
}  // namespace comm
}  // namespace mt

#endif  // MT_COMM_MPI_TESTUTIL_H_
