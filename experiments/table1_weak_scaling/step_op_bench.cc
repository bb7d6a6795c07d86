// Part (d)'s measured model inputs: the time of one rank's share of a GPT training step's compute,
// by part, from the project's own ops (core/ops) at that rank's shapes and thread count. Run under
// mpirun with as many copies as the measured configuration has ranks, so that they share the
// machine's cores and memory as the ranks of the training run do (every copy prints; table1 reads
// the first). Per step and rank it times, each as the best of --reps runs after a warm-up (the
// least disturbed by other jobs on a shared machine: they only ever slow a run down):
//
//   gemm_s       every matrix product outside attention: per layer the forward QKV, projection,
//                fc1 and fc2 products at [B*T, H] x [H, 3H/tp] etc. and their input and weight
//                gradients, and the logits [B*T, H] x [H, V/tp] with its two gradients;
//   attention_s  ops::FusedAttention and its backward per layer at [B, heads/tp, T, H/heads];
//   layernorm_s  the two LayerNorms per layer and the final one, forward and backward;
//   loss_s       the vocab-parallel cross-entropy's ops and their backward over the [B*T, V/tp]
//                logits;
//   optimizer_s  zeroing the gradients and ops::AdamUpdate over the rank's parameters;
//   copy_bytes_per_s  a memcpy's bytes read + written per second over the copy's threads.
//
//   bazel-bin/experiments/table1_weak_scaling/step_op_bench --hidden=256 --heads=4 --layers=2
//       --seq=128 --micro_batch=4 --tp=1 --vocab=50304 --params=14490624 --threads=2
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/ops/adam.h"
#include "core/ops/attention.h"
#include "core/ops/gemm.h"
#include "core/ops/layernorm.h"
#include "core/ops/sharded_cross_entropy.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "core/tool_main.h"
#include "gflags/gflags.h"
#include "glog/logging.h"

DEFINE_int64(hidden, 256, "Hidden size H.");
DEFINE_int64(heads, 4, "Attention heads.");
DEFINE_int64(layers, 2, "Transformer layers.");
DEFINE_int64(seq, 128, "Sequence length T.");
DEFINE_int64(micro_batch, 4, "Samples B per model replica.");
DEFINE_int32(tp, 1, "Tensor-parallel degree: the rank's shapes are split by it.");
DEFINE_int64(vocab, 50304, "Padded vocabulary V.");
DEFINE_int64(valid_vocab, 50257, "Real vocabulary (columns past it are masked).");
DEFINE_int64(params, 0, "Parameters this rank holds (the optimizer's work).");
DEFINE_int32(threads, 1, "Threads of this copy (as the training run's ranks: cores / ranks).");
DEFINE_int32(reps, 5, "Timed runs per part (the least time is printed).");

