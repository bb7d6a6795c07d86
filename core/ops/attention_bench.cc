// CPU benchmark: the fused attention op (core/ops/attention.h) against the unfused chain that
// nn/attention.cc runs (BatchedGemm + Softmax + Dropout + BatchedGemm, and its backward), forward
// and backward, on one head shape. Prints the best milliseconds per call and the bytes of [T, T]
// buffers the unfused chain needs; with --query_groups=G, the fused op with G key/value heads too.
//
//   bazel run //core/ops:attention_bench -- --batch=2 --heads=8 --seq=512 --head_dim=64
//   bazel run //core/ops:attention_bench -- --heads=8 --query_groups=2
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/exec_context.h"
#include "core/ops/attention.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/ops/softmax.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "core/tool_main.h"
#include "gflags/gflags.h"

DEFINE_int32(batch, 2, "B");
DEFINE_int32(heads, 8, "NH");
DEFINE_int32(seq, 512, "T (queries = keys)");
DEFINE_int32(head_dim, 64, "D");
DEFINE_int32(threads, 0, "CPU threads (0: all cores)");
DEFINE_int32(iters, 5, "timed calls (after one warm-up call); the fastest is reported");
DEFINE_double(dropout, 0.1, "attention dropout probability");
DEFINE_bool(causal, true, "causal mask");
DEFINE_string(dtype, "f32", "f32, bf16 or f16");
DEFINE_int32(query_groups, 0,
             "also time the fused op with this many key/value heads (grouped-query attention; "
             "divides --heads; 0: not)");

