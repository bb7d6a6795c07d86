#include "comm/mpi_testutil.h"

#include <cstdio>

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
    ADD_FAILURE() << "NewWorld: creating a communicator over every rank failed: "
                  << world.status();
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
