// Training-level golden tests of train::Trainer with GPT-2 (run under mpirun with 2
// ranks): TP=2 and DP=2 training curves equal the serial curve over 20 steps within float32
// rounding (dropout on); an injected gradient overflow skips the step, halves the loss scale and
// leaves parameters and the LR schedule alone.
// Mixed precision: f16 training from a loss scale of 2^32 overflows for real (the f16 logit
// gradients become inf), skips steps and halves the scale until the gradients fit, then learns;
// bf16 training tracks the f32 curve in a band over 200 steps, and the serial bf16 curve at TP=2.
// The DP gradient all-reduce overlapped with backward gives the same curve as the all-reduce after
// backward. The distributed optimizer (sharded Adam moments) trains as the serial run and resumes
// from its checkpoints at another DP size. Context parallelism (CP=2, CP=2 x TP=2 with and without
// sequence parallelism, CP=4, CP=2 x PP=2, CP=2 with the distributed optimizer; dropout on the
// attention probabilities too) follows the serial curve, and a CP=2 checkpoint resumes at CP=1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "comm/mpi_testutil.h"
#include "core/ops/testutil.h"
#include "data/testing/synthetic_corpus.h"
#include "gtest/gtest.h"
#include "train/distributed_optimizer.h"
#include "train/testing/training_harness.h"

