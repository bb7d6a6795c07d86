#include "core/cpu_affinity.h"

#include <sched.h>

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace {

TEST(CpuAffinityTest, SpareCpusAreTheAllowedOnesTrainingLeaves) {
  const std::vector<int> allowed = {0, 1, 2, 3};
  EXPECT_EQ(SpareCpus(allowed, 1), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(SpareCpus(allowed, 3), (std::vector<int>{3}));
  EXPECT_TRUE(SpareCpus(allowed, 4).empty());  // Every CPU trains: the writer is not pinned.
  EXPECT_TRUE(SpareCpus(allowed, 6).empty());
  EXPECT_TRUE(SpareCpus({}, 1).empty());
  EXPECT_EQ(SpareCpus({2, 5, 7}, 1), (std::vector<int>{5, 7}));  // A mask with holes (taskset).
}

TEST(CpuAffinityTest, Describe) {
  EXPECT_EQ(DescribeCpus({}), "none");
  EXPECT_EQ(DescribeCpus({1}), "1");
  EXPECT_EQ(DescribeCpus({0, 1, 2, 3}), "0-3");
  EXPECT_EQ(DescribeCpus({0, 2, 5, 6, 7, 9}), "0,2,5-7,9");
}

TEST(CpuAffinityTest, PinnedThreadAndTheThreadsItStartsRunOnTheSet) {
  const std::vector<int> allowed = CurrentThreadCpus();
  ASSERT_FALSE(allowed.empty());
  const std::vector<int> want = {allowed.back()};
  std::vector<int> pinned, child, seen_on;
  std::thread t([&] {
    ASSERT_TRUE(PinCurrentThread(want).ok());
    pinned = CurrentThreadCpus();
    std::thread grandchild([&] {
      child = CurrentThreadCpus();
      seen_on.push_back(sched_getcpu());
    });
    grandchild.join();
  });
  t.join();
  EXPECT_EQ(pinned, want);
  EXPECT_EQ(child, want);  // Inherited: the writer's hashing and I/O threads follow it.
  EXPECT_EQ(seen_on, want);
  EXPECT_EQ(CurrentThreadCpus(), allowed);  // Only that thread was pinned.
}

TEST(CpuAffinityTest, PinRefusesBadSets) {
  EXPECT_EQ(PinCurrentThread({}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PinCurrentThread({-1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PinCurrentThread({1 << 20}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mt
