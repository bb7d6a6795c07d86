#include "comm/mpi_testutil.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "core/ops/testutil.h"
#include "glog/logging.h"

namespace mt {
namespace comm {
namespace testing {

namespace {
MpiRuntime* g_runtime = nullptr;  // Owned by main(); test-binary state, not library state.

// On ranks other than 0, print only failures (prefixed with the rank) instead of the full log.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
};
}  // namespace

MpiRuntime& Runtime() {
  CHECK(g_runtime != nullptr) << "link :mpi_testutil and let its main() run the tests";
  return *g_runtime;
}

std::unique_ptr<Communicator> NewWorld() {
  absl::StatusOr<std::unique_ptr<Communicator>> world = Runtime().World();
  if (!world.ok()) {
    // A collective failed: the other ranks cannot go on without this one, so the job ends (as
    // MpiRuntime::Abort documents) once the failure is on record.
    ADD_FAILURE() << "NewWorld: creating a communicator over every rank failed: " << world.status();
    MpiRuntime::Abort(world.status());
  }
  return std::move(world).value();
}

void MpiTest::SetUp() { comm_ = NewWorld(); }

void MpiTest::TearDown() {
  // Agree on failure: a test that failed on any rank fails on all of them.
  auto other = NewWorld();
  int64_t failed = HasFailure() ? 1 : 0;
  TensorView flag(&failed, Shape{1}, DType::kI64);
  absl::Status s = other->AllReduce(flag, ReduceOp::kMax);
  if (!s.ok()) MpiRuntime::Abort(s);
  if (failed && !HasFailure()) {
    ADD_FAILURE() << "failed on another rank (see the [rank N] lines in the log)";
  }
}

Tensor RankData(const Shape& shape, DType dtype, uint64_t seed, int r) {
  const uint64_t s = seed * 1000003u + static_cast<uint64_t>(r) * 7919u + 17u;
  switch (dtype) {
    case DType::kI32:
      return mt::testing::RandomInts(shape, dtype, s, -(1 << 20), 1 << 20);
    case DType::kI64:
      return mt::testing::RandomInts(shape, dtype, s, -(int64_t{1} << 40), int64_t{1} << 40);
    case DType::kU16: {
      Tensor v = mt::testing::RandomInts(shape, DType::kI32, s, 0, 65535);
      Tensor t = Tensor::Host(shape, DType::kU16);
      for (int64_t i = 0; i < t.numel(); ++i) {
        t.data_as<uint16_t>()[i] = static_cast<uint16_t>(v.data_as<int32_t>()[i]);
      }
      return t;
    }
    default:
      return mt::testing::RandomTensor(shape, dtype, s);
  }
}

void ExpectWithin(const std::vector<double>& actual, const std::vector<double>& expected,
                  const std::vector<double>& bound, const std::string& what) {
  EXPECT_TRUE(mt::testing::WithinBounds(actual, expected, bound)) << what;
}

std::string CaseName(DType dtype, const Shape& shape) {
  return absl::StrCat(DTypeName(dtype), ShapeToString(shape));
}

SerialReduction SerialReduce(const Shape& shape, DType dtype, uint64_t seed, int n, ReduceOp op,
                             int64_t begin, int64_t count) {
  if (count < 0) count = NumElements(shape) - begin;
  SerialReduction out;
  out.exact.assign(count, op == ReduceOp::kSum ? 0.0 : -INFINITY);
  out.abs_sum.assign(count, 0.0);
  for (int r = 0; r < n; ++r) {
    const std::vector<double> x = mt::testing::ToDoubles(RankData(shape, dtype, seed, r).view());
    for (int64_t i = 0; i < count; ++i) {
      const double v = x[begin + i];
      out.exact[i] = op == ReduceOp::kSum ? out.exact[i] + v : std::max(out.exact[i], v);
      out.abs_sum[i] += std::fabs(v);
    }
  }
  return out;
}

std::vector<double> MpiSumBound(DType dtype, const SerialReduction& want, int n) {
  std::vector<double> bound(want.exact.size(), 0.0);
  if (!IsFloating(dtype)) return bound;
  const double u32 = mt::testing::UnitRoundoff(DType::kF32);
  const double ud = dtype == DType::kF32 ? 0.0 : mt::testing::UnitRoundoff(dtype);
  for (size_t i = 0; i < bound.size(); ++i) {
    bound[i] =
        ud * std::fabs(want.exact[i]) + (1 + ud) * (n - 1) * u32 * want.abs_sum[i] * (1 + 2 * u32);
  }
  return bound;
}

void ExpectMpiSum(const TensorView& got, const Shape& shape, DType dtype, uint64_t seed, int n,
                  const std::string& what) {
  const SerialReduction want = SerialReduce(shape, dtype, seed, n, ReduceOp::kSum);
  ExpectWithin(mt::testing::ToDoubles(got), want.exact, MpiSumBound(dtype, want, n), what);
}

void ExpectIdenticalOnAllRanks(Communicator& comm, const TensorView& t, const std::string& what) {
  Tensor gathered = Tensor::Host({comm.size() * t.numel()}, t.dtype);
  const TensorView flat(t.data, Shape{t.numel()}, t.dtype);
  const absl::Status s = comm.AllGather(flat, gathered.view());
  if (!s.ok()) {
    ADD_FAILURE() << what << ": gathering every rank's copy failed: " << s;
    return;
  }
  for (int r = 0; r < comm.size(); ++r) {
    EXPECT_EQ(0,
              std::memcmp(static_cast<char*>(gathered.data()) + r * t.nbytes(), t.data, t.nbytes()))
        << what << ": rank " << r << " holds a different result";
  }
}

std::vector<double> GatheredLastDim(const Shape& shape, DType dtype, uint64_t seed, int n) {
  const int64_t c = shape.back();
  const int64_t rows = NumElements(shape) / c;
  std::vector<double> out(rows * n * c);
  for (int r = 0; r < n; ++r) {
    const std::vector<double> x = mt::testing::ToDoubles(RankData(shape, dtype, seed, r).view());
    for (int64_t i = 0; i < rows; ++i) {
      std::copy(x.begin() + i * c, x.begin() + (i + 1) * c, out.begin() + (i * n + r) * c);
    }
  }
  return out;
}

namespace {

// Whether the f32 host tensors all have x's shape; a test failure naming `what` otherwise.
bool SameF32Shape(const char* what, const Tensor& x, std::initializer_list<const Tensor*> others) {
  bool ok = x.dtype() == DType::kF32;
  for (const Tensor* t : others) ok = ok && t->dtype() == DType::kF32 && t->shape() == x.shape();
  if (!ok) ADD_FAILURE() << what << ": the operands must be f32 tensors of one shape";
  return ok;
}

}  // namespace

Tensor ScaledTanh(const Tensor& a, const Tensor& x) {
  Tensor z = Tensor::Host(x.shape(), DType::kF32);
  if (!SameF32Shape("ScaledTanh", x, {&a})) return z;
  for (int64_t i = 0; i < z.numel(); ++i) {
    z.data_as<float>()[i] = a.data_as<float>()[i] * std::tanh(x.data_as<float>()[i]);
  }
  return z;
}

Tensor ScaledTanhBackward(const Tensor& a, const Tensor& x, const Tensor& dz) {
  Tensor dx = Tensor::Host(x.shape(), DType::kF32);
  if (!SameF32Shape("ScaledTanhBackward", x, {&a, &dz})) return dx;
  for (int64_t i = 0; i < dx.numel(); ++i) {
    const float t = std::tanh(x.data_as<float>()[i]);
    dx.data_as<float>()[i] = a.data_as<float>()[i] * (1 - t * t) * dz.data_as<float>()[i];
  }
  return dx;
}

}  // namespace testing
}  // namespace comm
}  // namespace mt

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto runtime = mt::comm::MpiRuntime::Init(&argc, &argv);
  if (!runtime.ok()) mt::comm::MpiRuntime::Abort(runtime.status());
  mt::comm::testing::g_runtime = runtime->get();
  const int rank = (*runtime)->world_rank();
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new mt::comm::testing::FailurePrinter(rank));
  }
  const int result = RUN_ALL_TESTS();
  mt::comm::testing::g_runtime = nullptr;
  runtime->reset();  // MPI_Finalize.
  return result;
}