namespace mt {
namespace train {
namespace {

using ::mt::comm::testing::MpiTest;

constexpr int kVocab = 50;
constexpr int kSeq = 16;

// A learnable synthetic corpus (train/testing/synthetic_corpus.h): token -> (3 * token + 1) mod V.
std::string MakeCorpus(int rank) { return testing::WriteGptCorpus("corpus", rank, kVocab, 60); }

models::ModelConfig TinyGpt() { return testing::TinyModel(models::Family::kGpt2, kVocab, kSeq); }

using testing::HarnessConfig;
using Result = testing::HarnessResult;

HarnessConfig GptConfig(int tp, int64_t micro, int64_t global, int iters,
                        const LossScalerConfig& scaler_config, int64_t inject_overflow_at,
                        DType compute_dtype, const OptimizerConfig& oc) {
  HarnessConfig c;
  c.model = TinyGpt();
  c.tp = tp;
  c.micro_batch_size = micro;
  c.global_batch_size = global;
  c.seq_length = kSeq;
  c.end = iters;
  c.compute_dtype = compute_dtype;
  c.optimizer = oc;
  c.lr.max_lr = 3e-3;
  c.lr.min_lr = 3e-4;
  c.lr.warmup_samples = global * 3;
  c.lr.decay_samples = global * iters;
  c.scaler = scaler_config;
  c.inject_grad_overflow_at = inject_overflow_at;
  return c;
}

Result Train(comm::Communicator& world, int tp, int64_t micro, int64_t global, int iters,
             const std::string& prefix, const LossScalerConfig& scaler_config = {},
             int64_t inject_overflow_at = -1, DType compute_dtype = DType::kF32,
             const OptimizerConfig& oc = {}) {
  return testing::RunTraining(
      world,
      GptConfig(tp, micro, global, iters, scaler_config, inject_overflow_at, compute_dtype, oc),
      testing::GptBatches(prefix, kSeq, global * iters, /*seed=*/3));
}

TEST_F(MpiTest, TensorAndDataParallelCurvesMatchSerial) {
  ASSERT_EQ(comm_->size(), 2) << "run with 2 ranks";
  const std::string prefix = MakeCorpus(comm_->rank());
  const int iters = 20;
  // Global batch 4 as 2 micro-batches of 2.
  const auto [serial, tp2, dp2] = testing::TrainSerialTp2Dp2(
      *comm_, iters,
      [&](comm::Communicator& world, int tp) { return Train(world, tp, 2, 4, iters, prefix); });
  if (HasFailure()) return;
  const double worst_tp = testing::WorstRelative(tp2.losses, serial.losses);
  const double worst_dp = testing::WorstRelative(dp2.losses, serial.losses);
  for (int i = 0; i < iters; ++i) {
    EXPECT_NEAR(tp2.grad_norms[i], serial.grad_norms[i], 1e-4 * serial.grad_norms[i]) << i;
  }
  if (comm_->rank() == 0) {
    std::printf(
        "20-step curves: worst relative loss difference TP=2 %.3g, DP=2 %.3g; loss %.4f -> %.4f\n",
        worst_tp, worst_dp, serial.losses.front(), serial.losses.back());
  }
  EXPECT_LT(worst_tp, 1e-5);
  EXPECT_LT(worst_dp, 1e-5);
  EXPECT_LT(serial.losses.back(), serial.losses.front() - 0.5);  // It learns.
}

TEST_F(MpiTest, InjectedOverflowSkipsStepAndHalvesScale) {
  const std::unique_ptr<comm::Communicator> self = testing::Alone(*comm_);
  ASSERT_NE(self, nullptr);
  const std::string prefix = MakeCorpus(comm_->rank());
  LossScalerConfig lsc;
  lsc.dynamic = true;
  lsc.hysteresis = 1;
  Result r = Train(*self, 1, 2, 2, 1, prefix, lsc, /*inject_overflow_at=*/0);
  EXPECT_EQ(r.skipped, 1);
  EXPECT_EQ(r.final_scale, 2147483648.0);  // 2^32 halved.
  EXPECT_EQ(r.schedule_samples, 0);        // Skipped steps do not advance the schedule.
  EXPECT_EQ(r.first_values, r.last_values);
  EXPECT_FALSE(std::isfinite(r.grad_norms[0]));
  // Training goes on after the skipped step.
  Result more = Train(*self, 1, 2, 2, 3, prefix, lsc, /*inject_overflow_at=*/0);
  EXPECT_EQ(more.skipped, 1);
  EXPECT_EQ(more.schedule_samples, 4);
  EXPECT_NE(more.first_values, more.last_values);
}

// How a context-parallel run is laid out besides CP and TP.
struct CpRun {
  int pp = 1;
  bool sequence_parallel = false;
  bool distributed_optimizer = false;
};

// Context parallelism (ring attention over load-balanced chunks): a GPT run with CP ranks and
// TP ranks, dropout on (hidden and attention probabilities); the serial run of the same config is
// the reference. `end` < `iters` stops early (the schedule still spans `iters`).
Result TrainCp(comm::Communicator& world, int cp, int tp, int iters, const std::string& prefix,
               int start = 0, int end = -1, const std::string& load = "",
               const std::string& save = "", const CpRun& run = {}) {
  OptimizerConfig oc;
  oc.use_distributed_optimizer = run.distributed_optimizer;
  HarnessConfig c = GptConfig(tp, 2, 4, iters, {}, -1, DType::kF32, oc);
  c.cp = cp;
  c.pp = run.pp;
  c.model_options.sequence_parallel = run.sequence_parallel;
  c.start = start;
  c.end = end < 0 ? iters : end;
  c.load = load;
  c.save = save;
  return testing::RunTraining(world, c, testing::GptBatches(prefix, kSeq, 4 * iters, 3));
}

// CP=2 follows the serial curve within float32 rounding (the ring adds the attention's blocks in
// another order), and a CP=2 checkpoint resumes at CP=1 (alone) on the serial curve.
TEST_F(MpiTest, ContextParallelCurveMatchesSerialAndResumesAtCp1) {
  ASSERT_EQ(comm_->size(), 2) << "run with 2 ranks";
  const std::string prefix = MakeCorpus(comm_->rank());
  const std::unique_ptr<comm::Communicator> self = testing::Alone(*comm_);
  ASSERT_NE(self, nullptr);
  const int iters = 20, half = 10;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/cp2_ckpt";
  Result serial = TrainCp(*self, 1, 1, iters, prefix);
  Result cp2 = TrainCp(*comm_, 2, 1, iters, prefix);
  ASSERT_EQ(serial.losses.size(), static_cast<size_t>(iters));
  ASSERT_EQ(cp2.losses.size(), static_cast<size_t>(iters));
  const double worst = testing::WorstRelative(cp2.losses, serial.losses);
  for (int i = 0; i < iters; ++i) {
    EXPECT_NEAR(cp2.grad_norms[i], serial.grad_norms[i], 1e-4 * serial.grad_norms[i]) << i;
  }
  EXPECT_LT(worst, 1e-5);
  EXPECT_LT(serial.losses.back(), serial.losses.front() - 0.5);  // It learns.
  TrainCp(*comm_, 2, 1, iters, prefix, 0, half, "", dir);
  Result resumed = TrainCp(*self, 1, 1, iters, prefix, half, iters, dir);
  const std::vector<double> second_half(serial.losses.begin() + half, serial.losses.end());
  ASSERT_EQ(resumed.losses.size(), second_half.size());
  const double worst_resumed = testing::WorstRelative(resumed.losses, second_half);
  EXPECT_LT(worst_resumed, 1e-5);
  // The distributed optimizer shards the Adam state over DP x CP (here the 2 CP ranks); its
  // checkpoint resumes at CP=1 with the plain optimizer.
  CpRun dist;
  dist.distributed_optimizer = true;
  Result cp2_dist = TrainCp(*comm_, 2, 1, iters, prefix, 0, -1, "", "", dist);
  EXPECT_TRUE(cp2_dist.moments_sharded);
  const double worst_dist = testing::WorstRelative(cp2_dist.losses, serial.losses);
  EXPECT_LT(worst_dist, 1e-5);
  const std::string dist_dir = dir + "_dist";
  TrainCp(*comm_, 2, 1, iters, prefix, 0, half, "", dist_dir, dist);
  Result dist_resumed = TrainCp(*self, 1, 1, iters, prefix, half, iters, dist_dir);
  ASSERT_EQ(dist_resumed.losses.size(), second_half.size());
  const double worst_dist_resumed = testing::WorstRelative(dist_resumed.losses, second_half);
  EXPECT_LT(worst_dist_resumed, 1e-5);
  if (comm_->rank() == 0) {
    std::printf(
        "CP=2: 20-step worst relative loss difference to serial %.3g; resumed at CP=1 "
        "from its iteration-%d checkpoint %.3g; with the distributed optimizer %.3g, resumed "
        "%.3g\n",
        worst, half, worst_resumed, worst_dist, worst_dist_resumed);
  }
}

// The data-parallel gradient all-reduce overlapped with backward (buckets started as the layers'
// gradients become final) gives the same training, bit for bit at 2 ranks (a + b), as the
// all-reduce of the same buckets after backward; an injected overflow is still seen by every rank.
TEST_F(MpiTest, OverlappedGradientReduceMatchesReduceAfterBackward) {
  ASSERT_EQ(comm_->size(), 2) << "run with 2 ranks";
  const std::string prefix = MakeCorpus(comm_->rank());
  const int iters = 6;
  OptimizerConfig overlap, after;
  overlap.dp_bucket_elements = after.dp_bucket_elements = 997;  // Buckets across parameters.
  overlap.overlap_grad_reduce = true;
  after.overlap_grad_reduce = false;
  Result a = Train(*comm_, 1, 2, 4, iters, prefix, {}, -1, DType::kF32, overlap);
  Result b = Train(*comm_, 1, 2, 4, iters, prefix, {}, -1, DType::kF32, after);
  ASSERT_EQ(a.losses.size(), static_cast<size_t>(iters));
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.grad_norms, b.grad_norms);
  EXPECT_EQ(a.last_values, b.last_values);
  EXPECT_GT(a.buckets, 10);
  // The layers' buckets start while backward is still running; the embeddings' at its end.
  EXPECT_GT(a.buckets_in_backward, a.buckets / 2);
  EXPECT_LT(a.buckets_in_backward, a.buckets);
  EXPECT_EQ(b.buckets_in_backward, 0);
  if (comm_->rank() == 0) {
    std::printf(
        "overlapped DP all-reduce: %lld of %lld buckets started during backward; %d-step "
        "curve identical to the reduce-after-backward curve\n",
        static_cast<long long>(a.buckets_in_backward), static_cast<long long>(a.buckets), iters);
  }
  // Fault injection happens after the overlapped reduction has completed, so both ranks skip.
  LossScalerConfig lsc;
  lsc.dynamic = true;
  lsc.hysteresis = 1;
  Result c = Train(*comm_, 1, 2, 4, 2, prefix, lsc, /*inject_overflow_at=*/0, DType::kF32, overlap);
  EXPECT_EQ(c.skipped, 1);
  EXPECT_FALSE(std::isfinite(c.grad_norms[0]));
  EXPECT_TRUE(std::isfinite(c.grad_norms[1]));
}

double Mean(const std::vector<double>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return s / static_cast<double>(end - begin);
}

TEST_F(MpiTest, F16DynamicLossScalingSkipsRealOverflowsThenLearns) {
  const std::unique_ptr<comm::Communicator> self = testing::Alone(*comm_);
  ASSERT_NE(self, nullptr);
  const std::string prefix = MakeCorpus(comm_->rank());
  LossScalerConfig lsc;
  lsc.dynamic = true;  // Megatron's defaults: 2^32, hysteresis 2, halving on overflow.
  const int iters = 45;
  Result r = Train(*self, 1, 2, 4, iters, prefix, lsc, /*inject_overflow_at=*/-1, DType::kF16);
  ASSERT_EQ(r.losses.size(), static_cast<size_t>(iters));
  // Nothing was injected: the f16 gradients overflowed at the initial scale by themselves.
  EXPECT_GT(r.skipped, 0);
  EXPECT_FALSE(std::isfinite(r.grad_norms[0]));
  EXPECT_LT(r.final_scale, lsc.initial_scale);
  // Overflows happen while the scale is too large for the f16 gradients (from the first step on);
  // a step is skipped exactly when its gradient norm is not finite; the scale only changes on
  // skipped steps (no growth within 1000 clean steps) and, with hysteresis 2, the first overflow
  // keeps it and each later one halves it.
  const int64_t skipped = r.skipped;
  int64_t last_skip = -1;
  for (int i = 0; i < iters; ++i) {
    const bool skip = !std::isfinite(r.grad_norms[i]);
    EXPECT_EQ(r.skipped_so_far[i] - (i == 0 ? 0 : r.skipped_so_far[i - 1]), skip ? 1 : 0) << i;
    const double before = i == 0 ? lsc.initial_scale : r.scales[i - 1];
    if (skip) {
      last_skip = i;
    } else {
      EXPECT_EQ(r.scales[i], before) << i;
    }
  }
  EXPECT_EQ(r.final_scale, std::ldexp(lsc.initial_scale, -static_cast<int>(skipped - 1)));
  ASSERT_LT(last_skip + 15, iters) << "too few clean steps after the overflows to see learning";
  // Then it learns: the loss falls well below the loss of the (untrained) model while skipping.
  const double untrained = Mean(r.losses, 0, 3);  // Steps 0-2 are skipped: initial weights.
  const double trained = Mean(r.losses, iters - 5, iters);
  if (comm_->rank() == 0) {
    std::printf(
        "f16 from loss scale 2^32: %lld skipped steps (the last at iteration %lld), final "
        "scale %g, loss %.4f -> %.4f\n",
        static_cast<long long>(skipped), static_cast<long long>(last_skip + 1), r.final_scale,
        untrained, trained);
  }
  EXPECT_TRUE(!std::isfinite(r.grad_norms[1]) && !std::isfinite(r.grad_norms[2]));
  EXPECT_LT(trained, untrained - 0.5);
  // f16 compute copies followed the masters (refreshed after every applied step).
  std::vector<double> rounded(r.last_values.begin(), r.last_values.end());
  Tensor f16 =
      ::mt::testing::FromDoubles({static_cast<int64_t>(rounded.size())}, DType::kF16, rounded);
  EXPECT_EQ(r.last_compute, ::mt::testing::ToDoubles(f16.view()));
}

// The mean of v[begin, end).
double MeanOf(const std::vector<double>& v, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += v[i];
  return sum / static_cast<double>(end - begin);
}

TEST_F(MpiTest, Bf16TrainingTracksTheF32Curve) {
  ASSERT_EQ(comm_->size(), 2) << "run with 2 ranks";
  const std::string prefix = MakeCorpus(comm_->rank());
  const std::unique_ptr<comm::Communicator> self = testing::Alone(*comm_);
  ASSERT_NE(self, nullptr);
  const int iters = 200, tp_iters = 20;
  Result f32 = Train(*self, 1, 2, 4, iters, prefix);
  Result bf16 = Train(*self, 1, 2, 4, iters, prefix, {}, -1, DType::kBF16);
  // TP=2 against a serial run of the same length (the learning-rate schedule follows it).
  Result bf16_short = Train(*self, 1, 2, 4, tp_iters, prefix, {}, -1, DType::kBF16);
  Result bf16_tp2 = Train(*comm_, 2, 2, 4, tp_iters, prefix, {}, -1, DType::kBF16);
  ASSERT_EQ(bf16.losses.size(), static_cast<size_t>(iters));
  ASSERT_EQ(bf16_tp2.losses.size(), static_cast<size_t>(tp_iters));
  EXPECT_EQ(bf16.skipped, 0);
  EXPECT_EQ(bf16.final_scale, 1.0);  // bf16 needs no loss scaling.
  double worst = 0, worst_tp = 0, worst_window = 0;
  for (int i = 0; i < iters; ++i) {
    worst = std::max(worst, std::fabs(bf16.losses[i] - f32.losses[i]) / f32.losses[i]);
    if (i < tp_iters) {
      worst_tp = std::max(
          worst_tp, std::fabs(bf16_tp2.losses[i] - bf16_short.losses[i]) / bf16_short.losses[i]);
    }
    if (i % 20 == 19) {  // Windows of 20 steps: the curves' trend, without per-batch noise.
      const double a = MeanOf(bf16.losses, i - 19, i + 1), b = MeanOf(f32.losses, i - 19, i + 1);
      worst_window = std::max(worst_window, std::fabs(a - b) / b);
    }
  }
  if (comm_->rank() == 0) {
    std::printf(
        "200-step curves: worst relative loss difference bf16 vs f32 %.3g per step, %.3g over "
        "20-step windows; bf16 TP=2 vs bf16 serial (20 steps) %.3g; bf16 loss %.4f -> %.4f (f32 "
        "%.4f -> %.4f)\n",
        worst, worst_window, worst_tp, bf16.losses.front(), bf16.losses.back(), f32.losses.front(),
        f32.losses.back());
  }
  // The first losses differ by bf16 rounding only (same masters). Over 200 steps of a curve
  // falling by 3 nats the rounding differences grow but stay in a band: every step within 1% and
  // every 20-step mean within 0.5% of f32's (measured: 0.12% and 0.02%). Not bit for bit.
  const double u = ::mt::testing::UnitRoundoff(DType::kBF16);
  EXPECT_LT(std::fabs(bf16.losses[0] - f32.losses[0]) / f32.losses[0], 16 * u);
  EXPECT_GT(worst, 0.0);
  EXPECT_LT(worst, 0.01);
  EXPECT_LT(worst_window, 0.005);
  EXPECT_LT(worst_tp, 0.01);
  EXPECT_LT(bf16.losses.back(), bf16.losses.front() - 1.0);
}

// The largest |a_i - b_i| (infinite when the sizes differ).
double WorstAbsolute(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double{a[i]} - b[i]));
  return worst;
}

