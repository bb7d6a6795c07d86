// Multi-process test of ParallelContext with pipeline stages over MPI: every (TP, PP) that divides
// the world, the pipeline and embedding communicators against the layout (group sums of world
// ranks), a message passed down the pipeline and back through prev_stage()/next_stage(), and the
// non-blocking SendAsync/RecvAsync that the pipeline schedule exchanges activations with.
// Run under mpirun (comm/mpi_test.sh) with 1-4 ranks.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "comm/mpi_testutil.h"
#include "comm/parallel_context.h"
#include "gtest/gtest.h"

namespace mt {
namespace comm {
namespace {

using testing::MpiTest;

constexpr int kHeads = 12;  // Divisible by every TP degree tested.

int64_t GroupSum(Communicator& c, int64_t value) {
  EXPECT_TRUE(c.AllReduce(TensorView(&value, Shape{1}, DType::kI64), ReduceOp::kSum).ok());
  return value;
}

TEST_F(MpiTest, PipelineGroupsMatchLayout) {
  const int world = comm_->size(), me = comm_->rank();
  for (int tp = 1; tp <= world; ++tp) {
    for (int pp = 1; tp * pp <= world; ++pp) {
      if (world % (tp * pp) != 0) continue;
      ParallelConfig config;
      config.tensor_parallel = tp;
      config.pipeline_parallel = pp;
      auto made = ParallelContext::Create(*comm_, config, kHeads);
      ASSERT_TRUE(made.ok()) << made.status();
      ParallelContext& ctx = **made;
      const ParallelLayout& l = ctx.layout();
      EXPECT_EQ(ctx.pp_size(), pp);
      EXPECT_EQ(ctx.pp_rank(), me / (tp * (world / (tp * pp))));
      EXPECT_EQ(ctx.is_first_stage(), ctx.pp_rank() == 0);
      EXPECT_EQ(ctx.is_last_stage(), ctx.pp_rank() == pp - 1);
      int64_t want_pp = 0, want_emb = 0, want_dp = 0;
      for (int r : l.pp_groups[l.PpGroupOf(me)]) want_pp += r;
      for (int r : l.EmbeddingGroupOf(me)) want_emb += r;
      for (int r : l.dp_groups[l.DpGroupOf(me)]) want_dp += r;
      EXPECT_EQ(GroupSum(ctx.pp(), me), want_pp) << ctx.DebugString();
      EXPECT_EQ(GroupSum(ctx.embedding(), me), want_emb) << ctx.DebugString();
      EXPECT_EQ(GroupSum(ctx.dp(), me), want_dp) << ctx.DebugString();
      // A token goes down the pipeline (each stage adds its world rank) and comes back up.
      int64_t token = 0;
      const TensorView t(&token, Shape{1}, DType::kI64);
      absl::Status st;
      if (!ctx.is_first_stage()) st.Update(ctx.pp().Recv(t, ctx.prev_stage()));
      token += me;
      if (!ctx.is_last_stage()) st.Update(ctx.pp().Send(t, ctx.next_stage()));
      if (!ctx.is_last_stage()) st.Update(ctx.pp().Recv(t, ctx.next_stage(), /*tag=*/1));
      if (!ctx.is_first_stage()) st.Update(ctx.pp().Send(t, ctx.prev_stage(), /*tag=*/1));
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_EQ(token, want_pp) << ctx.DebugString();
      EXPECT_EQ(ctx.pp().counters().send,
                pp == 1 ? 0 : (ctx.is_first_stage() || ctx.is_last_stage() ? 1 : 2));
    }
  }
}

// Neighbouring stages exchange large messages both ways at once (blocking Send on both sides could
// wait for each other): every stage posts its sends and receives to both neighbours, then waits.
// Each dtype; the values, the counters and the pending requests.
TEST_F(MpiTest, AsyncSendRecvBothWaysAtOnce) {
  const int world = comm_->size(), me = comm_->rank();
  if (world == 1) GTEST_SKIP() << "needs 2 ranks";
  ASSERT_TRUE(comm_->nonblocking_point_to_point());
  const int64_t n = 1 << 20;  // 4 MiB of f32: past any eager limit.
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI32}) {
    const Shape shape{n};
    std::vector<Tensor> in, out;
    std::vector<std::unique_ptr<CommRequest>> requests;
    for (int peer : {me - 1, me + 1}) {
      if (peer < 0 || peer >= world) continue;
      out.push_back(testing::RankData(shape, dtype, /*seed=*/3 + 100 * peer, me));
      in.push_back(Tensor::Host(shape, dtype));
      auto send = comm_->SendAsync(out.back().view(), peer, /*tag=*/7);
      auto recv = comm_->RecvAsync(in.back().view(), peer, /*tag=*/7);
      ASSERT_TRUE(send.ok() && recv.ok()) << send.status() << recv.status();
      requests.push_back(std::move(send).value());
      requests.push_back(std::move(recv).value());
    }
    EXPECT_EQ(comm_->pending_requests(), static_cast<int64_t>(requests.size()));
    for (auto& r : requests) ASSERT_TRUE(r->Wait().ok());
    EXPECT_EQ(comm_->pending_requests(), 0);
    int k = 0;
    for (int peer : {me - 1, me + 1}) {
      if (peer < 0 || peer >= world) continue;
      const Tensor want = testing::RankData(shape, dtype, 3 + 100 * me, peer);
      EXPECT_EQ(0, std::memcmp(in[k].data(), want.data(), want.nbytes())) << DTypeName(dtype);
      ++k;
    }
  }
  const int neighbours = (me > 0) + (me < world - 1);
  EXPECT_EQ(comm_->counters().send, 3 * neighbours);
  EXPECT_EQ(comm_->counters().recv, 3 * neighbours);
  // Argument errors come back from the call and are not counted.
  Tensor t = Tensor::Host({4}, DType::kF32);
  EXPECT_EQ(comm_->SendAsync(t.view(), me).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->RecvAsync(t.view(), world).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->counters().send, 3 * neighbours);
}

}  // namespace
}  // namespace comm
}  // namespace mt
