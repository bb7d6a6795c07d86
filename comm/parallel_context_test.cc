// The TP x DP layout as a pure function (no MPI): REFERENCE.md's examples, the general rule, and
// the configuration errors. ParallelContext over real communicators is tested in mappings_test.
#include "comm/parallel_context.h"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace comm {
namespace {

using Groups = std::vector<std::vector<int>>;

ParallelConfig Tp(int tp) {
  ParallelConfig c;
  c.tensor_parallel = tp;
  return c;
}

TEST(ParallelLayoutTest, World16Tp2MatchesReference) {
  auto layout = MakeParallelLayout(16, Tp(2), /*num_attention_heads=*/16);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->world_size, 16);
  EXPECT_EQ(layout->tp_size, 2);
  EXPECT_EQ(layout->dp_size, 8);
  EXPECT_EQ(layout->tp_groups,
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(layout->dp_groups, (Groups{{0, 2, 4, 6, 8, 10, 12, 14}, {1, 3, 5, 7, 9, 11, 13, 15}}));
  // Rank 5: second member of TP group [4,5], third member of DP group [1,3,5,...].
  EXPECT_EQ(layout->TpRank(5), 1);
  EXPECT_EQ(layout->DpRank(5), 2);
  EXPECT_EQ(layout->TpGroupOf(5), 2);
  EXPECT_EQ(layout->DpGroupOf(5), 1);
}

TEST(ParallelLayoutTest, World8Tp4MatchesReference) {
  auto layout = MakeParallelLayout(8, Tp(4), /*num_attention_heads=*/16);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->tp_size, 4);
  EXPECT_EQ(layout->dp_size, 2);
  EXPECT_EQ(layout->tp_groups, (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(layout->dp_groups, (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  const int tp_rank[] = {0, 1, 2, 3, 0, 1, 2, 3};
  const int dp_rank[] = {0, 0, 0, 0, 1, 1, 1, 1};
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(layout->TpRank(r), tp_rank[r]) << r;
    EXPECT_EQ(layout->DpRank(r), dp_rank[r]) << r;
  }
}

TEST(ParallelLayoutTest, Tp1IsPureDataParallel) {
  auto layout = MakeParallelLayout(3, Tp(1), /*num_attention_heads=*/1);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->tp_groups, (Groups{{0}, {1}, {2}}));
  EXPECT_EQ(layout->dp_groups, (Groups{{0, 1, 2}}));
  auto full_tp = MakeParallelLayout(4, Tp(4), /*num_attention_heads=*/4);
  ASSERT_TRUE(full_tp.ok()) << full_tp.status();
  EXPECT_EQ(full_tp->tp_groups, (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(full_tp->dp_groups, (Groups{{0}, {1}, {2}, {3}}));
}

// The general rule: TP groups partition the ranks into runs of consecutive ranks, DP groups into
// stride-T sets, each TP group meets each DP group in exactly one rank, and the group lists agree
// with TpRank/DpRank.
TEST(ParallelLayoutTest, GroupsPartitionTheWorldForManyShapes) {
  for (int world : {1, 2, 4, 6, 8, 12, 16, 24, 64}) {
    for (int tp = 1; tp <= world; ++tp) {
      if (world % tp != 0) continue;
      auto layout = MakeParallelLayout(world, Tp(tp), /*num_attention_heads=*/3 * tp);
      ASSERT_TRUE(layout.ok()) << world << " " << tp << ": " << layout.status();
      const int dp = world / tp;
      ASSERT_EQ(layout->tp_groups.size(), static_cast<size_t>(dp));
      ASSERT_EQ(layout->dp_groups.size(), static_cast<size_t>(tp));
      std::set<int> seen_tp, seen_dp;
      for (int g = 0; g < dp; ++g) {
        ASSERT_EQ(layout->tp_groups[g].size(), static_cast<size_t>(tp));
        for (int i = 0; i < tp; ++i) {
          const int r = layout->tp_groups[g][i];
          EXPECT_EQ(r, g * tp + i);
          EXPECT_EQ(layout->TpRank(r), i);
          EXPECT_EQ(layout->TpGroupOf(r), g);
          seen_tp.insert(r);
        }
      }
      for (int j = 0; j < tp; ++j) {
        ASSERT_EQ(layout->dp_groups[j].size(), static_cast<size_t>(dp));
        for (int k = 0; k < dp; ++k) {
          const int r = layout->dp_groups[j][k];
          EXPECT_EQ(r, j + k * tp);
          EXPECT_EQ(layout->DpRank(r), k);
          EXPECT_EQ(layout->DpGroupOf(r), j);
          seen_dp.insert(r);
        }
      }
      EXPECT_EQ(seen_tp.size(), static_cast<size_t>(world));
      EXPECT_EQ(seen_dp.size(), static_cast<size_t>(world));
      for (const auto& tg : layout->tp_groups) {
        for (const auto& dg : layout->dp_groups) {
          int common = 0;
          for (int r : tg) {
            for (int s : dg) common += r == s;
          }
          EXPECT_EQ(common, 1);
        }
      }
    }
  }
}

void ExpectError(int world, ParallelConfig config, int heads, absl::StatusCode code,
                 const std::string& needle) {
  absl::Status s = config.Validate(world, heads);
  EXPECT_EQ(s.code(), code) << "world " << world << " " << config.DebugString() << " heads "
                            << heads << ": " << s;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s;
  EXPECT_EQ(MakeParallelLayout(world, config, heads).status().code(), code);
}

TEST(ParallelConfigTest, InvalidDegreesGiveClearErrors) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  ExpectError(8, Tp(0), 16, kInvalid, "tensor-parallel degree 0 must be >= 1");
  ExpectError(8, Tp(-2), 16, kInvalid, "must be >= 1");
  ExpectError(0, Tp(1), 16, kInvalid, "world size 0");
  ExpectError(6, Tp(4), 16, kInvalid, "world size 6 is not divisible");
  ExpectError(16, Tp(16), 12, kInvalid, "exceeds the model's 12 attention heads");
  ExpectError(16, Tp(8), 12, kInvalid, "does not divide the model's 12 attention heads");
  ExpectError(8, Tp(2), 0, kInvalid, "attention heads 0");
  ParallelConfig pp0 = Tp(1);
  pp0.pipeline_parallel = 0;
  ExpectError(8, pp0, 16, kInvalid, "pipeline-parallel degree 0");
  ParallelConfig pp2 = Tp(2);
  pp2.pipeline_parallel = 2;
  ExpectError(8, pp2, 16, absl::StatusCode::kUnimplemented, "pipeline parallelism");
  // Boundaries that are valid: TP equal to the heads, TP equal to the world.
  EXPECT_TRUE(Tp(16).Validate(16, 16).ok());
  EXPECT_TRUE(Tp(4).Validate(4, 32).ok());
  EXPECT_EQ(Tp(2).DebugString(), "tp=2 pp=1");
}

}  // namespace
}  // namespace comm
}  // namespace mt