OptimizerConfig Distributed(double clip_grad = 1.0) {
  OptimizerConfig oc;
  oc.use_distributed_optimizer = true;
  oc.dp_bucket_elements = 997;  // Buckets across parameters; the model has an odd size.
  oc.clip_grad = clip_grad;
  return oc;
}

// The distributed optimizer (ZeRO stage 1) at DP=2: the 20-step curve and final weights of the
// serial run within float32 rounding; without clipping (whose norm the shards sum in another
// order) bit for bit the unsharded optimizer at DP=2, in f32 and bf16; one reduce-scatter and
// one all-gather per bucket in place of each bucket's all-reduce, plus the norm's all-reduce.
TEST_F(MpiTest, DistributedOptimizerMatchesSerialAndUnsharded) {
  ASSERT_EQ(comm_->size(), 2) << "run with 2 ranks";
  const std::string prefix = MakeCorpus(comm_->rank());
  const std::unique_ptr<comm::Communicator> self = testing::Alone(*comm_);
  ASSERT_NE(self, nullptr);
  const int iters = 20;
  Result serial = Train(*self, 1, 2, 4, iters, prefix);
  Result dist = Train(*comm_, 1, 2, 4, iters, prefix, {}, -1, DType::kF32, Distributed());
  ASSERT_EQ(dist.losses.size(), static_cast<size_t>(iters));
  double worst = 0;
  for (int i = 0; i < iters; ++i) {
    worst = std::max(worst, std::fabs(dist.losses[i] - serial.losses[i]) / serial.losses[i]);
    EXPECT_NEAR(dist.grad_norms[i], serial.grad_norms[i], 1e-4 * serial.grad_norms[i]) << i;
  }
  const double weights = WorstAbsolute(dist.last_values, serial.last_values);
  // As DP=2 without sharding (TensorAndDataParallelCurvesMatchSerial), the runs differ only by
  // the order of the gradient sums (below, without clipping, the sharded run IS the unsharded
  // DP=2 run bit for bit). Losses: the bound of that test. Weights: a gradient element summed
  // from micro-batch terms that cancel to 1 part in k carries a relative rounding error of about
  // k u (u = 2^-24), and Adam's move lr * m / sqrt(v) changes by that fraction of lr; allowing
  // k u up to 1e-3 (k ~ 2e4) over 20 steps at lr <= 3e-3 bounds the weights' difference by
  // 20 x 3e-3 x 1e-3 = 6e-5 (measured about 6e-6: such cancellations exist in a few elements).
  EXPECT_LT(worst, 1e-5);
  EXPECT_LT(weights, 20 * 3e-3 * 1e-3);
  EXPECT_LT(dist.losses.back(), dist.losses.front() - 0.5);

  // Without clipping, the same arithmetic as the unsharded optimizer: the two-rank sums are
  // a + b either way and AdamW is elementwise.
  const int short_iters = 6;
  OptimizerConfig plain;
  plain.dp_bucket_elements = 997;
  plain.clip_grad = 0;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Result a = Train(*comm_, 1, 2, 4, short_iters, prefix, {}, -1, dtype, Distributed(0));
    Result b = Train(*comm_, 1, 2, 4, short_iters, prefix, {}, -1, dtype, plain);
    ASSERT_EQ(a.losses.size(), static_cast<size_t>(short_iters));
    EXPECT_EQ(a.losses, b.losses) << DTypeName(dtype);
    EXPECT_EQ(a.last_values, b.last_values) << DTypeName(dtype);
    EXPECT_EQ(a.last_compute, b.last_compute) << DTypeName(dtype);
    EXPECT_NE(a.first_values, a.last_values);
    // Counted communication per step: each bucket reduce-scattered and all-gathered instead of
    // all-reduced; the loss mean all-reduced by both, the shards' norm by the distributed one.
    const int64_t buckets = a.buckets;
    const ShardLayout layout =
        PartitionBuckets(static_cast<int64_t>(a.first_values.size()), 997, 2, comm_->rank());
    EXPECT_EQ(buckets, static_cast<int64_t>(layout.buckets.size()));
    EXPECT_EQ(a.dp_calls.reduce_scatter, short_iters * buckets);
    EXPECT_EQ(a.dp_calls.all_gather, short_iters * buckets);
    // With bf16 compute the masters are sharded too (the store keeps only the f32_compute ones,
    // all-reduced over zeros: a third all-reduce) and the all-gathers move bf16 copies.
    const bool sharded_masters = dtype != DType::kF32;
    EXPECT_EQ(a.masters_sharded, sharded_masters);
    EXPECT_EQ(a.dp_calls.all_reduce, short_iters * (sharded_masters ? 3 : 2));
    EXPECT_EQ(b.dp_calls.all_reduce, short_iters * (b.buckets + 1));
    EXPECT_EQ(b.dp_calls.reduce_scatter + b.dp_calls.all_gather, 0);
    // The layers' buckets are reduce-scattered while backward goes on.
    EXPECT_GT(a.buckets_in_backward, buckets / 2);
  }
  if (comm_->rank() == 0) {
    std::printf(
        "distributed optimizer DP=2: 20-step worst relative loss difference to serial %.3g, "
        "worst weight difference %.3g; %d steps without clipping identical to unsharded DP=2 "
        "(f32, bf16)\n",
        worst, weights, short_iters);
  }
  // An overflow is seen by both ranks (the norm is summed over the shards): both skip.
  LossScalerConfig lsc;
  lsc.dynamic = true;
  lsc.hysteresis = 1;
  Result o =
      Train(*comm_, 1, 2, 4, 2, prefix, lsc, /*inject_overflow_at=*/0, DType::kF32, Distributed());
  EXPECT_EQ(o.skipped, 1);
  EXPECT_FALSE(std::isfinite(o.grad_norms[0]));
  EXPECT_TRUE(std::isfinite(o.grad_norms[1]));
}