namespace mt {
namespace {

absl::StatusOr<Tensor> Random(Shape shape, DType dtype, uint32_t seed) {
  Tensor f = Tensor::Host(shape, DType::kF32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  float* p = f.data_as<float>();
  for (int64_t i = 0; i < f.numel(); ++i) p[i] = dist(rng);
  if (dtype == DType::kF32) return f;
  Tensor t = Tensor::Host(shape, dtype);
  RETURN_IF_ERROR(ops::Convert(ExecContext{}, f.view(), t.view()));
  return t;
}

// Milliseconds of the fastest of FLAGS_iters calls of fn (the least disturbed by other load on
// the machine) after a warm-up call; fn's first error.
absl::StatusOr<double> TimeMs(const std::function<absl::Status()>& fn) {
  RETURN_IF_ERROR(fn());
  double best = 1e300;
  for (int i = 0; i < FLAGS_iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(fn());
    const std::chrono::duration<double, std::milli> d = std::chrono::steady_clock::now() - start;
    best = std::min(best, d.count());
  }
  return best;
}

// The --dtype, after checking every flag.
absl::StatusOr<DType> CheckFlags() {
  const absl::StatusOr<DType> dt = ParseDType(FLAGS_dtype);
  if (!dt.ok() || !IsFloating(*dt)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype=", FLAGS_dtype, ": must be one of f32, bf16, f16"));
  }
  if (FLAGS_batch < 1 || FLAGS_heads < 1 || FLAGS_seq < 1 || FLAGS_head_dim < 1 ||
      FLAGS_iters < 1) {
    return absl::InvalidArgumentError(
        "--batch, --heads, --seq, --head_dim and --iters must be >= 1");
  }
  if (FLAGS_query_groups < 0 || (FLAGS_query_groups > 0 && FLAGS_heads % FLAGS_query_groups != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("--query_groups=", FLAGS_query_groups,
                                                   ": must divide --heads=", FLAGS_heads,
                                                   " (0: no grouped timing)"));
  }
  return *dt;
}

// The fused op with --query_groups key/value heads (k, v [B, G, T, D]) against the multi-head
// times, forward and backward.
absl::Status TimeGrouped(const ExecContext& ctx, DType dt, const ops::AttentionArgs& args,
                         const Tensor& q, const Tensor& dout, double mha_fwd, double mha_bwd) {
  const int64_t B = FLAGS_batch, NH = FLAGS_heads, G = FLAGS_query_groups, T = FLAGS_seq,
                D = FLAGS_head_dim;
  ASSIGN_OR_RETURN(const Tensor k, Random({B, G, T, D}, dt, 5));
  ASSIGN_OR_RETURN(const Tensor v, Random({B, G, T, D}, dt, 6));
  Tensor out = Tensor::Host({B, NH, T, D}, dt), lse = Tensor::Host({B, NH, T}, DType::kF32);
  Tensor dq = Tensor::Host({B, NH, T, D}, dt), dk = Tensor::Host({B, G, T, D}, dt),
         dv = Tensor::Host({B, G, T, D}, dt);
  ASSIGN_OR_RETURN(const double fwd, TimeMs([&] {
                     return ops::FusedAttention(ctx, q.view(), k.view(), v.view(), args, out.view(),
                                                lse.view());
                   }));
  ASSIGN_OR_RETURN(const double bwd, TimeMs([&] {
                     return ops::FusedAttentionBackward(ctx, q.view(), k.view(), v.view(),
                                                        out.view(), dout.view(), lse.view(), args,
                                                        dq.view(), dk.view(), dv.view());
                   }));
  std::printf("%-10s %12s %12s %8s  (G=%lld key/value heads, k and v %.1f MiB instead of %.1f)\n",
              "", "fused GQA", "fused MHA", "ratio", static_cast<long long>(G),
              2.0 * k.nbytes() / (1 << 20), 2.0 * k.nbytes() * NH / G / (1 << 20));
  std::printf("%-10s %12.2f %12.2f %8.2f\n", "forward", fwd, mha_fwd, mha_fwd / fwd);
  std::printf("%-10s %12.2f %12.2f %8.2f\n", "backward", bwd, mha_bwd, mha_bwd / bwd);
  return absl::OkStatus();
}

absl::Status Run() {
  ASSIGN_OR_RETURN(const DType dt, CheckFlags());
  const int64_t B = FLAGS_batch, NH = FLAGS_heads, T = FLAGS_seq, D = FLAGS_head_dim;
  const int64_t Bt = B * NH;
  ThreadPool pool(FLAGS_threads);
  ExecContext ctx;
  ctx.pool = &pool;
  std::printf("attention_bench: B=%lld NH=%lld T=%lld D=%lld %s causal=%d dropout=%g threads=%d\n",
              static_cast<long long>(B), static_cast<long long>(NH), static_cast<long long>(T),
              static_cast<long long>(D), FLAGS_dtype.c_str(), FLAGS_causal ? 1 : 0, FLAGS_dropout,
              ctx.num_threads());

  ASSIGN_OR_RETURN(const Tensor q, Random({B, NH, T, D}, dt, 1));
  ASSIGN_OR_RETURN(const Tensor k, Random({B, NH, T, D}, dt, 2));
  ASSIGN_OR_RETURN(const Tensor v, Random({B, NH, T, D}, dt, 3));
  ASSIGN_OR_RETURN(const Tensor dout, Random({B, NH, T, D}, dt, 4));
  Tensor out = Tensor::Host({B, NH, T, D}, dt), lse = Tensor::Host({B, NH, T}, DType::kF32);
  Tensor dq = Tensor::Host({B, NH, T, D}, dt), dk = Tensor::Host({B, NH, T, D}, dt),
         dv = Tensor::Host({B, NH, T, D}, dt);
  ops::AttentionArgs args;
  args.scale = 1.0f / std::sqrt(static_cast<float>(D));
  args.causal = FLAGS_causal ? ops::CausalMask::kYes : ops::CausalMask::kNo;
  args.dropout.p = static_cast<float>(FLAGS_dropout);
  args.dropout.seed = 42;

  // Unfused buffers: scores/probs, dropped probs, their gradient ([B, NH, T, T] each).
  const Shape tt = {B, NH, T, T};
  Tensor probs = Tensor::Host(tt, dt), dropped = Tensor::Host(tt, dt),
         dprobs = Tensor::Host(tt, dt);
  auto as3 = [&](const Tensor& t, int64_t rows, int64_t cols) {
    return TensorView(t.data(), {Bt, rows, cols}, t.dtype());
  };
  ops::GemmOptions nt, tn;
  nt.transpose_b = ops::Transpose::kYes;
  tn.transpose_a = ops::Transpose::kYes;
  ops::SoftmaxOptions so;
  so.scale = args.scale;
  so.causal = args.causal;

  ASSIGN_OR_RETURN(const double fused_fwd, TimeMs([&] {
                     return ops::FusedAttention(ctx, q.view(), k.view(), v.view(), args, out.view(),
                                                lse.view());
                   }));
  ASSIGN_OR_RETURN(const double fused_bwd, TimeMs([&] {
                     return ops::FusedAttentionBackward(ctx, q.view(), k.view(), v.view(),
                                                        out.view(), dout.view(), lse.view(), args,
                                                        dq.view(), dk.view(), dv.view());
                   }));
  ASSIGN_OR_RETURN(
      const double unfused_fwd, TimeMs([&]() -> absl::Status {
        RETURN_IF_ERROR(ops::BatchedGemm(ctx, as3(q, T, D), as3(k, T, D), as3(probs, T, T), nt));
        RETURN_IF_ERROR(ops::Softmax(ctx, probs.view(), probs.view(), so));
        RETURN_IF_ERROR(ops::Dropout(ctx, probs.view(), args.dropout, dropped.view()));
        return ops::BatchedGemm(ctx, as3(dropped, T, T), as3(v, T, D), as3(out, T, D));
      }));
  ASSIGN_OR_RETURN(
      const double unfused_bwd, TimeMs([&]() -> absl::Status {
        RETURN_IF_ERROR(
            ops::BatchedGemm(ctx, as3(dout, T, D), as3(v, T, D), as3(dprobs, T, T), nt));
        RETURN_IF_ERROR(
            ops::BatchedGemm(ctx, as3(dropped, T, T), as3(dout, T, D), as3(dv, T, D), tn));
        RETURN_IF_ERROR(ops::DropoutBackward(ctx, dprobs.view(), args.dropout, dprobs.view()));
        RETURN_IF_ERROR(
            ops::SoftmaxBackward(ctx, probs.view(), dprobs.view(), dprobs.view(), args.scale));
        RETURN_IF_ERROR(ops::BatchedGemm(ctx, as3(dprobs, T, T), as3(k, T, D), as3(dq, T, D)));
        return ops::BatchedGemm(ctx, as3(dprobs, T, T), as3(q, T, D), as3(dk, T, D), tn);
      }));
  std::printf("%-10s %12s %12s %8s\n", "", "fused ms", "unfused ms", "ratio");
  std::printf("%-10s %12.2f %12.2f %8.2f\n", "forward", fused_fwd, unfused_fwd,
              unfused_fwd / fused_fwd);
  std::printf("%-10s %12.2f %12.2f %8.2f\n", "backward", fused_bwd, unfused_bwd,
              unfused_bwd / fused_bwd);
  std::printf("[T, T] buffers of the unfused chain: %.1f MiB (fused: lse %.3f MiB)\n",
              3.0 * probs.nbytes() / (1 << 20), lse.nbytes() / double(1 << 20));
  if (FLAGS_query_groups == 0) return absl::OkStatus();
  return TimeGrouped(ctx, dt, args, q, dout, fused_fwd, fused_bwd);
}

}  // namespace
}  // namespace mt

int main(int argc, char** argv) {
  return mt::ToolMain("attention_bench",
                      "[--batch=B --heads=NH --seq=T --head_dim=D --dtype=f32|bf16|f16 "
                      "--causal --dropout=P --threads=N --iters=N --query_groups=G]\nTimes the "
                      "fused attention op against the unfused chain (and with G key/value heads).",
                      argc, argv, mt::Run);
}
