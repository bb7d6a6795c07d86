// The TP x DP x PP layout as a pure function (no MPI): the paper's examples (TP groups [0,1],[2,3];
// DP groups [0,2],[1,3]), the general rule, the pipeline's layer split, and the configuration
// errors. ParallelContext over real communicators is tested in mappings_test.
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
  ParallelConfig pp3 = Tp(2);
  pp3.pipeline_parallel = 3;
  ExpectError(8, pp3, 16, kInvalid, "world size 8 is not divisible by tensor-parallel x");
  // Boundaries that are valid: TP equal to the heads, TP equal to the world.
  EXPECT_TRUE(Tp(16).Validate(16, 16).ok());
  EXPECT_TRUE(Tp(4).Validate(4, 32).ok());
  EXPECT_EQ(Tp(2).DebugString(), "tp=2 cp=1 pp=1");
}

// W = 8, T = 2, C = 2 (D = 2), worked by hand from rank = t + T * (c + C * d): Megatron's order.
TEST(ParallelLayoutTest, World8Tp2Cp2ByHand) {
  ParallelConfig config = Tp(2);
  config.context_parallel = 2;
  auto layout = MakeParallelLayout(8, config, /*num_attention_heads=*/4);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->cp_size, 2);
  EXPECT_EQ(layout->dp_size, 2);
  EXPECT_EQ(layout->tp_groups, (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(layout->cp_groups, (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(layout->dp_groups, (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(layout->dp_cp_groups, (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(layout->pp_groups, (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  const int cp_rank[] = {0, 0, 1, 1, 0, 0, 1, 1};
  const int dp_rank[] = {0, 0, 0, 0, 1, 1, 1, 1};
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(layout->CpRank(r), cp_rank[r]) << r;
    EXPECT_EQ(layout->DpRank(r), dp_rank[r]) << r;
  }
  // CP = 4 alone: one group of every rank; TP x CP x PP = 2 x 2 x 2.
  config = Tp(1);
  config.context_parallel = 4;
  layout = MakeParallelLayout(4, config, 4);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->cp_groups, (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(layout->dp_groups, (Groups{{0}, {1}, {2}, {3}}));
  config = Tp(2);
  config.context_parallel = 2;
  config.pipeline_parallel = 2;
  layout = MakeParallelLayout(8, config, 4);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->cp_groups, (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(layout->pp_groups, (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(layout->dp_groups, (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(layout->EmbeddingGroupOf(2), (std::vector<int>{2, 6}));
}

TEST(ParallelConfigTest, ContextParallelErrorsNameTheFlags) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  ParallelConfig cp0 = Tp(1);
  cp0.context_parallel = 0;
  ExpectError(8, cp0, 16, kInvalid, "context-parallel degree 0 must be >= 1");
  ParallelConfig cp3 = Tp(2);
  cp3.context_parallel = 3;
  ExpectError(8, cp3, 16, kInvalid, "context-parallel x pipeline-parallel degree 2 x 3 x 1");
  EXPECT_TRUE(ValidateContextParallelSequence(1, 7, 1, false).ok());
  EXPECT_TRUE(ValidateContextParallelSequence(2, 8, 2, true).ok());
  const absl::Status odd = ValidateContextParallelSequence(2, 6, 1, false);
  EXPECT_EQ(odd.code(), kInvalid);
  EXPECT_NE(odd.message().find("--seq_length 6 does not split into 2 x --context_parallel_size = "
                               "4 chunks"),
            std::string::npos)
      << odd;
  const absl::Status sp = ValidateContextParallelSequence(2, 12, 2, true);
  EXPECT_NE(sp.message().find("multiple of 8"), std::string::npos) << sp;
  EXPECT_EQ(ValidateContextParallelSequence(0, 8, 1, false).code(), kInvalid);
}

ParallelConfig TpPp(int tp, int pp) {
  ParallelConfig c = Tp(tp);
  c.pipeline_parallel = pp;
  return c;
}

// W = 8, T = 2, P = 2 (D = 2), worked by hand from rank = t + T * (d + D * p).
TEST(ParallelLayoutTest, World8Tp2Pp2ByHand) {
  auto layout = MakeParallelLayout(8, TpPp(2, 2), /*num_attention_heads=*/4);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->dp_size, 2);
  EXPECT_EQ(layout->pp_size, 2);
  EXPECT_EQ(layout->tp_groups, (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(layout->dp_groups, (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(layout->pp_groups, (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // Rank 6: tp 0, dp 1, stage 1 (the last): its embedding group is [2, 6].
  EXPECT_EQ(layout->TpRank(6), 0);
  EXPECT_EQ(layout->DpRank(6), 1);
  EXPECT_EQ(layout->PpRank(6), 1);
  EXPECT_EQ(layout->EmbeddingGroupOf(6), (std::vector<int>{2, 6}));
  EXPECT_EQ(layout->EmbeddingGroupOf(2), (std::vector<int>{2, 6}));
  // W = 4, P = 4: one pipeline; the middle stages' embedding groups are themselves.
  auto deep = MakeParallelLayout(4, TpPp(1, 4), /*num_attention_heads=*/1);
  ASSERT_TRUE(deep.ok()) << deep.status();
  EXPECT_EQ(deep->pp_groups, (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(deep->dp_groups, (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(deep->EmbeddingGroupOf(0), (std::vector<int>{0, 3}));
  EXPECT_EQ(deep->EmbeddingGroupOf(1), (std::vector<int>{1}));
  EXPECT_EQ(deep->EmbeddingGroupOf(2), (std::vector<int>{2}));
  EXPECT_EQ(deep->EmbeddingGroupOf(3), (std::vector<int>{0, 3}));
  auto flat = MakeParallelLayout(2, TpPp(1, 1), /*num_attention_heads=*/1);
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->EmbeddingGroupOf(1), (std::vector<int>{1}));
}

// Every (tp, dp, pp) coordinate is exactly one rank, rank = t + T * (d + D * p), and each group
// lists the ranks that agree on the other two coordinates, in the order of its own coordinate.
TEST(ParallelLayoutTest, ThreeDimensionalGroupsForManyShapes) {
  for (int world : {1, 2, 4, 8, 12, 16, 24}) {
    for (int tp = 1; tp <= world; ++tp) {
      for (int pp = 1; tp * pp <= world; ++pp) {
        if (world % (tp * pp) != 0) continue;
        auto layout = MakeParallelLayout(world, TpPp(tp, pp), /*num_attention_heads=*/tp);
        ASSERT_TRUE(layout.ok()) << world << " " << tp << " " << pp << ": " << layout.status();
        const int dp = world / (tp * pp);
        ASSERT_EQ(layout->dp_size, dp);
        ASSERT_EQ(layout->pp_groups.size(), static_cast<size_t>(tp * dp));
        for (int p = 0; p < pp; ++p) {
          for (int d = 0; d < dp; ++d) {
            for (int t = 0; t < tp; ++t) {
              const int r = t + tp * (d + dp * p);
              ASSERT_EQ(layout->TpRank(r), t);
              ASSERT_EQ(layout->DpRank(r), d);
              ASSERT_EQ(layout->PpRank(r), p);
              EXPECT_EQ(layout->tp_groups[layout->TpGroupOf(r)][t], r);
              EXPECT_EQ(layout->dp_groups[layout->DpGroupOf(r)][d], r);
              EXPECT_EQ(layout->pp_groups[layout->PpGroupOf(r)][p], r);
              for (int q = 0; q < pp; ++q) {
                const int s = layout->pp_groups[layout->PpGroupOf(r)][q];
                EXPECT_EQ(s, t + tp * (d + dp * q));
              }
              const std::vector<int> emb = layout->EmbeddingGroupOf(r);
              if (pp > 1 && (p == 0 || p == pp - 1)) {
                EXPECT_EQ(emb, (std::vector<int>{t + tp * d, t + tp * (d + dp * (pp - 1))}));
              } else {
                EXPECT_EQ(emb, (std::vector<int>{r}));
              }
            }
          }
        }
      }
    }
  }
}

TEST(PipelineSplitTest, StagesAndInterleavedChunksByHand) {
  auto plain = MakePipelineSplit(/*num_layers=*/6, /*pipeline_parallel=*/3, 0);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->virtual_stages, 1);
  EXPECT_EQ(plain->layers_per_chunk(), 2);
  EXPECT_EQ(plain->FirstLayer(0, 0), 0);
  EXPECT_EQ(plain->FirstLayer(1, 0), 2);
  EXPECT_EQ(plain->FirstLayer(2, 0), 4);
  EXPECT_TRUE(plain->HoldsInput(0, 0));
  EXPECT_FALSE(plain->HoldsInput(1, 0));
  EXPECT_TRUE(plain->HoldsOutput(2, 0));
  EXPECT_FALSE(plain->HoldsOutput(1, 0));
  // 8 layers, 2 stages of 2 chunks of 2: stage 0 holds 0-1 and 4-5, stage 1 holds 2-3 and 6-7.
  auto inter = MakePipelineSplit(8, 2, 2);
  ASSERT_TRUE(inter.ok()) << inter.status();
  EXPECT_EQ(inter->virtual_stages, 2);
  EXPECT_EQ(inter->FirstLayer(0, 0), 0);
  EXPECT_EQ(inter->FirstLayer(1, 0), 2);
  EXPECT_EQ(inter->FirstLayer(0, 1), 4);
  EXPECT_EQ(inter->FirstLayer(1, 1), 6);
  EXPECT_TRUE(inter->HoldsInput(0, 0));
  EXPECT_FALSE(inter->HoldsOutput(1, 0));
  EXPECT_TRUE(inter->HoldsOutput(1, 1));
  // Every layer in exactly one chunk, for several shapes.
  for (int L : {4, 8, 12, 24}) {
    for (int P : {2, 4}) {
      for (int per : {1, 2, 3}) {
        auto s = MakePipelineSplit(L, P, per);
        if (!s.ok()) continue;
        std::vector<int> owners(L, 0);
        for (int st = 0; st < P; ++st) {
          for (int v = 0; v < s->virtual_stages; ++v) {
            for (int i = 0; i < per; ++i) ++owners[s->FirstLayer(st, v) + i];
          }
        }
        EXPECT_EQ(owners, std::vector<int>(L, 1)) << L << " " << P << " " << per;
      }
    }
  }
}

TEST(PipelineSplitTest, IndivisibleLayersGiveClearErrors) {
  auto e = MakePipelineSplit(6, 4, 0);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("--num_layers=6 does not divide into 4 pipeline stages"),
            std::string::npos)
      << e.status();
  auto v = MakePipelineSplit(12, 2, 4);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("must divide the 6 layers of each stage"), std::string::npos)
      << v.status();
  auto one = MakePipelineSplit(4, 1, 2);
  EXPECT_NE(one.status().message().find("needs --pipeline_model_parallel_size >= 2"),
            std::string::npos)
      << one.status();
  EXPECT_EQ(MakePipelineSplit(0, 1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakePipelineSplit(4, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace comm
}  // namespace mt
