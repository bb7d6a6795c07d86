// GPU benchmark of the CUDA op backend: the card's device-to-device copy bandwidth and its bf16
// GEMM rate through cuBLASLt (the references), then each memory-bound op's effective bandwidth
// (bytes it must read and write / time) as a fraction of the copy bandwidth, and the GEMM shapes
// of the paper's 1.2B configuration (hidden 1536, 16 heads, seq 1024, batch 8) as a fraction of
// the square-GEMM rate. Prints one table; exits 0 with a note when there is no GPU, and 1 with
// "ops_cuda_bench: <error>" when an allocation or an op fails (e.g. a card with less memory).
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
#include "core/status.h"
#include "core/tensor.h"
#include "core/tool_main.h"
#include "gflags/gflags.h"

DEFINE_int32(iters, 20, "timed calls per op (after 3 warm-up calls)");
DEFINE_int32(gemm_size, 8192, "M = N = K of the reference bf16 GEMM");

namespace mt {
namespace {

constexpr int kWarmup = 3;

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

// The benchmark's sections, each appending its rows; the references come first, since every
// other row is a fraction of one of them. The first error (an allocation, an op) is kept in
// status(); after it nothing more is allocated or timed.
class OpsBench {
 public:
  explicit OpsBench(cuda::DeviceContext* dc) { ctx_.cuda = dc; }
  const absl::Status& status() const { return status_; }

  void References();
  void ModelGemms();
  void ActivationOps();
  void SoftmaxOps();
  void FusedAttentionOps();
  void CrossEntropyOps();
  void EmbeddingOps();
  void Adam();

  const std::vector<Row>& rows() const { return rows_; }

 private:
  // Keeps the first error; whether there has been none.
  bool Ok(const absl::Status& s) {
    if (status_.ok()) status_ = s;
    return status_.ok();
  }
  // An uninitialised tensor on cuda:0 (empty after an error).
  Tensor OnGpu(Shape shape, DType dtype) {
    if (!status_.ok()) return Tensor();
    absl::StatusOr<Tensor> t = Tensor::Empty(std::move(shape), dtype, Device::Cuda(0));
    return Ok(t.status()) ? std::move(t).value() : Tensor();
  }
  // A tensor on cuda:0 filled with `value`.
  Tensor Filled(Shape shape, DType dtype, double value) {
    Tensor t = OnGpu(std::move(shape), dtype);
    if (status_.ok()) Ok(ops::Fill(ctx_, t.view(), value));
    return t;
  }
  // Seconds per call of fn, averaged over FLAGS_iters calls after kWarmup; 0 after an error.
  double TimePerCall(const std::function<absl::Status()>& fn) {
    for (int i = 0; i < kWarmup && status_.ok(); ++i) Ok(fn());
    if (!Ok(cuda::Synchronize(0))) return 0;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < FLAGS_iters && status_.ok(); ++i) Ok(fn());
    if (!Ok(cuda::Synchronize(0))) return 0;
    const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start;
    return d.count() / FLAGS_iters;
  }
  // A GEMM-bound row: `flops` per call, as a fraction of the square-GEMM rate.
  void FlopsRow(const std::string& name, double flops, const std::function<absl::Status()>& fn) {
    const double t = TimePerCall(fn);
    if (t <= 0) return;
    const double rate = flops / t / 1e12;
    rows_.push_back({name, t, rate, rate / gemm_rate_, "TF/s"});
  }
  // A memory-bound row: `bytes` read and written per call, as a fraction of the copy bandwidth.
  void BandwidthRow(const std::string& name, double bytes,
                    const std::function<absl::Status()>& fn) {
    const double t = TimePerCall(fn);
    if (t <= 0) return;
    const double bw = bytes / t / 1e9;
    rows_.push_back({name, t, bw, bw / copy_bw_, "GB/s"});
  }

