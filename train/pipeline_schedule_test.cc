// The pipeline simulator: with uniform stage times the simulated idle fraction of every stage is
// the theory's bubble ((P - 1) / (m + P - 1) for 1F1B, (P - 1) / (V m + P - 1) interleaved), for
// any ratio of backward to forward time, and no shape deadlocks. (The op orders themselves:
// comm/pipeline_order_test.cc.) StageChunkFactory: another instance of a chunk computes the same
// activations and gradients bit for bit, into the owner's gradients; mismatched stores are
// refused when the factory is made.
#include "train/pipeline_schedule.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "models/stages.h"

namespace mt {
namespace train {
namespace {

TEST(PipelineScheduleTest, SimulatedBubbleMatchesTheory) {
  for (int P : {2, 3, 4, 8}) {
    for (int m : {1, 2, 4, 8, 16, 32}) {
      for (double tb : {1.0, 2.0, 3.0}) {
        auto sim = SimulatePipeline(P, 1, m, 1.0, tb);
        ASSERT_TRUE(sim.ok()) << sim.status();
        const double theory = (P - 1.0) / (m + P - 1.0);
        EXPECT_NEAR(sim->makespan, (m + P - 1) * (1.0 + tb), 1e-9);
        for (int s = 0; s < P; ++s) {
          EXPECT_NEAR(sim->idle_fraction[s], theory, 1e-12) << P << " " << m << " " << s;
        }
      }
    }
  }
  for (int P : {2, 4}) {
    for (int V : {2, 4}) {
      for (int m : {P, 2 * P, 4 * P, 8 * P}) {
        // Each chunk's forward takes 1 / V of a stage's forward, its backward 2 / V.
        auto sim = SimulatePipeline(P, V, m, 1.0 / V, 2.0 / V);
        ASSERT_TRUE(sim.ok()) << sim.status();
        auto plain = SimulatePipeline(P, 1, m, 1.0, 2.0);
        ASSERT_TRUE(plain.ok());
        const double theory = (P - 1.0) / (V * m + P - 1.0);
        for (int s = 0; s < P; ++s) {
          EXPECT_NEAR(sim->idle_fraction[s], theory, 1e-12)
              << "P " << P << " V " << V << " m " << m << " stage " << s;
          EXPECT_LT(sim->idle_fraction[s], plain->idle_fraction[s]);
        }
      }
    }
  }
}

models::ModelConfig TinyGpt() {
  models::ModelConfig c = models::ModelConfig::Sized(models::Family::kGpt2, 4, 32, 4, 50, 16);
  c.make_vocab_size_divisible_by = 8;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  return c;
}

// Stage 0 of 2 forward on a fixed batch, then backward from a fixed output gradient: the output
// activation and every gradient of the store.
std::vector<float> StepOnStage0(models::PipelineStage& stage, nn::ParameterStore& store) {
  ExecContext ec;
  const nn::StepContext sc = nn::StepContext::Train(&ec, nullptr, 7);
  Tensor tokens = Tensor::Host({2, 16}, DType::kI32), labels = Tensor::Host({2, 16}, DType::kI32);
  for (int i = 0; i < 32; ++i) {
    tokens.data_as<int32_t>()[i] = (i * 7) % 50;
    labels.data_as<int32_t>()[i] = (i * 11) % 50;
  }
  const models::Batch batch = models::LanguageModelBatch(tokens.view(), labels.view());
  Tensor out = Tensor::Zeros(stage.StageBoundaryShape(2, 16), DType::kF32);
  Tensor out_grad = Tensor::Host(stage.StageBoundaryShape(2, 16), DType::kF32);
  for (int64_t i = 0; i < out_grad.numel(); ++i) {
    out_grad.data_as<float>()[i] = static_cast<float>((i % 13) - 6) / 64;
  }
  store.ZeroGrads();
  EXPECT_TRUE(stage.StageForward(sc, batch, TensorView(), out.view()).ok());
  EXPECT_TRUE(stage.StageBackward(sc, out_grad.view(), TensorView()).ok());
  std::vector<float> got(out.data_as<float>(), out.data_as<float>() + out.numel());
  const TensorView g = store.flat_grads();
  got.insert(got.end(), g.data_as<float>(), g.data_as<float>() + g.numel());
  return got;
}

TEST(StageChunkFactoryTest, AnotherInstanceComputesTheSameIntoTheOwnersGradients) {
  const models::ModelConfig config = TinyGpt();
  auto split = comm::MakePipelineSplit(4, 2, 0);
  ASSERT_TRUE(split.ok()) << split.status();
  nn::ParameterStore store(0, 1);
  auto chunks = models::CreateStageModels(config, &store, models::ModelOptions(), *split, 0);
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  ASSERT_TRUE(store.Allocate(3).ok());
  auto factory = StageChunkFactory(config, &store, models::ModelOptions(), *split, 0);
  ASSERT_TRUE(factory.ok()) << factory.status();
  auto instance = (*factory)(0);
  ASSERT_TRUE(instance.ok()) << instance.status();
  EXPECT_TRUE(instance->store->is_mirror());
  EXPECT_EQ(instance->store->size(), store.size());
  models::PipelineStage* owner_stage = chunks->front()->pipeline_stage();
  models::PipelineStage* other_stage = instance->model->pipeline_stage();
  ASSERT_NE(owner_stage, nullptr);
  ASSERT_NE(other_stage, nullptr);
  const std::vector<float> owner = StepOnStage0(*owner_stage, store);
  const std::vector<float> other = StepOnStage0(*other_stage, store);
  ASSERT_EQ(owner.size(), other.size());
  EXPECT_EQ(std::memcmp(owner.data(), other.data(), owner.size() * sizeof(float)), 0);
  bool moved = false;
  for (size_t i = 32 * 16 * 2; i < other.size(); ++i) moved |= other[i] != 0;
  EXPECT_TRUE(moved) << "no gradient reached the owner's buffer";
  EXPECT_EQ((*factory)(1).status().code(), absl::StatusCode::kInvalidArgument);  // One chunk.

  // Stage 1's chunks are not what this store holds: refused when the factory is made.
  auto wrong = StageChunkFactory(config, &store, models::ModelOptions(), *split, 1);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  // An unallocated store: the instance is refused.
  nn::ParameterStore empty(0, 1);
  ASSERT_TRUE(models::CreateStageModels(config, &empty, models::ModelOptions(), *split, 0).ok());
  auto early = StageChunkFactory(config, &empty, models::ModelOptions(), *split, 0);
  ASSERT_TRUE(early.ok());
  EXPECT_EQ((*early)(0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace train
}  // namespace mt
