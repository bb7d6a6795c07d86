// GPU benchmark of the CUDA op backend: the card's device-to-device copy bandwidth and its bf16
// GEMM rate through cuBLASLt (the references), then each memory-bound op's effective bandwidth
// (bytes it must read and write / time) as a fraction of the copy bandwidth, and the GEMM shapes
// of the paper's 1.2B configuration (hidden 1536, 16 heads, seq 1024, batch 8) as a fraction of
// the square-GEMM rate. Prints one table; exits 0 with a note when there is no GPU.
//
//   bazel run //core/ops:ops_cuda_bench -- --iters=20
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda/device_context.h"
#include "core/cuda_device.h"
#include "core/exec_context.h"
#include "core/ops/adam.h"
#include "core/ops/attention.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/gemm.h"
#include "core/ops/layernorm.h"
#include "core/ops/reduce.h"
#include "core/ops/softmax.h"
#include "core/tensor.h"
#include "gflags/gflags.h"
#include "glog/logging.h"

DEFINE_int32(iters, 20, "timed calls per op (after 3 warm-up calls)");
DEFINE_int32(gemm_size, 8192, "M = N = K of the reference bf16 GEMM");

namespace mt {
namespace {

constexpr int kWarmup = 3;

void Ok(const absl::Status& s) { CHECK(s.ok()) << s; }

Tensor OnGpu(Shape shape, DType dtype) {
  absl::StatusOr<Tensor> t = Tensor::Empty(std::move(shape), dtype, Device::Cuda(0));
  CHECK(t.ok()) << t.status();
  return std::move(t).value();
}

// Seconds per call of fn (which must succeed), averaged over FLAGS_iters calls.
double TimePerCall(const std::function<absl::Status()>& fn) {
  for (int i = 0; i < kWarmup; ++i) Ok(fn());
  Ok(cuda::Synchronize(0));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < FLAGS_iters; ++i) Ok(fn());
  Ok(cuda::Synchronize(0));
  const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start;
  return d.count() / FLAGS_iters;
}

struct Row {
  std::string name;
  double seconds;
  double rate;      // GB/s or TFLOP/s
  double fraction;  // of the reference
  const char* unit;
};

void Print(const std::vector<Row>& rows) {
  std::printf("%-44s %12s %14s %10s\n", "op", "us/call", "rate", "of ref");
  for (const Row& r : rows) {
    std::printf("%-44s %12.1f %10.1f %-4s %9.1f%%\n", r.name.c_str(), r.seconds * 1e6, r.rate,
                r.unit, 100.0 * r.fraction);
  }
}

int Run() {
  if (cuda::DeviceCount() == 0) {
    std::printf("ops_cuda_bench: skipped (%s)\n", cuda::Describe().c_str());
    return 0;
  }
  std::printf("ops_cuda_bench on %s, %d timed calls per op\n", cuda::Describe().c_str(),
              FLAGS_iters);
  absl::StatusOr<std::unique_ptr<cuda::DeviceContext>> dc = cuda::DeviceContext::Create(0);
  CHECK(dc.ok()) << dc.status();
  ExecContext ctx;
  ctx.cuda = dc->get();
  std::vector<Row> rows;

  // ---- References ----
  const int64_t kCopyBytes = int64_t{1} << 30;
  double copy_bw = 0;
  {
    Tensor a = OnGpu({kCopyBytes}, DType::kU16), b = OnGpu({kCopyBytes}, DType::kU16);
    const size_t bytes = static_cast<size_t>(kCopyBytes) * 2;
    const double t = TimePerCall([&] {
      return cuda::Memcpy(b.data(), a.data(), bytes, cuda::CopyKind::kDeviceToDevice);
    });
    copy_bw = 2.0 * bytes / t / 1e9;  // Read + write.
    rows.push_back({"copy d2d 2 GiB (reference)", t, copy_bw, 1.0, "GB/s"});
  }
  double gemm_rate = 0;
  {
    const int64_t n = FLAGS_gemm_size;
    Tensor a = OnGpu({n, n}, DType::kBF16), b = OnGpu({n, n}, DType::kBF16),
           c = OnGpu({n, n}, DType::kBF16);
    Ok(ops::Fill(ctx, a.view(), 0.01));
    Ok(ops::Fill(ctx, b.view(), 0.02));
    const double t = TimePerCall([&] { return ops::Gemm(ctx, a.view(), b.view(), c.view()); });
    gemm_rate = 2.0 * n * n * n / t / 1e12;
    rows.push_back({absl::StrCat("gemm bf16 ", n, "^3 (reference)"), t, gemm_rate, 1.0, "TF/s"});
  }

  // ---- GEMMs of the 1.2B config: tokens = 8 x 1024, hidden 1536, 16 heads of 96 ----
  {
    const int64_t T = 8 * 1024, H = 1536;
    struct Shape3 {
      const char* name;
      int64_t m, n, k;
      bool tb;
    };
    const Shape3 shapes[] = {{"qkv fwd [8192,1536]x[1536,4608]", T, 3 * H, H, false},
                             {"proj fwd [8192,1536]x[1536,1536]", T, H, H, false},
                             {"fc1 fwd [8192,1536]x[1536,6144]", T, 4 * H, H, false},
                             {"fc2 fwd [8192,6144]x[6144,1536]", T, H, 4 * H, false},
                             {"fc1 dgrad [8192,6144]x[1536,6144]^T", T, H, 4 * H, true}};
    for (const Shape3& s : shapes) {
      Tensor a = OnGpu({s.m, s.k}, DType::kBF16);
      Tensor b = OnGpu(s.tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, DType::kBF16);
      Tensor c = OnGpu({s.m, s.n}, DType::kBF16);
      Ok(ops::Fill(ctx, a.view(), 0.01));
      Ok(ops::Fill(ctx, b.view(), 0.02));
      ops::GemmOptions options;
      options.transpose_b = s.tb ? ops::Transpose::kYes : ops::Transpose::kNo;
      const double t =
          TimePerCall([&] { return ops::Gemm(ctx, a.view(), b.view(), c.view(), options); });
      const double rate = 2.0 * s.m * s.n * s.k / t / 1e12;
      rows.push_back({s.name, t, rate, rate / gemm_rate, "TF/s"});
    }
    // Attention scores: 8 x 16 heads of [1024, 96] x [96, 1024].
    Tensor q = OnGpu({128, 1024, 96}, DType::kBF16), k = OnGpu({128, 1024, 96}, DType::kBF16);
    Tensor s = OnGpu({128, 1024, 1024}, DType::kBF16);
    Ok(ops::Fill(ctx, q.view(), 0.01));
    Ok(ops::Fill(ctx, k.view(), 0.02));
    ops::GemmOptions options;
    options.transpose_b = ops::Transpose::kYes;
    const double t = TimePerCall(
        [&] { return ops::BatchedGemm(ctx, q.view(), k.view(), s.view(), options); });
    const double rate = 2.0 * 128 * 1024 * 1024 * 96 / t / 1e12;
    rows.push_back({"scores 128 x [1024,96]x[96,1024]", t, rate, rate / gemm_rate, "TF/s"});
  }

  // ---- Memory-bound ops on activations of the 1.2B config ----
  auto bandwidth_row = [&](const std::string& name, double bytes,
                           const std::function<absl::Status()>& fn) {
    const double t = TimePerCall(fn);
    const double bw = bytes / t / 1e9;
    rows.push_back({name, t, bw, bw / copy_bw, "GB/s"});
  };
  {
    const int64_t R = 8 * 1024, C = 1536;
    const double act = static_cast<double>(R) * C * 2;  // bf16 bytes of one [8192, 1536] tensor
    Tensor x = OnGpu({R, C}, DType::kBF16), y = OnGpu({R, C}, DType::kBF16),
           z = OnGpu({R, C}, DType::kBF16);
    Tensor x4 = OnGpu({R, 4 * C}, DType::kBF16), y4 = OnGpu({R, 4 * C}, DType::kBF16);
    Tensor bias = OnGpu({C}, DType::kBF16), bias_f32 = OnGpu({C}, DType::kF32);
    Tensor gamma = OnGpu({C}, DType::kF32), beta = OnGpu({C}, DType::kF32);
    Tensor dgamma = OnGpu({C}, DType::kF32), dbeta = OnGpu({C}, DType::kF32);
    Tensor mean = OnGpu({R}, DType::kF32), rstd = OnGpu({R}, DType::kF32);
    Tensor x_f32 = OnGpu({R, C}, DType::kF32);
    for (const Tensor* t : {&x, &y, &z, &x4, &y4, &bias}) Ok(ops::Fill(ctx, t->view(), 0.5));
    Ok(ops::Fill(ctx, gamma.view(), 1.0));
    Ok(ops::Fill(ctx, beta.view(), 0.0));
    bandwidth_row("add bf16 [8192,1536]", 3 * act,
                  [&] { return ops::Add(ctx, x.view(), y.view(), z.view()); });
    bandwidth_row("bias add bf16 [8192,1536]", 2 * act,
                  [&] { return ops::BiasAdd(ctx, x.view(), bias.view(), y.view()); });
    bandwidth_row("gelu bf16 [8192,6144]", 8 * act,
                  [&] { return ops::Gelu(ctx, x4.view(), y4.view()); });
    bandwidth_row("gelu backward bf16 [8192,6144]", 12 * act,
                  [&] { return ops::GeluBackward(ctx, x4.view(), y4.view(), y4.view()); });
    ops::DropoutArgs drop;
    drop.p = 0.1f;
    drop.seed = 1;
    bandwidth_row("dropout bf16 [8192,1536]", 2 * act,
                  [&] { return ops::Dropout(ctx, x.view(), drop, y.view()); });
    bandwidth_row("convert bf16->f32 [8192,1536]", 3 * act,
                  [&] { return ops::Convert(ctx, x.view(), x_f32.view()); });
    bandwidth_row("bias grad bf16->f32 [8192,1536]", act,
                  [&] { return ops::BiasGrad(ctx, x.view(), bias_f32.view()); });
    bandwidth_row("layernorm bf16 [8192,1536]", 2 * act, [&] {
      return ops::LayerNorm(ctx, x.view(), gamma.view(), beta.view(), 1e-5f, y.view(),
                            mean.view(), rstd.view());
    });
    bandwidth_row("layernorm backward bf16 [8192,1536]", 3 * act, [&] {
      return ops::LayerNormBackward(ctx, x.view(), gamma.view(), mean.view(), rstd.view(),
                                    y.view(), z.view(), dgamma.view(), dbeta.view());
    });
    bandwidth_row("sum of squares bf16 [8192,1536]", act,
                  [&] { return ops::SumOfSquares(ctx, x.view()).status(); });
  }
  {
    // Attention probabilities: 8 x 16 heads x [1024, 1024], causal.
    const Shape shape = {8, 16, 1024, 1024};
    const double bytes = 8.0 * 16 * 1024 * 1024 * 2;
    Tensor s = OnGpu(shape, DType::kBF16), p = OnGpu(shape, DType::kBF16);
    Ok(ops::Fill(ctx, s.view(), 0.25));
    ops::SoftmaxOptions options;
    options.scale = 0.1f;
    options.causal = ops::CausalMask::kYes;
    bandwidth_row("softmax causal bf16 [8,16,1024,1024]", 2 * bytes,
                  [&] { return ops::Softmax(ctx, s.view(), p.view(), options); });
    bandwidth_row("softmax backward bf16 [8,16,1024,1024]", 3 * bytes,
                  [&] { return ops::SoftmaxBackward(ctx, p.view(), s.view(), s.view(), 0.1f); });
  }
  {
    // Fused attention on the heads of the 1.2B config: 8 x 16 heads of [1024, 96], causal,
    // dropout 0.1. Rates count the products the causal mask leaves (half of each T x T product):
    // two in the forward, five in the backward.
    const Shape shape = {8, 16, 1024, 96};
    Tensor q = OnGpu(shape, DType::kBF16), k = OnGpu(shape, DType::kBF16),
           v = OnGpu(shape, DType::kBF16), out = OnGpu(shape, DType::kBF16),
           dout = OnGpu(shape, DType::kBF16), dq = OnGpu(shape, DType::kBF16),
           dk = OnGpu(shape, DType::kBF16), dv = OnGpu(shape, DType::kBF16);
    Tensor lse = OnGpu({8, 16, 1024}, DType::kF32);
    for (const Tensor* t : {&q, &k, &v, &dout}) Ok(ops::Fill(ctx, t->view(), 0.01));
    ops::AttentionArgs args;
    args.scale = 1.0f / std::sqrt(96.0f);
    args.causal = ops::CausalMask::kYes;
    args.dropout.p = 0.1f;
    args.dropout.seed = 1;
    const double product = 2.0 * 128 * 1024 * 1024 * 96 / 2;
    double t = TimePerCall([&] {
      return ops::FusedAttention(ctx, q.view(), k.view(), v.view(), args, out.view(), lse.view());
    });
    rows.push_back({"fused attention causal bf16 [8,16,1024,96]", t, 2 * product / t / 1e12,
                    2 * product / t / 1e12 / gemm_rate, "TF/s"});
    t = TimePerCall([&] {
      return ops::FusedAttentionBackward(ctx, q.view(), k.view(), v.view(), out.view(),
                                         dout.view(), lse.view(), args, dq.view(), dk.view(),
                                         dv.view());
    });
    rows.push_back({"fused attention backward bf16 [8,16,1024,96]", t, 5 * product / t / 1e12,
                    5 * product / t / 1e12 / gemm_rate, "TF/s"});
  }
  {
    // Logits of GPT-2's padded vocabulary for 8 x 1024 tokens.
    const int64_t N = 8 * 1024, V = 50304;
    const double bytes = static_cast<double>(N) * V * 2;
    Tensor logits = OnGpu({N, V}, DType::kBF16), dlogits = OnGpu({N, V}, DType::kBF16);
    Tensor losses = OnGpu({N}, DType::kF32), dl = OnGpu({N}, DType::kF32);
    Tensor targets = OnGpu({N}, DType::kI32);
    Ok(ops::Fill(ctx, logits.view(), 0.5));
    Ok(ops::Fill(ctx, dl.view(), 1.0 / N));
    Ok(ops::Fill(ctx, targets.view(), 17));
    bandwidth_row("cross entropy bf16 [8192,50304]", bytes, [&] {
      return ops::CrossEntropy(ctx, logits.view(), targets.view(), losses.view());
    });
    bandwidth_row("cross entropy backward bf16 [8192,50304]", 2 * bytes, [&] {
      return ops::CrossEntropyBackward(ctx, logits.view(), targets.view(), dl.view(),
                                       dlogits.view());
    });
  }
  {
    // Token embedding of GPT-2 (50304 x 1536, bf16) for 8 x 1024 random tokens.
    const int64_t N = 8 * 1024, V = 50304, C = 1536;
    std::mt19937 rng(1);
    std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(V - 1));
    std::vector<int32_t> host(N);
    for (int32_t& id : host) id = dist(rng);
    Tensor ids = OnGpu({N}, DType::kI32);
    Ok(cuda::Memcpy(ids.data(), host.data(), N * 4, cuda::CopyKind::kHostToDevice));
    Tensor table = OnGpu({V, C}, DType::kBF16), out = OnGpu({N, C}, DType::kBF16);
    Ok(ops::Fill(ctx, table.view(), 0.5));
    Ok(ops::Fill(ctx, out.view(), 0.5));
    const double rows_bytes = static_cast<double>(N) * C * 2;
    bandwidth_row("embedding bf16 8192 x [50304,1536]", 2 * rows_bytes, [&] {
      return ops::Embedding(ctx, ids.view(), table.view(), out.view());
    });
    bandwidth_row("embedding backward bf16 8192 x [50304,1536]", 3 * rows_bytes, [&] {
      return ops::EmbeddingBackward(ctx, ids.view(), out.view(), table.view());
    });
  }
  {
    // Adam over 100M f32 master weights: reads p, g, m, v and writes p, m, v.
    const int64_t n = 100 * 1000 * 1000;
    Tensor p = OnGpu({n}, DType::kF32), g = OnGpu({n}, DType::kF32), m = OnGpu({n}, DType::kF32),
           v = OnGpu({n}, DType::kF32);
    for (const Tensor* t : {&p, &g, &m, &v}) Ok(ops::Fill(ctx, t->view(), 0.001));
    ops::AdamArgs args;
    bandwidth_row("adam f32 100M params", 7.0 * n * 4,
                  [&] {
                    return ops::AdamUpdate(ctx, p.view(), g.view(), m.view(), v.view(), args);
                  });
  }
  Print(rows);
  return 0;
}

}  // namespace
}  // namespace mt

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  return mt::Run();
}