namespace mt {
namespace experiments {
namespace {

void Ok(const absl::Status& s) { CHECK(s.ok()) << s; }

Tensor Random(Shape shape, uint32_t seed) {
  Tensor t = Tensor::Zeros(shape, DType::kF32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (int64_t i = 0; i < t.view().numel(); ++i) t.data_as<float>()[i] = u(rng);
  return t;
}

// The least seconds of `reps` runs of `body` after one warm-up run.
double BestSeconds(const std::function<void()>& body, int reps) {
  body();
  std::vector<double> s;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return *std::min_element(s.begin(), s.end());
}

// One product C[m, n] = A[m, k] B[k, n] with its input gradient dA = dC B^T and weight gradient
// dB = A^T dC: forward, then both gradients.
double ProductSeconds(const ExecContext& ec, int64_t m, int64_t n, int64_t k, int reps) {
  Tensor a = Random({m, k}, 1), b = Random({k, n}, 2), c = Random({m, n}, 3);
  Tensor da = Tensor::Zeros({m, k}, DType::kF32), db = Tensor::Zeros({k, n}, DType::kF32);
  ops::GemmOptions bt, at;
  bt.transpose_b = ops::Transpose::kYes;
  at.transpose_a = ops::Transpose::kYes;
  return BestSeconds(
      [&] {
        Ok(ops::Gemm(ec, a.view(), b.view(), c.view()));
        Ok(ops::Gemm(ec, c.view(), b.view(), da.view(), bt));
        Ok(ops::Gemm(ec, a.view(), c.view(), db.view(), at));
      },
      reps);
}

double GemmSeconds(const ExecContext& ec, int reps) {
  const int64_t n = FLAGS_micro_batch * FLAGS_seq, h = FLAGS_hidden, t = FLAGS_tp;
  const double layer =
      ProductSeconds(ec, n, 3 * h / t, h, reps) + ProductSeconds(ec, n, h, h / t, reps) +
      ProductSeconds(ec, n, 4 * h / t, h, reps) + ProductSeconds(ec, n, h, 4 * h / t, reps);
  return FLAGS_layers * layer + ProductSeconds(ec, n, FLAGS_vocab / t, h, reps);
}

double AttentionSeconds(const ExecContext& ec, int reps) {
  const int64_t b = FLAGS_micro_batch, nh = FLAGS_heads / FLAGS_tp, s = FLAGS_seq;
  const int64_t d = FLAGS_hidden / FLAGS_heads;
  Tensor q = Random({b, nh, s, d}, 4), k = Random({b, nh, s, d}, 5), v = Random({b, nh, s, d}, 6);
  Tensor out = Tensor::Zeros({b, nh, s, d}, DType::kF32), dout = Random({b, nh, s, d}, 7);
  Tensor lse = Tensor::Zeros({b, nh, s}, DType::kF32);
  Tensor dq = Tensor::Zeros({b, nh, s, d}, DType::kF32),
         dk = Tensor::Zeros({b, nh, s, d}, DType::kF32),
         dv = Tensor::Zeros({b, nh, s, d}, DType::kF32);
  ops::AttentionArgs args;
  args.scale = 1.0f / std::sqrt(static_cast<float>(d));
  args.causal = ops::CausalMask::kYes;
  return FLAGS_layers * BestSeconds(
                            [&] {
                              Ok(ops::FusedAttention(ec, q.view(), k.view(), v.view(), args,
                                                     out.view(), lse.view()));
                              Ok(ops::FusedAttentionBackward(
                                  ec, q.view(), k.view(), v.view(), out.view(), dout.view(),
                                  lse.view(), args, dq.view(), dk.view(), dv.view()));
                            },
                            reps);
}

double LayerNormSeconds(const ExecContext& ec, int reps) {
  const int64_t n = FLAGS_micro_batch * FLAGS_seq, h = FLAGS_hidden;
  Tensor x = Random({n, h}, 8), gamma = Random({h}, 9), beta = Random({h}, 10);
  Tensor y = Tensor::Zeros({n, h}, DType::kF32), dy = Random({n, h}, 11);
  Tensor dx = Tensor::Zeros({n, h}, DType::kF32), dgamma = Tensor::Zeros({h}, DType::kF32),
         dbeta = Tensor::Zeros({h}, DType::kF32);
  Tensor mean = Tensor::Zeros({n}, DType::kF32), rstd = Tensor::Zeros({n}, DType::kF32);
  const double one = BestSeconds(
      [&] {
        Ok(ops::LayerNorm(ec, x.view(), gamma.view(), beta.view(), 1e-5f, y.view(), mean.view(),
                          rstd.view()));
        Ok(ops::LayerNormBackward(ec, x.view(), gamma.view(), mean.view(), rstd.view(), dy.view(),
                                  dx.view(), dgamma.view(), dbeta.view()));
      },
      reps);
  return (2 * FLAGS_layers + 1) * one;
}

// The vocab-parallel cross-entropy's ops (nn/cross_entropy.cc; its two [B*T] all-reduces are in
// the model's communication term), forward and backward, on rank 0's shard.
double LossSeconds(const ExecContext& ec, int reps) {
  const int64_t n = FLAGS_micro_batch * FLAGS_seq, v = FLAGS_vocab / FLAGS_tp;
  Tensor logits = Random({n, v}, 12), dlogits = Tensor::Zeros({n, v}, DType::kF32);
  Tensor targets = Tensor::Zeros({n}, DType::kI32), losses = Tensor::Zeros({n}, DType::kF32);
  Tensor dlosses = Tensor::Zeros({n}, DType::kF32), row_max = Tensor::Zeros({n}, DType::kF32);
  Tensor partials = Tensor::Zeros({n, 2}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) {
    targets.data_as<int32_t>()[i] = static_cast<int32_t>((i * 7919) % FLAGS_valid_vocab);
    dlosses.data_as<float>()[i] = 1.0f / n;
  }
  ops::VocabShard shard;
  shard.valid_vocab = FLAGS_valid_vocab;
  return BestSeconds(
      [&] {
        Ok(ops::ShardedRowMax(ec, logits.view(), shard, row_max.view()));
        Ok(ops::ShardedTargetAndSumExp(ec, logits.view(), targets.view(), shard, row_max.view(),
                                       partials.view()));
        Ok(ops::ShardedLoss(ec, targets.view(), row_max.view(), partials.view(), losses.view()));
        Ok(ops::ShardedCrossEntropyBackward(ec, logits.view(), targets.view(), shard,
                                            row_max.view(), partials.view(), dlosses.view(),
                                            dlogits.view()));
      },
      reps);
}

double OptimizerSeconds(const ExecContext& ec, int reps) {
  const int64_t p = std::max<int64_t>(1, FLAGS_params);
  Tensor param = Random({p}, 13), grad = Random({p}, 14);
  Tensor m = Tensor::Zeros({p}, DType::kF32), v = Tensor::Zeros({p}, DType::kF32);
  std::vector<float> grads(p);
  ops::AdamArgs args;
  args.weight_decay = 0.01f;
  return BestSeconds(
      [&] {
        std::fill(grads.begin(), grads.end(), 0.0f);  // The step's gradient zeroing.
        Ok(ops::AdamUpdate(ec, param.view(), grad.view(), m.view(), v.view(), args));
      },
      reps);
}

// Copy bandwidth of this copy's threads (bytes read + written per second) over 64 MiB buffers,
// the rate of the step's element-wise work in the model (perf_model.h's kernel list).
double CopyBytesPerSecond(const ExecContext& ec, int reps) {
  const int64_t n = int64_t{16} << 20;
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  const double s = BestSeconds(
      [&] {
        ParallelFor(ec.pool, n, int64_t{1} << 16, [&](int64_t lo, int64_t hi) {
          std::memcpy(b.data() + lo, a.data() + lo, (hi - lo) * sizeof(float));
        });
      },
      reps);
  return 2.0 * n * sizeof(float) / s;
}

}  // namespace
}  // namespace experiments
}  // namespace mt

int main(int argc, char** argv) {
  return mt::ToolMain("step_op_bench", "Times the parts of a training step through core/ops.", argc,
                      argv, [] {
                        using namespace mt::experiments;  // NOLINT: the file's own functions.
                        mt::ThreadPool pool(FLAGS_threads);
                        mt::ExecContext ec;
                        ec.pool = &pool;
                        const int reps = std::max(1, FLAGS_reps);
                        std::printf("gemm_s: %.6f\n", GemmSeconds(ec, reps));
                        std::printf("attention_s: %.6f\n", AttentionSeconds(ec, reps));
                        std::printf("layernorm_s: %.6f\n", LayerNormSeconds(ec, reps));
                        std::printf("loss_s: %.6f\n", LossSeconds(ec, reps));
                        std::printf("optimizer_s: %.6f\n", OptimizerSeconds(ec, reps));
                        std::printf("copy_bytes_per_s: %.6g\n", CopyBytesPerSecond(ec, reps));
                        return absl::OkStatus();
                      });
}
