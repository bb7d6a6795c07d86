#include "core/ops/sharded_cross_entropy.h"

#include <cmath>
#include <utility>
#include <vector>

#include "core/ops/cross_entropy.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::CrossEntropyReference;
using ::mt::testing::NumericalGradient;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;

// Runs the four phases over `shards` column shards of full logits, combining partial results as
// the all-reduces would, and returns (losses, full dlogits).
void RunSharded(const Tensor& full, int64_t valid, const Tensor& targets, const Tensor& dlosses,
                int shards, std::vector<double>* losses, std::vector<double>* dlogits) {
  ThreadPool pool(3);
  ExecContext ctx;
  ctx.pool = &pool;
  const int64_t N = full.shape()[0], V = full.shape()[1], Vs = V / shards;
  const auto all = ToDoubles(full.view());
  std::vector<Tensor> parts;
  for (int r = 0; r < shards; ++r) {
    std::vector<double> v(N * Vs);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < Vs; ++j) v[n * Vs + j] = all[n * V + r * Vs + j];
    parts.push_back(::mt::testing::FromDoubles({N, Vs}, DType::kF32, v));
  }
  Tensor mx = Tensor::Zeros({N}, DType::kF32), tmp = Tensor::Zeros({N}, DType::kF32);
  for (int n = 0; n < N; ++n) mx.data_as<float>()[n] = -INFINITY;
  for (int r = 0; r < shards; ++r) {
    ASSERT_TRUE(ShardedRowMax(ctx, parts[r].view(), {r * Vs, valid}, tmp.view()).ok());
    for (int n = 0; n < N; ++n)
      mx.data_as<float>()[n] = std::max(mx.data_as<float>()[n], tmp.data_as<float>()[n]);
  }
  Tensor partials = Tensor::Zeros({N, 2}, DType::kF32), p = Tensor::Zeros({N, 2}, DType::kF32);
  for (int r = 0; r < shards; ++r) {
    ASSERT_TRUE(ShardedTargetAndSumExp(ctx, parts[r].view(), targets.view(), {r * Vs, valid},
                                       mx.view(), p.view())
                    .ok());
    for (int i = 0; i < 2 * N; ++i) partials.data_as<float>()[i] += p.data_as<float>()[i];
  }
  Tensor out = Tensor::Zeros({N}, DType::kF32);
  ASSERT_TRUE(ShardedLoss(ctx, targets.view(), mx.view(), partials.view(), out.view()).ok());
  *losses = ToDoubles(out.view());
  dlogits->assign(N * V, 0.0);
  for (int r = 0; r < shards; ++r) {
    Tensor d = Tensor::Zeros({N, Vs}, DType::kF32);
    ASSERT_TRUE(ShardedCrossEntropyBackward(ctx, parts[r].view(), targets.view(), {r * Vs, valid},
                                            mx.view(), partials.view(), dlosses.view(), d.view())
                    .ok());
    const auto dv = ToDoubles(d.view());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < Vs; ++j) (*dlogits)[n * V + r * Vs + j] = dv[n * Vs + j];
  }
}

TEST(ShardedCrossEntropyTest, MatchesFloat64ForEveryShardingAndMasksPadding) {
  const int64_t N = 7, V = 24, valid = 21;  // Three padded columns.
  Tensor logits = RandomTensor({N, V}, DType::kF32, 5, -4, 4);
  std::vector<int64_t> t = {0, 20, 5, kIgnoreIndex, 13, 7, 20};
  Tensor targets = Tensor::Host({N}, DType::kI64);
  for (int n = 0; n < N; ++n) targets.data_as<int64_t>()[n] = t[n];
  Tensor dlosses = RandomTensor({N}, DType::kF32, 6, 0.1, 1.0);
  const auto l = ToDoubles(logits.view());
  const auto ref = CrossEntropyReference(l, V, valid, t);
  const auto dl = ToDoubles(dlosses.view());
  // Gradient of sum_n dl[n] * loss[n] by central differences of the float64 reference.
  const auto numeric = NumericalGradient(
      [&](const std::vector<double>& x) {
        const auto ls = CrossEntropyReference(x, V, valid, t);
        double s = 0;
        for (int n = 0; n < N; ++n) s += dl[n] * ls[n];
        return s;
      },
      l);
  std::vector<double> baseline_losses, baseline_grads;
  for (int shards : {1, 2, 3, 4}) {
    std::vector<double> losses, grads;
    RunSharded(logits, valid, targets, dlosses, shards, &losses, &grads);
    EXPECT_TRUE(AllClose(losses, ref, 1e-5, 1e-6)) << shards;
    EXPECT_TRUE(AllClose(grads, numeric, 1e-4, 1e-6)) << shards;
    for (int n = 0; n < N; ++n) {
      for (int64_t j = valid; j < V; ++j) EXPECT_EQ(grads[n * V + j], 0.0);
    }
  }
}

