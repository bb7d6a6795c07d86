// Multi-process test of ShareIdFromRankZero (NCCL's bootstrap exchange): every rank ends with the
// bytes rank 0 made, for the sizes an id takes (NCCL's 128, odd, one, none), rank 0's failure
// reaches every rank as an error instead of a wait, and only rank 0 makes an id. Run under mpirun
// (comm/mpi_test.sh) with 1-4 ranks; tools/cluster's multi-node test runs it across two nodes.
#include "comm/bootstrap_id.h"

#include <unistd.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "comm/mpi_testutil.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace mt {
namespace comm {
namespace {

using testing::MpiTest;

// Bytes no other rank can predict: from rank 0's process id and the time.
absl::Status MakeUnpredictable(absl::Span<uint8_t> id) {
  uint64_t x = static_cast<uint64_t>(getpid()) * 0x9E3779B97F4A7C15ull ^
               static_cast<uint64_t>(time(nullptr));
  for (uint8_t& b : id) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x >> 24);
  }
  return absl::OkStatus();
}

class BootstrapIdTest : public MpiTest {};

TEST_F(BootstrapIdTest, EveryRankGetsRankZerosBytes) {
  for (size_t size : {128, 7, 1, 0}) {
    std::vector<uint8_t> id(size, 0);
    int made = 0;
    ASSERT_TRUE(ShareIdFromRankZero(
                    *comm_, absl::MakeSpan(id),
                    [&made](absl::Span<uint8_t> bytes) {
                      ++made;
                      return MakeUnpredictable(bytes);
                    },
                    "test")
                    .ok());
    EXPECT_EQ(made, comm_->rank() == 0 ? 1 : 0) << "size " << size;
    // Every rank's copy, gathered (as 16-bit words, padded) and compared with rank 0's.
    std::vector<uint16_t> mine((size + 1) / 2 + 1, 0);
    mine.back() = static_cast<uint16_t>(size);
    for (size_t i = 0; i < size; ++i) mine[i / 2] |= static_cast<uint16_t>(id[i]) << (8 * (i % 2));
    const int64_t n = static_cast<int64_t>(mine.size());
    std::vector<uint16_t> all(n * comm_->size());
    ASSERT_TRUE(comm_
                    ->AllGather(TensorView(mine.data(), Shape{n}, DType::kU16),
                                TensorView(all.data(), Shape{n * comm_->size()}, DType::kU16))
                    .ok());
    for (int r = 1; r < comm_->size(); ++r) {
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(all[r * n + i], all[i]) << "rank " << r << " word " << i << ", size " << size;
      }
    }
    if (size >= 7) {  // Not the zeros every rank started from.
      int nonzero = 0;
      for (uint8_t b : id) nonzero += b != 0;
      EXPECT_GT(nonzero, 0);
    }
  }
}

TEST_F(BootstrapIdTest, RankZerosFailureReachesEveryRank) {
  std::vector<uint8_t> id(128, 0);
  const absl::Status s = ShareIdFromRankZero(
      *comm_, absl::MakeSpan(id),
      [](absl::Span<uint8_t>) { return absl::UnavailableError("no interface to listen on"); },
      "the group");
  if (comm_->rank() == 0) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  } else {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("the group: rank 0 could not create"), absl::string_view::npos) << s;
  }
  // The communicator still works afterwards (no message left in flight).
  float one = 1;
  ASSERT_TRUE(comm_->AllReduce(TensorView(&one, Shape{1}, DType::kF32), ReduceOp::kSum).ok());
  EXPECT_EQ(one, static_cast<float>(comm_->size()));
}

}  // namespace
}  // namespace comm
}  // namespace mt
