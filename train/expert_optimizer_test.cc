// The optimizer under expert parallelism on 4 ranks (DP=4, EP=2: EP groups {0, 1} and {2, 3},
// expert-data-parallel groups {0, 2} and {1, 3}): dense gradients are summed over all 4 ranks,
// a rank's expert gradient over its expert-data-parallel pair only, and the gradient norm counts
// each expert once; all against sums written out by hand. With the distributed optimizer the
// dense state is sharded over the 4 ranks and the expert's over its pair, with the same results.
#include <cmath>
#include <memory>
#include <vector>

#include "comm/mpi_testutil.h"
#include "gtest/gtest.h"
#include "nn/parameter.h"
#include "train/optimizer.h"

namespace mt {
namespace train {
namespace {

using comm::testing::MpiTest;

TEST_F(MpiTest, ExpertGradientsReduceOverTheirGroupAndCountOnce) {
  ASSERT_EQ(comm_->size(), 4);
  const int r = comm_->rank();
  auto ep = comm_->Split(/*color=*/r / 2, /*key=*/r % 2, "ep");
  ASSERT_TRUE(ep.ok()) << ep.status();
  auto edp = comm_->Split(/*color=*/r % 2, /*key=*/r / 2, "edp");
  ASSERT_TRUE(edp.ok()) << edp.status();
  // dense [2], this rank's expert (global index r % 2) [3], then dense [1]: the expert's
  // buckets lie between dense ones.
  nn::ParameterStore store(0, 1);
  ASSERT_TRUE(store.Add({"dense.weight", {2}}).ok());
  auto expert =
      store.Add({r % 2 == 0 ? "layers.0.mlp.experts.0.w" : "layers.0.mlp.experts.1.w", {3}});
  ASSERT_TRUE(expert.ok());
  store.MarkExpert(*expert);
  ASSERT_TRUE(store.Add({"final.weight", {1}}).ok());
  ASSERT_TRUE(store.Allocate(1).ok());
  float* g = store.flat_grads().data_as<float>();
  const float k = static_cast<float>(r + 1);
  const float grads[] = {k, k, 10 * k, 10 * k + 1, 10 * k + 2, 100 * k};
  std::copy(std::begin(grads), std::end(grads), g);

  OptimizerConfig config;
  config.clip_grad = 0;
  config.dp_bucket_elements = 2;
  config.overlap_grad_reduce = false;
  auto optimizer = Optimizer::Create(&store, config, comm_.get(), {ep->get(), edp->get()});
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  ExecContext ctx;
  auto stats = optimizer->Step(ctx, nullptr, comm_.get(), /*lr=*/0.0, /*grad_divisor=*/1.0);
  ASSERT_TRUE(stats.ok()) << stats.status();

  // Dense: 1 + 2 + 3 + 4 = 10 per element, 100 x 10 for final.weight. Expert 0 on ranks 0 and 2
  // (k = 1, 3): 40 + 2i; expert 1 on ranks 1 and 3 (k = 2, 4): 60 + 2i.
  const float e = r % 2 == 0 ? 40 : 60;
  const std::vector<float> want = {10, 10, e, e + 2, e + 4, 1000};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(g[i], want[i]) << "element " << i;
  const double norm_sq =
      2 * 100.0 + 1000.0 * 1000.0 + (40 * 40 + 42 * 42 + 44 * 44) + (60 * 60 + 62 * 62 + 64 * 64);
  EXPECT_NEAR(stats->grad_norm, std::sqrt(norm_sq), 1e-6 * std::sqrt(norm_sq));

  // The distributed optimizer: the dense state sharded over the 4 ranks, the expert's over its
  // expert-data-parallel pair; the same norm, and after an AdamW step with lr the same weights
  // as the replicated optimizer's (each element's first Adam step moves it by -lr * sign(g) when
  // weight decay is off).
  config.use_distributed_optimizer = true;
  config.weight_decay = 0;
  auto dist = Optimizer::Create(&store, config, comm_.get(), {ep->get(), edp->get()});
  ASSERT_TRUE(dist.ok()) << dist.status();
  // Shards (buckets of 2): the dense runs [0, 2) and [5, 6), each one bucket padded to 4, a part
  // of 1 per rank for each; the expert's [2, 5), buckets [3, 5) and [2, 3) (padded to 2), a part
  // of 1 per rank for each: 4 moment elements per rank.
  EXPECT_EQ(dist->exp_avg().numel(), 4);
  std::copy(std::begin(grads), std::end(grads), g);
  float* w = store.flat_values().data_as<float>();
  const float before[] = {1, 2, 3, 4, 5, 6};
  std::copy(std::begin(before), std::end(before), w);
  auto dstats = dist->Step(ctx, nullptr, comm_.get(), /*lr=*/0.5, /*grad_divisor=*/1.0);
  ASSERT_TRUE(dstats.ok()) << dstats.status();
  EXPECT_NEAR(dstats->grad_norm, std::sqrt(norm_sq), 1e-6 * std::sqrt(norm_sq));
  // Adam's first step: m = (1 - b1) g, v = (1 - b2) g^2, update lr * m_hat / (sqrt(v_hat) + eps)
  // = lr * g / (|g| + eps): -0.5 for every (positive) gradient.
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(w[i], before[i] - 0.5f, 1e-6) << "element " << i;
  // The moments gathered for a checkpoint: DP rank 0 holds the dense ones, rank 0 of each
  // expert-data-parallel pair (ranks 0 and 1) its expert's; m = 0.1 g of the reduced gradient.
  Tensor m = Tensor::Host({6}, DType::kF32), v = Tensor::Host({6}, DType::kF32);
  ASSERT_TRUE(dist->GatherStateToRoot(ctx, TensorView(), m.view(), v.view()).ok());
  if (r < 2) {
    for (int i = 2; i < 5; ++i) EXPECT_NEAR(m.data_as<float>()[i], 0.1f * want[i], 1e-4) << i;
  }
  if (r == 0) {
    for (int i : {0, 1, 5}) EXPECT_NEAR(m.data_as<float>()[i], 0.1f * want[i], 1e-4) << i;
  }
}

}  // namespace
}  // namespace train
}  // namespace mt
