// The moe variant as a model: registered with its own code; its parameters (router, experts, no
// dense MLP) and their count by hand; FLOPs of the active weights; the losses it reports (the
// load-balancing and z losses beside the LM loss, their sum the objective); gradients of that
// objective against finite differences; a short training run that learns; and what it refuses.
#include "models/variants/moe/moe.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "models/count.h"
#include "models/flops.h"
#include "models/memory.h"
#include "models/registry.h"
#include "models/testing/model_testutil.h"

namespace mt {
namespace models {
namespace {

ModelConfig Small() {
  ModelConfig c = FindModel("moe-tiny")->config;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.ffn_hidden_size = 12;
  c.vocab_size = 11;
  c.make_vocab_size_divisible_by = 1;
  c.max_position_embeddings = 8;
  c.init_std = 0.2;
  c.moe_aux_loss_coeff = 0.1;
  c.moe_z_loss_coeff = 0.01;
  return c;
}

TEST(MoeTest, RegisteredWithItsOwnParameters) {
  auto m = FindModel("moe-8x124m");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->config.ArchitectureName(), "moe");
  nn::ParameterStore store(0, 1);
  auto model = CreateModel(m->config, &store);
  ASSERT_TRUE(model.ok()) << model.status();
  for (const char* present : {"layers.0.mlp.router.weight", "layers.0.mlp.experts.0.gate.weight",
                              "layers.11.mlp.experts.7.down.weight", "final_norm.weight"}) {
    EXPECT_TRUE(store.Find(present).ok()) << present;
  }
  for (const char* absent : {"layers.0.mlp.gate.weight", "layers.0.mlp.experts.8.up.weight",
                             "embedding.position.weight", "layers.0.attention.qkv.bias"}) {
    EXPECT_FALSE(store.Find(absent).ok()) << absent;
  }
  // V_pad h + L (4 h^2 + h E + E 3 h f + 2 h) + h, V_pad = 50304.
  const int64_t h = 768, f = 2048, L = 12, v = 50304, E = 8;
  auto count = CountParameters(m->config, 1);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(count->total, v * h + L * (4 * h * h + h * E + E * 3 * h * f + 2 * h) + h);
  // A token runs 2 of the 8 experts of each layer.
  EXPECT_EQ(count->active, count->total - L * (E - 2) * 3 * h * f);
  // FLOPs count what a token runs through: attention, the router and its top-2 experts.
  EXPECT_DOUBLE_EQ((*model)->TrainingFlops(8, 1024, 8 * 1024),
                   DecoderFlops(8, 1024, L, h, v, 4.0 * h * h + h * E + 2 * 3.0 * h * f, false));
}

// describe's memory per rank with expert parallelism: each EP rank holds 1 / EP of the experts
// (here 8 x 3 h f per layer) and everything else whole, and the moments follow the parameters.
TEST(MoeTest, MemoryPerRankHoldsItsShareOfTheExperts) {
  const ModelConfig c = FindModel("moe-8x124m")->config;
  const int64_t h = 768, f = 2048, L = 12, E = 8;
  MemoryOptions o;
  o.data_parallel = 4;
  auto whole = EstimateMemory(c, o);
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (int ep : {2, 4}) {
    o.expert_parallel = ep;
    auto split = EstimateMemory(c, o);
    ASSERT_TRUE(split.ok()) << split.status();
    const StageMemory& a = whole->stages[0];
    const StageMemory& b = split->stages[0];
    EXPECT_EQ(a.parameters - b.parameters, L * E * 3 * h * f * (ep - 1) / ep) << ep;
    EXPECT_DOUBLE_EQ(b.optimizer, 8.0 * static_cast<double>(b.parameters)) << ep;
    EXPECT_DOUBLE_EQ(b.activations, a.activations) << ep;
  }
  o.expert_parallel = 3;  // Divides neither DP = 4 nor the 8 experts.
  EXPECT_EQ(EstimateMemory(c, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.expert_parallel = 2;
  o.distributed_optimizer = true;
  EXPECT_EQ(EstimateMemory(c, o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MoeTest, ReportsTheAuxiliaryLossesInItsObjective) {
  nn::ParameterStore store(0, 1);
  auto model = CreateModel(Small(), &store);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(store.Allocate(1).ok());
  EXPECT_EQ((*model)->loss_names(),
            (std::vector<std::string>{"lm loss", "moe aux loss", "moe z loss", "moe load 0",
                                      "moe load 1", "moe load 2", "moe load 3"}));
  const testing::LmBatch batch = testing::MakeLmBatch(2, 7, 11);
  const ExecContext ec;
  auto l = (*model)->ForwardBackward(nn::StepContext::Eval(&ec), batch.view(), Backward::kNo);
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_EQ(l->parts.size(), 7u);
  // Balanced routing gives aux = coeff per layer; any routing gives at least about that.
  EXPECT_GT(l->parts[1], 0.5 * 2 * 0.1);
  EXPECT_LT(l->parts[1], 4 * 2 * 0.1);
  EXPECT_GT(l->parts[2], 0);
  EXPECT_DOUBLE_EQ(l->total, l->parts[0] + l->parts[1] + l->parts[2]);
  const auto& stats = static_cast<moe::MoeModel&>(**model).stats();
  ASSERT_EQ(stats.layers(), 2);
  int64_t routed = 0;
  std::vector<int64_t> per_expert(4, 0);
  for (int layer = 0; layer < 2; ++layer) {
    for (int e = 0; e < 4; ++e) per_expert[e] += stats.routed(layer)[e];
  }
  for (int64_t n : stats.routed(0)) routed += n;
  EXPECT_EQ(routed, 2 * 7 * 2);  // Every token to its top-2.
  // The loads: each expert's share of the 2 x 28 slots of both layers.
  for (int e = 0; e < 4; ++e) EXPECT_DOUBLE_EQ(l->parts[3 + e], per_expert[e] / 56.0) << e;
}

TEST(MoeTest, GradientsMatchFiniteDifferences) {
  const testing::LmBatch batch = testing::MakeLmBatch(2, 7, 11);
  testing::ExpectGradientsMatchFiniteDifferences(Small(), batch.view());
}

TEST(MoeTest, Learns) {
  const testing::Learning l = testing::TrainOnPattern(Small());
  EXPECT_GT(l.first, 1.5);
  EXPECT_LT(l.last, 0.3);
}

TEST(MoeTest, RefusesWhatItCannotBe) {
  auto refused = [](const ModelConfig& c, const ModelOptions& o, const char* needle) {
    nn::ParameterStore store(0, 1);
    const absl::Status s = CreateModel(c, &store, o).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s;
  };
  ModelConfig c = Small();
  c.moe_router_topk = 5;
  refused(c, {}, "moe_router_topk 5 must be in [1, num_experts = 4]");
  c = Small();
  c.num_experts = 0;
  refused(c, {}, "num_experts must be >= 1");
  c = Small();
  c.moe_expert_capacity_factor = -1;
  refused(c, {}, "moe_expert_capacity_factor");
  c = Small();
  c.architecture = "gpt2";
  c.position_embeddings = true;
  refused(c, {}, "has no experts");
  ModelOptions sp;
  sp.sequence_parallel = true;
  refused(Small(), sp, "sequence parallelism");
}

}  // namespace
}  // namespace models
}  // namespace mt