  ExecContext ctx_;
  absl::Status status_;
  std::vector<Row> rows_;
  double copy_bw_ = 0;    // GB/s
  double gemm_rate_ = 0;  // TFLOP/s
};

void OpsBench::References() {
  const int64_t kCopyBytes = int64_t{1} << 30;
  {
    Tensor a = OnGpu({kCopyBytes}, DType::kU16), b = OnGpu({kCopyBytes}, DType::kU16);
    const size_t bytes = static_cast<size_t>(kCopyBytes) * 2;
    const double t = TimePerCall(
        [&] { return cuda::Memcpy(b.data(), a.data(), bytes, cuda::CopyKind::kDeviceToDevice); });
    if (t <= 0) return;
    copy_bw_ = 2.0 * bytes / t / 1e9;  // Read + write.
    rows_.push_back({"copy d2d 2 GiB (reference)", t, copy_bw_, 1.0, "GB/s"});
  }
  const int64_t n = FLAGS_gemm_size;
  Tensor a = Filled({n, n}, DType::kBF16, 0.01), b = Filled({n, n}, DType::kBF16, 0.02);
  Tensor c = OnGpu({n, n}, DType::kBF16);
  const double t = TimePerCall([&] { return ops::Gemm(ctx_, a.view(), b.view(), c.view()); });
  if (t <= 0) return;
  gemm_rate_ = 2.0 * n * n * n / t / 1e12;
  rows_.push_back({absl::StrCat("gemm bf16 ", n, "^3 (reference)"), t, gemm_rate_, 1.0, "TF/s"});
}

// The GEMMs of the 1.2B config: tokens = 8 x 1024, hidden 1536, 16 heads of 96.
void OpsBench::ModelGemms() {
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
    Tensor a = Filled({s.m, s.k}, DType::kBF16, 0.01);
    Tensor b = Filled(s.tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, DType::kBF16, 0.02);
    Tensor c = OnGpu({s.m, s.n}, DType::kBF16);
    ops::GemmOptions options;
    options.transpose_b = s.tb ? ops::Transpose::kYes : ops::Transpose::kNo;
    FlopsRow(s.name, 2.0 * s.m * s.n * s.k,
             [&] { return ops::Gemm(ctx_, a.view(), b.view(), c.view(), options); });
  }
  // Attention scores: 8 x 16 heads of [1024, 96] x [96, 1024].
  Tensor q = Filled({128, 1024, 96}, DType::kBF16, 0.01);
  Tensor k = Filled({128, 1024, 96}, DType::kBF16, 0.02);
  Tensor s = OnGpu({128, 1024, 1024}, DType::kBF16);
  ops::GemmOptions options;
  options.transpose_b = ops::Transpose::kYes;
  FlopsRow("scores 128 x [1024,96]x[96,1024]", 2.0 * 128 * 1024 * 1024 * 96,
           [&] { return ops::BatchedGemm(ctx_, q.view(), k.view(), s.view(), options); });
}

