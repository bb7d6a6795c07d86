// Multi-process test of ParallelContext with pipeline stages over MPI: every (TP, PP) that divides
// the world, the pipeline and embedding communicators against the layout (group sums of world
// ranks), and a message passed down the pipeline and back through prev_stage()/next_stage().
// Run under mpirun (comm/mpi_test.sh) with 1-4 ranks.
#include <cstdint>
#include <memory>

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

}  // namespace
}  // namespace comm
}  // namespace mt
