#include "core/rank_execution.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "core/cuda_device.h"
#include "gtest/gtest.h"

namespace mt {
namespace {

TEST(RankExecutionTest, ThreadsShareTheCoresAmongTheLocalRanks) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_EQ(ThreadsPerRank(3, 8), 3);
  EXPECT_EQ(ThreadsPerRank(0, 1), std::max(1, cores));
  EXPECT_EQ(ThreadsPerRank(0, 2), std::max(1, cores / 2));
  EXPECT_EQ(ThreadsPerRank(0, 4 * cores + 1), 1);       // Never fewer than one.
  EXPECT_EQ(ThreadsPerRank(0, 0), std::max(1, cores));  // A bad local size counts as 1.
}

TEST(RankExecutionTest, CpuRankHasAPoolAndNoDevice) {
  RankExecutionOptions o;
  o.threads = 3;
  absl::StatusOr<RankExecution> r = CreateRankExecution(o);
  ASSERT_TRUE(r.ok()) << r.status();
  RankExecution moved = std::move(*r);  // exec stays valid: it points at the owned objects.
  EXPECT_EQ(moved.threads, 3);
  ASSERT_NE(moved.pool, nullptr);
  EXPECT_EQ(moved.exec.pool, moved.pool.get());
  EXPECT_EQ(moved.pool->num_threads(), 3);
  EXPECT_TRUE(moved.exec.device.is_cpu());
  EXPECT_EQ(moved.exec.cuda, nullptr);
  EXPECT_EQ(moved.exec.memory_pool, nullptr);
}

TEST(RankExecutionTest, CudaRankTakesLocalRankModGpusOrIsRefused) {
  RankExecutionOptions o;
  o.cuda = true;
  o.threads = 1;
  o.local_rank = 5;
  o.local_size = 6;
  absl::StatusOr<RankExecution> r = CreateRankExecution(o);
  const int gpus = cuda::DeviceCount();
  if (gpus < 1) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(r.status().message().find("--device=cuda: no CUDA device here"),
              absl::string_view::npos)
        << r.status();
    return;
  }
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exec.device, Device::Cuda(5 % gpus));
  EXPECT_EQ(r->exec.cuda, r->cuda.get());
  ASSERT_NE(r->memory_pool, nullptr);
  EXPECT_EQ(r->exec.memory_pool, r->memory_pool.get());
  o.caching_allocator = false;
  absl::StatusOr<RankExecution> plain = CreateRankExecution(o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->memory_pool, nullptr);
  EXPECT_EQ(plain->exec.memory_pool, nullptr);
}

}  // namespace
}  // namespace mt