TEST(ShardedCrossEntropyTest, OneShardWithoutPaddingEqualsSerialCrossEntropy) {
  const int64_t N = 5, V = 11;
  Tensor logits = RandomTensor({N, V}, DType::kF32, 9, -3, 3);
  Tensor targets = ::mt::testing::RandomInts({N}, DType::kI32, 10, 0, V);
  Tensor dlosses = RandomTensor({N}, DType::kF32, 11, 0.5, 1.5);
  std::vector<double> losses, grads;
  RunSharded(logits, V, targets, dlosses, 1, &losses, &grads);
  ExecContext ctx;
  Tensor serial = Tensor::Zeros({N}, DType::kF32), dserial = Tensor::Zeros({N, V}, DType::kF32);
  ASSERT_TRUE(CrossEntropy(ctx, logits.view(), targets.view(), serial.view()).ok());
  ASSERT_TRUE(
      CrossEntropyBackward(ctx, logits.view(), targets.view(), dlosses.view(), dserial.view())
          .ok());
  EXPECT_TRUE(AllClose(losses, ToDoubles(serial.view()), 1e-6, 1e-6));
  EXPECT_TRUE(AllClose(grads, ToDoubles(dserial.view()), 1e-5, 1e-7));
}

TEST(ShardedCrossEntropyTest, BadInputsAreRejected) {
  ExecContext ctx;
  Tensor logits = RandomTensor({2, 4}, DType::kF32, 1);
  Tensor mx = Tensor::Zeros({2}, DType::kF32), partials = Tensor::Zeros({2, 2}, DType::kF32);
  Tensor targets = Tensor::Zeros({2}, DType::kI32);
  targets.data_as<int32_t>()[1] = 9;
  EXPECT_EQ(
      ShardedTargetAndSumExp(ctx, logits.view(), targets.view(), {0, 8}, mx.view(), partials.view())
          .code(),
      absl::StatusCode::kOutOfRange);
  Tensor wrong = Tensor::Zeros({3}, DType::kF32);
  EXPECT_EQ(ShardedRowMax(ctx, logits.view(), {0, 4}, wrong.view()).code(),
            absl::StatusCode::kInvalidArgument);
  Tensor bf = Tensor::Zeros({2, 4}, DType::kBF16);
  EXPECT_EQ(ShardedRowMax(ctx, bf.view(), {0, 4}, mx.view()).code(),
            absl::StatusCode::kUnimplemented);
  // The partial sums must be contiguous f32 [N, 2] for every op that reads them, CPU included.
  targets.data_as<int32_t>()[1] = 3;
  Tensor losses = Tensor::Zeros({2}, DType::kF32), dlosses = Tensor::Zeros({2}, DType::kF32);
  Tensor dlogits = Tensor::Zeros({2, 4}, DType::kF32);
  Tensor bf_partials = Tensor::Zeros({2, 2}, DType::kBF16);
  Tensor wide = Tensor::Zeros({2, 4}, DType::kF32);
  TensorView strided = wide.view();  // [2, 2], every other element.
  strided.shape = {2, 2};
  strided.strides = {4, 2};
  // An element type no op takes is Unimplemented (as for the logits), a layout InvalidArgument.
  const std::pair<TensorView, absl::StatusCode> cases[] = {
      {bf_partials.view(), absl::StatusCode::kUnimplemented},
      {strided, absl::StatusCode::kInvalidArgument}};
  for (const auto& [p, code] : cases) {
    EXPECT_EQ(ShardedLoss(ctx, targets.view(), mx.view(), p, losses.view()).code(), code);
    EXPECT_EQ(ShardedCrossEntropyBackward(ctx, logits.view(), targets.view(), {0, 4}, mx.view(), p,
                                          dlosses.view(), dlogits.view())
                  .code(),
              code);
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