// Memory-bound ops on activations of the 1.2B config.
void OpsBench::ActivationOps() {
  const int64_t R = 8 * 1024, C = 1536;
  const double act = static_cast<double>(R) * C * 2;  // bf16 bytes of one [8192, 1536] tensor
  Tensor x = Filled({R, C}, DType::kBF16, 0.5), y = Filled({R, C}, DType::kBF16, 0.5),
         z = Filled({R, C}, DType::kBF16, 0.5);
  Tensor x4 = Filled({R, 4 * C}, DType::kBF16, 0.5), y4 = Filled({R, 4 * C}, DType::kBF16, 0.5);
  Tensor bias = Filled({C}, DType::kBF16, 0.5), bias_f32 = OnGpu({C}, DType::kF32);
  Tensor gamma = Filled({C}, DType::kF32, 1.0), beta = Filled({C}, DType::kF32, 0.0);
  Tensor dgamma = OnGpu({C}, DType::kF32), dbeta = OnGpu({C}, DType::kF32);
  Tensor mean = OnGpu({R}, DType::kF32), rstd = OnGpu({R}, DType::kF32);
  Tensor x_f32 = OnGpu({R, C}, DType::kF32);
  BandwidthRow("add bf16 [8192,1536]", 3 * act,
               [&] { return ops::Add(ctx_, x.view(), y.view(), z.view()); });
  BandwidthRow("bias add bf16 [8192,1536]", 2 * act,
               [&] { return ops::BiasAdd(ctx_, x.view(), bias.view(), y.view()); });
  BandwidthRow("gelu bf16 [8192,6144]", 8 * act,
               [&] { return ops::Gelu(ctx_, x4.view(), y4.view()); });
  BandwidthRow("gelu backward bf16 [8192,6144]", 12 * act,
               [&] { return ops::GeluBackward(ctx_, x4.view(), y4.view(), y4.view()); });
  ops::DropoutArgs drop;
  drop.p = 0.1f;
  drop.seed = 1;
  BandwidthRow("dropout bf16 [8192,1536]", 2 * act,
               [&] { return ops::Dropout(ctx_, x.view(), drop, y.view()); });
  BandwidthRow("convert bf16->f32 [8192,1536]", 3 * act,
               [&] { return ops::Convert(ctx_, x.view(), x_f32.view()); });
  BandwidthRow("bias grad bf16->f32 [8192,1536]", act,
               [&] { return ops::BiasGrad(ctx_, x.view(), bias_f32.view()); });
  BandwidthRow("layernorm bf16 [8192,1536]", 2 * act, [&] {
    return ops::LayerNorm(ctx_, x.view(), gamma.view(), beta.view(), 1e-5f, y.view(), mean.view(),
                          rstd.view());
  });
  BandwidthRow("layernorm backward bf16 [8192,1536]", 3 * act, [&] {
    return ops::LayerNormBackward(ctx_, x.view(), gamma.view(), mean.view(), rstd.view(), y.view(),
                                  z.view(), dgamma.view(), dbeta.view());
  });
  BandwidthRow("sum of squares bf16 [8192,1536]", act,
               [&] { return ops::SumOfSquares(ctx_, x.view()).status(); });
}

// Attention probabilities: 8 x 16 heads x [1024, 1024], causal.
void OpsBench::SoftmaxOps() {
  const Shape shape = {8, 16, 1024, 1024};
  const double bytes = 8.0 * 16 * 1024 * 1024 * 2;
  Tensor s = Filled(shape, DType::kBF16, 0.25), p = OnGpu(shape, DType::kBF16);
  ops::SoftmaxOptions options;
  options.scale = 0.1f;
  options.causal = ops::CausalMask::kYes;
  BandwidthRow("softmax causal bf16 [8,16,1024,1024]", 2 * bytes,
               [&] { return ops::Softmax(ctx_, s.view(), p.view(), options); });
  BandwidthRow("softmax backward bf16 [8,16,1024,1024]", 3 * bytes,
               [&] { return ops::SoftmaxBackward(ctx_, p.view(), s.view(), s.view(), 0.1f); });
}

// Fused attention on the heads of the 1.2B config: 8 x 16 heads of [1024, 96], causal, dropout
// 0.1. Rates count the products the causal mask leaves (half of each T x T product): two in the
// forward, five in the backward.
void OpsBench::FusedAttentionOps() {
  const Shape shape = {8, 16, 1024, 96};
  Tensor q = Filled(shape, DType::kBF16, 0.01), k = Filled(shape, DType::kBF16, 0.01),
         v = Filled(shape, DType::kBF16, 0.01), dout = Filled(shape, DType::kBF16, 0.01);
  Tensor out = OnGpu(shape, DType::kBF16), dq = OnGpu(shape, DType::kBF16),
         dk = OnGpu(shape, DType::kBF16), dv = OnGpu(shape, DType::kBF16);
  Tensor lse = OnGpu({8, 16, 1024}, DType::kF32);
  ops::AttentionArgs args;
  args.scale = 1.0f / std::sqrt(96.0f);
  args.causal = ops::CausalMask::kYes;
  args.dropout.p = 0.1f;
  args.dropout.seed = 1;
  const double product = 2.0 * 128 * 1024 * 1024 * 96 / 2;
  FlopsRow("fused attention causal bf16 [8,16,1024,96]", 2 * product, [&] {
    return ops::FusedAttention(ctx_, q.view(), k.view(), v.view(), args, out.view(), lse.view());
  });
  FlopsRow("fused attention backward bf16 [8,16,1024,96]", 5 * product, [&] {
    return ops::FusedAttentionBackward(ctx_, q.view(), k.view(), v.view(), out.view(), dout.view(),
                                       lse.view(), args, dq.view(), dk.view(), dv.view());
  });
}