// A checkpoint of the distributed optimizer has the unsharded layout: resumed at DP=2 with the
// distributed optimizer it continues bit for bit (no clipping, as above), resumed at DP=1 within
// float32 rounding; an unsharded optimizer's checkpoint resumes a distributed run bit for bit.
// In f32 and in bf16, where the f32 masters are sharded too and gathered into the checkpoint.
class DistributedCheckpointTest : public MpiTest, public ::testing::WithParamInterface<DType> {};

TEST_P(DistributedCheckpointTest, ResumesAtAnotherDpSize) {
  const DType dtype = GetParam();
  ASSERT_EQ(comm_->size(), 2) << "run with 2 ranks";
  const std::string prefix = MakeCorpus(comm_->rank());
  const std::unique_ptr<comm::Communicator> self = testing::Alone(*comm_);
  ASSERT_NE(self, nullptr);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      std::string(tmp ? tmp : "/tmp") + "/dist_opt_ckpt_" + std::string(DTypeName(dtype));
  const int iters = 12, half = 6;
  OptimizerConfig plain;
  plain.clip_grad = 0;
  auto run = [&](comm::Communicator& world, const OptimizerConfig& oc, int start, int end,
                 const std::string& load, const std::string& save) {
    HarnessConfig c = GptConfig(1, 2, 4, iters, {}, -1, dtype, oc);
    c.start = start;
    c.end = end;
    c.load = load;
    c.save = save;
    return testing::RunTraining(world, c, testing::GptBatches(prefix, kSeq, 4 * iters, 3));
  };
  Result full = run(*comm_, Distributed(0), 0, iters, "", "");
  ASSERT_EQ(full.losses.size(), static_cast<size_t>(iters));
  const std::vector<double> second_half(full.losses.begin() + half, full.losses.end());
  run(*comm_, Distributed(0), 0, half, "", dir + "/dist");
  run(*comm_, plain, 0, half, "", dir + "/plain");
  Result dp2 = run(*comm_, Distributed(0), half, iters, dir + "/dist", "");
  Result from_plain = run(*comm_, Distributed(0), half, iters, dir + "/plain", "");
  Result dp1 = run(*self, plain, half, iters, dir + "/dist", "");
  Result dp1_dist = run(*self, Distributed(0), half, iters, dir + "/dist", "");  // DP=1: plain.
  EXPECT_EQ(dp2.losses, second_half);
  EXPECT_EQ(dp2.last_values, full.last_values);
  EXPECT_EQ(from_plain.losses, second_half);
  EXPECT_EQ(from_plain.last_values, full.last_values);
  EXPECT_EQ(dp1_dist.losses, dp1.losses);
  // DP=1 sums the micro-batches' gradients in another order (see the curve test for the bounds).
  EXPECT_LT(testing::WorstRelative(dp1.losses, second_half), 1e-5);
  EXPECT_LT(WorstAbsolute(dp1.last_values, full.last_values), 20 * 3e-3 * 1e-3);
  EXPECT_EQ(dp2.masters_sharded, dtype != DType::kF32);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DistributedCheckpointTest,
                         ::testing::Values(DType::kF32, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// TP=2 x DP=2 with the distributed optimizer (4 ranks: gpt_trainer_test_np4; skipped at other
// sizes): the serial curve within float32 rounding, and without clipping the unsharded
// optimizer's weights bit for bit (the norm's shards are summed over DP, then over TP).
TEST_F(MpiTest, FourRanksTensorAndDataParallelDistributedOptimizer) {
  if (comm_->size() != 4) GTEST_SKIP() << "run with 4 ranks";
  const std::string prefix = MakeCorpus(comm_->rank());
  const std::unique_ptr<comm::Communicator> self = testing::Alone(*comm_);
  ASSERT_NE(self, nullptr);
  const int iters = 20;
  Result serial = Train(*self, 1, 2, 4, iters, prefix);
  Result dist = Train(*comm_, 2, 2, 4, iters, prefix, {}, -1, DType::kF32, Distributed());
  ASSERT_EQ(dist.losses.size(), static_cast<size_t>(iters));
  const double worst = testing::WorstRelative(dist.losses, serial.losses);
  for (int i = 0; i < iters; ++i) {
    EXPECT_NEAR(dist.grad_norms[i], serial.grad_norms[i], 1e-4 * serial.grad_norms[i]) << i;
  }
  EXPECT_LT(worst, 1e-5);  // The bound of the TP=2 and DP=2 curve tests.
  OptimizerConfig plain;
  plain.dp_bucket_elements = 997;
  plain.clip_grad = 0;
  const int short_iters = 6;
  Result a = Train(*comm_, 2, 2, 4, short_iters, prefix, {}, -1, DType::kF32, Distributed(0));
  Result b = Train(*comm_, 2, 2, 4, short_iters, prefix, {}, -1, DType::kF32, plain);
  ASSERT_EQ(a.losses.size(), static_cast<size_t>(short_iters));
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.last_values, b.last_values);
  EXPECT_EQ(a.dp_calls.reduce_scatter, short_iters * a.buckets);
  EXPECT_EQ(a.dp_calls.all_gather, short_iters * a.buckets);
  if (comm_->rank() == 0) {
    std::printf(
        "distributed optimizer TP=2 x DP=2: 20-step worst relative loss difference to serial "
        "%.3g; %d steps without clipping identical to the unsharded optimizer\n",
        worst, short_iters);
  }
}

// CP=2 x TP=2 (with and without sequence parallelism), CP=4, CP=2 x PP=2 and CP=2 x DP=2 (with
// and without the distributed optimizer; 4 ranks: gpt_trainer_test_np4) follow the serial curve
// within float32 rounding.
TEST_F(MpiTest, FourRanksContextParallelCurvesMatchSerial) {
  if (comm_->size() != 4) GTEST_SKIP() << "run with 4 ranks";
  const std::string prefix = MakeCorpus(comm_->rank());
  const std::unique_ptr<comm::Communicator> self = testing::Alone(*comm_);
  ASSERT_NE(self, nullptr);
  const int iters = 20;
  Result serial = TrainCp(*self, 1, 1, iters, prefix);
  Result cp2tp2 = TrainCp(*comm_, 2, 2, iters, prefix);
  Result cp4 = TrainCp(*comm_, 4, 1, iters, prefix);
  CpRun pp2, sp;
  pp2.pp = 2;
  sp.sequence_parallel = true;
  Result cp2pp2 = TrainCp(*comm_, 2, 1, iters, prefix, 0, -1, "", "", pp2);
  ASSERT_EQ(cp2pp2.losses.size(), static_cast<size_t>(iters));
  const double worst_cp2pp2 = testing::WorstRelative(cp2pp2.losses, serial.losses);
  EXPECT_LT(worst_cp2pp2, 1e-5);
  Result cp2tp2sp = TrainCp(*comm_, 2, 2, iters, prefix, 0, -1, "", "", sp);
  ASSERT_EQ(cp2tp2sp.losses.size(), static_cast<size_t>(iters));
  const double worst_cp2tp2sp = testing::WorstRelative(cp2tp2sp.losses, serial.losses);
  EXPECT_LT(worst_cp2tp2sp, 1e-5);
  // CP=2 x DP=2 (the gradients summed over the 4 ranks of DP x CP), also with the Adam state
  // sharded over them.
  CpRun dist;
  dist.distributed_optimizer = true;
  Result cp2dp2 = TrainCp(*comm_, 2, 1, iters, prefix);
  Result cp2dp2_dist = TrainCp(*comm_, 2, 1, iters, prefix, 0, -1, "", "", dist);
  ASSERT_EQ(cp2dp2.losses.size(), static_cast<size_t>(iters));
  ASSERT_EQ(cp2dp2_dist.losses.size(), static_cast<size_t>(iters));
  EXPECT_TRUE(cp2dp2_dist.moments_sharded);
  const double worst_cp2dp2 = std::max(testing::WorstRelative(cp2dp2.losses, serial.losses),
                                       testing::WorstRelative(cp2dp2_dist.losses, serial.losses));
  EXPECT_LT(worst_cp2dp2, 1e-5);
  ASSERT_EQ(cp2tp2.losses.size(), static_cast<size_t>(iters));
  ASSERT_EQ(cp4.losses.size(), static_cast<size_t>(iters));
  const double worst_cp2tp2 = testing::WorstRelative(cp2tp2.losses, serial.losses);
  const double worst_cp4 = testing::WorstRelative(cp4.losses, serial.losses);
  for (int i = 0; i < iters; ++i) {
    EXPECT_NEAR(cp2tp2.grad_norms[i], serial.grad_norms[i], 1e-4 * serial.grad_norms[i]) << i;
    EXPECT_NEAR(cp4.grad_norms[i], serial.grad_norms[i], 1e-4 * serial.grad_norms[i]) << i;
  }
  EXPECT_LT(worst_cp2tp2, 1e-5);
  EXPECT_LT(worst_cp4, 1e-5);
  if (comm_->rank() == 0) {
    std::printf(
        "20-step worst relative loss difference to serial: CP=2 x TP=2 %.3g, CP=4 %.3g, CP=2 x "
        "PP=2 %.3g, CP=2 x TP=2 with sequence parallelism %.3g, CP=2 x DP=2 (also with the "
        "distributed optimizer) %.3g\n",
        worst_cp2tp2, worst_cp4, worst_cp2pp2, worst_cp2tp2sp, worst_cp2dp2);
  }
}

}  // namespace
}  // namespace train
}  // namespace mt