// Logits of GPT-2's padded vocabulary for 8 x 1024 tokens.
void OpsBench::CrossEntropyOps() {
  const int64_t N = 8 * 1024, V = 50304;
  const double bytes = static_cast<double>(N) * V * 2;
  Tensor logits = Filled({N, V}, DType::kBF16, 0.5), dlogits = OnGpu({N, V}, DType::kBF16);
  Tensor losses = OnGpu({N}, DType::kF32), dl = Filled({N}, DType::kF32, 1.0 / N);
  Tensor targets = Filled({N}, DType::kI32, 17);
  BandwidthRow("cross entropy bf16 [8192,50304]", bytes, [&] {
    return ops::CrossEntropy(ctx_, logits.view(), targets.view(), losses.view());
  });
  BandwidthRow("cross entropy backward bf16 [8192,50304]", 2 * bytes, [&] {
    return ops::CrossEntropyBackward(ctx_, logits.view(), targets.view(), dl.view(),
                                     dlogits.view());
  });
}

// Token embedding of GPT-2 (50304 x 1536, bf16) for 8 x 1024 random tokens.
void OpsBench::EmbeddingOps() {
  const int64_t N = 8 * 1024, V = 50304, C = 1536;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> host(N);
  for (int32_t& id : host) id = dist(rng);
  Tensor ids = OnGpu({N}, DType::kI32);
  if (status_.ok()) Ok(cuda::Memcpy(ids.data(), host.data(), N * 4, cuda::CopyKind::kHostToDevice));
  Tensor table = Filled({V, C}, DType::kBF16, 0.5), out = Filled({N, C}, DType::kBF16, 0.5);
  const double rows_bytes = static_cast<double>(N) * C * 2;
  BandwidthRow("embedding bf16 8192 x [50304,1536]", 2 * rows_bytes,
               [&] { return ops::Embedding(ctx_, ids.view(), table.view(), out.view()); });
  BandwidthRow("embedding backward bf16 8192 x [50304,1536]", 3 * rows_bytes,
               [&] { return ops::EmbeddingBackward(ctx_, ids.view(), out.view(), table.view()); });
}

// Adam over 100M f32 master weights: reads p, g, m, v and writes p, m, v.
void OpsBench::Adam() {
  const int64_t n = 100 * 1000 * 1000;
  Tensor p = Filled({n}, DType::kF32, 0.001), g = Filled({n}, DType::kF32, 0.001),
         m = Filled({n}, DType::kF32, 0.001), v = Filled({n}, DType::kF32, 0.001);
  ops::AdamArgs args;
  BandwidthRow("adam f32 100M params", 7.0 * n * 4,
               [&] { return ops::AdamUpdate(ctx_, p.view(), g.view(), m.view(), v.view(), args); });
}

absl::Status Run() {
  if (FLAGS_iters < 1 || FLAGS_gemm_size < 1) {
    return absl::InvalidArgumentError("--iters and --gemm_size must be >= 1");
  }
  if (cuda::DeviceCount() == 0) {
    std::printf("ops_cuda_bench: skipped (%s)\n", cuda::Describe().c_str());
    return absl::OkStatus();
  }
  std::printf("ops_cuda_bench on %s, %d timed calls per op\n", cuda::Describe().c_str(),
              FLAGS_iters);
  ASSIGN_OR_RETURN(const std::unique_ptr<cuda::DeviceContext> dc, cuda::DeviceContext::Create(0));
  OpsBench bench(dc.get());
  bench.References();
  bench.ModelGemms();
  bench.ActivationOps();
  bench.SoftmaxOps();
  bench.FusedAttentionOps();
  bench.CrossEntropyOps();
  bench.EmbeddingOps();
  bench.Adam();
  RETURN_IF_ERROR(bench.status());
  Print(bench.rows());
  return absl::OkStatus();
}

}  // namespace
}  // namespace mt

int main(int argc, char** argv) {
  return mt::ToolMain("ops_cuda_bench",
                      "[--iters=N --gemm_size=N]\nEach CUDA op's rate against the card's copy "
                      "bandwidth or square-GEMM rate.",
                      argc, argv, mt::Run);
}
