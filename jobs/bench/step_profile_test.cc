#include "jobs/bench/step_profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/ops/gemm.h"
#include "core/ops/layernorm.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace mt {
namespace jobs {
namespace {

TEST(StepProfileTest, StripsArgumentsAndTemplateArguments) {
  EXPECT_EQ(StripSignature("mt::ops::Gemm(mt::ExecContext const&, mt::TensorView const&)"),
            "mt::ops::Gemm");
  EXPECT_EQ(StripSignature("void mt::ops::(anonymous namespace)::GemmCpu<float>(mt::ExecContext "
                           "const&, mt::ops::(anonymous namespace)::GemmShape const&)"),
            "void mt::ops::(anonymous namespace)::GemmCpu");
  EXPECT_EQ(StripSignature("mt::ops::(anonymous namespace)::Norm<float>(mt::comm::X*)::{lambda("
                           "long, long)#1}::operator()(long, long) const"),
            "mt::ops::(anonymous namespace)::Norm::{lambda#1}::operator const");
  EXPECT_EQ(StripSignature("std::_Function_handler<void (long, long), mt::comm::Y>::_M_invoke("
                           "std::_Any_data const&)"),
            "std::_Function_handler::_M_invoke");
  EXPECT_EQ(StripSignature(""), "");
}

std::vector<StackFrame> Stack(std::vector<std::string> innermost_first,
                              std::string innermost_object = "(executable)") {
  std::vector<StackFrame> frames;
  for (std::string& f : innermost_first) frames.push_back({std::move(f), "(executable)"});
  if (!frames.empty()) frames[0].object = std::move(innermost_object);
  return frames;
}

TEST(StepProfileTest, ClassifiesByTheOpTheModelCalled) {
  const std::string linear = "mt::nn::ColumnParallelLinear::Forward(mt::nn::StepContext const&)";
  // The public op may be a tail call away: its helper names the class.
  EXPECT_EQ(ClassifyStack(
                Stack({"", "mt::ops::(anonymous namespace)::Run(char const*, int)", linear, "main"},
                      "/usr/lib/x86_64-linux-gnu/libopenblas.so.0")),
            OpClass::kGemm);
  EXPECT_EQ(ClassifyStack(Stack({"mt::ops::(anonymous namespace)::ApplyEpilogue<float>()::{lambda("
                                 "long, long)#1}::operator()(long, long) const",
                                 "mt::ops::(anonymous namespace)::Run(char const*)", linear})),
            OpClass::kGemm);
  // The outermost op decides: an op inside attention is attention.
  EXPECT_EQ(ClassifyStack(Stack({"mt::ops::Gemm(mt::ExecContext const&)",
                                 "mt::ops::FusedAttention(mt::ExecContext const&)", "main"})),
            OpClass::kAttention);
  EXPECT_EQ(ClassifyStack(Stack({"mt::ops::MergeHeads(mt::ExecContext const&)"})),
            OpClass::kAttention);
  EXPECT_EQ(ClassifyStack(Stack({"expf",
                                 "mt::ops::(anonymous namespace)::Rows<float>()::{lambda("
                                 "long, long)#1}::operator()(long, long) const",
                                 "mt::ops::LayerNormBackward(mt::ExecContext const&)"})),
            OpClass::kLayerNorm);
  EXPECT_EQ(ClassifyStack(Stack({"mt::ops::CrossEntropyBackward(mt::ExecContext const&)"})),
            OpClass::kLoss);
  EXPECT_EQ(ClassifyStack(Stack({"mt::ops::ShardedRowMax(mt::ExecContext const&)"})),
            OpClass::kLoss);
  EXPECT_EQ(ClassifyStack(Stack({"mt::ops::BiasDropoutAdd(mt::ExecContext const&)", linear})),
            OpClass::kElementwise);
  EXPECT_EQ(ClassifyStack(Stack({"mt::ops::Embedding(mt::ExecContext const&)"})),
            OpClass::kElementwise);
  // The optimizer: its ops, its own code, and zeroing the gradients.
  EXPECT_EQ(ClassifyStack(Stack({"mt::ops::AdamUpdate(mt::ExecContext const&)",
                                 "mt::train::Optimizer::Step(mt::ExecContext const&)"})),
            OpClass::kOptimizer);
  EXPECT_EQ(ClassifyStack(Stack({"mt::ops::L2Norm(mt::ExecContext const&)"})), OpClass::kOptimizer);
  EXPECT_EQ(ClassifyStack(Stack({"memset",
                                 "mt::nn::ParameterStore::ZeroGrads(mt::ExecContext "
                                 "const&)"})),
            OpClass::kOptimizer);
  EXPECT_EQ(ClassifyStack(Stack({"mt::train::Optimizer::Step(mt::ExecContext const&, "
                                 "mt::comm::Communicator*)"})),
            OpClass::kOptimizer);  // mt::comm:: only in the arguments.
  // Communication wins over everything (a gradient all-reduce started in backward).
  EXPECT_EQ(ClassifyStack(Stack({"", "mt::comm::MpiCommunicator::AllReduce(mt::TensorView const&)",
                                 "mt::ops::Gemm(mt::ExecContext const&)"},
                                "/usr/lib/x86_64-linux-gnu/libmpi.so.40")),
            OpClass::kCommunication);
  // The start-up below every stack of an MPI program's main thread is not communication.
  const std::string start_up = "mt::comm::MpiMain(int, char**, mt::comm::MainInfo const&)";
  EXPECT_EQ(ClassifyStack(Stack({"mt::ops::Gemm(mt::ExecContext const&)", linear,
                                 "std::_Function_handler<absl::StatusOr<int> "
                                 "(mt::comm::MpiProcess const&), X>::_M_invoke(std::_Any_data)",
                                 start_up, "main"})),
            OpClass::kGemm);
  EXPECT_EQ(ClassifyStack(Stack(
                {"malloc", linear, start_up + "::{lambda(int)#1}::operator()(int)", start_up})),
            OpClass::kOther);
  EXPECT_EQ(ClassifyStack(Stack({"", "mt::comm::MpiCommunicator::AllReduce(mt::TensorView const&)",
                                 linear, start_up})),
            OpClass::kCommunication);
  EXPECT_EQ(ClassifyStack(Stack({""},
                                "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/"
                                "mca_btl_vader.so")),
            OpClass::kCommunication);
  EXPECT_EQ(ClassifyStack(Stack({"malloc", "mt::Tensor::Host(mt::Shape, mt::DType)", linear})),
            OpClass::kOther);
  EXPECT_EQ(ClassifyStack({}), OpClass::kOther);
}

using Clock = std::chrono::steady_clock;

// Something outside every op, for the "other" class.
__attribute__((noinline)) double SpinOutsideOps(double seconds) {
  double x = 1.0;
  const Clock::time_point start = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    for (int i = 0; i < 1000; ++i) x = std::sqrt(x + 1.0);
  }
  return x;
}

// Runs `op` repeatedly for about `seconds`; returns the time it took.
template <typename Op>
double RunFor(double seconds, Op op) {
  const Clock::time_point start = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) op();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Real ops under the sampler: each class's share of the samples matches its share of the wall
// time, measured with the clock, within 0.1 (with >= 200 samples the standard error is <= 0.035).
TEST(StepProfileTest, SampledSharesMatchTheTimeSpent) {
  ThreadPool pool(1);
  ExecContext ctx;
  ctx.pool = &pool;
  const int64_t n = 192, R = 256, C = 1024;
  Tensor a = Tensor::Zeros({n, n}, DType::kF32), b = Tensor::Zeros({n, n}, DType::kF32),
         c = Tensor::Zeros({n, n}, DType::kF32);
  Tensor x = Tensor::Zeros({R, C}, DType::kF32), y = Tensor::Zeros({R, C}, DType::kF32);
  Tensor gamma = Tensor::Zeros({C}, DType::kF32), beta = Tensor::Zeros({C}, DType::kF32);
  Tensor mean = Tensor::Zeros({R}, DType::kF32), rstd = Tensor::Zeros({R}, DType::kF32);
  for (int64_t i = 0; i < n * n; ++i) a.data_as<float>()[i] = b.data_as<float>()[i] = 0.5f;
  for (int64_t i = 0; i < R * C; ++i) x.data_as<float>()[i] = static_cast<float>(i % 7);

  auto sampler = StackSampler::Create(1e-3, 100000);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  ASSERT_TRUE(StackSampler::Create(1e-3, 10).status().code() ==
              absl::StatusCode::kFailedPrecondition);  // One at a time.
  ASSERT_TRUE((*sampler)->Start().ok());
  const double gemm_s =
      RunFor(0.5, [&] { ASSERT_TRUE(ops::Gemm(ctx, a.view(), b.view(), c.view()).ok()); });
  const double norm_s = RunFor(0.3, [&] {
    ASSERT_TRUE(ops::LayerNorm(ctx, x.view(), gamma.view(), beta.view(), 1e-5f, y.view(),
                               mean.view(), rstd.view())
                    .ok());
  });
  const double other_s = RunFor(0.2, [] { SpinOutsideOps(0.01); });
  (*sampler)->Stop();
  const StackSampler::Profile p = (*sampler)->Summarize();
  const double total_s = gemm_s + norm_s + other_s;
  // Samples may be fewer than intervals on a busy machine, but their weights add up.
  ASSERT_GE(p.samples, 200);
  EXPECT_EQ(p.dropped, 0);
  EXPECT_NEAR(p.intervals * 1e-3, total_s, 0.1 * total_s);
  auto share = [&](OpClass k) {
    return static_cast<double>(p.by_class[static_cast<int>(k)]) / p.intervals;
  };
  std::printf(
      "%lld samples, %lld intervals over %.3f s: GEMM %.3f (%.3f), LayerNorm %.3f (%.3f), "
      "other %.3f (%.3f)\n",
      static_cast<long long>(p.samples), static_cast<long long>(p.intervals), total_s,
      share(OpClass::kGemm), gemm_s / total_s, share(OpClass::kLayerNorm), norm_s / total_s,
      share(OpClass::kOther), other_s / total_s);
  EXPECT_NEAR(share(OpClass::kGemm), gemm_s / total_s, 0.1);
  EXPECT_NEAR(share(OpClass::kLayerNorm), norm_s / total_s, 0.1);
  EXPECT_NEAR(share(OpClass::kOther), other_s / total_s, 0.1);
  ASSERT_FALSE(p.other_top.empty());
  EXPECT_NE(p.other_top[0].first.find("SpinOutsideOps"), std::string::npos) << p.other_top[0].first;
}

// A sample taken while `in_jit_gemm` says the thread is in a JIT GEMM is GEMM, whatever its
// stack; with the marker at zero the same code is "other".
std::atomic<int> g_in_fake_jit_gemm{0};
int InFakeJitGemm() { return g_in_fake_jit_gemm.load(std::memory_order_relaxed); }

TEST(StepProfileTest, SamplesInsideAJitGemmAreGemm) {
  auto sampler = StackSampler::Create(1e-3, 100000, &InFakeJitGemm);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  ASSERT_TRUE((*sampler)->Start().ok());
  g_in_fake_jit_gemm = 1;
  const double jit_s = RunFor(0.3, [] { SpinOutsideOps(0.01); });
  g_in_fake_jit_gemm = 0;
  const double other_s = RunFor(0.2, [] { SpinOutsideOps(0.01); });
  (*sampler)->Stop();
  const StackSampler::Profile p = (*sampler)->Summarize();
  ASSERT_GE(p.samples, 200);
  const double gemm = static_cast<double>(p.by_class[static_cast<int>(OpClass::kGemm)]);
  const double other = static_cast<double>(p.by_class[static_cast<int>(OpClass::kOther)]);
  EXPECT_NEAR(gemm / p.intervals, jit_s / (jit_s + other_s), 0.1);
  EXPECT_NEAR(other / p.intervals, other_s / (jit_s + other_s), 0.1);
}

// On a CPU whose bf16 GEMMs run on oneDNN's JIT kernels (AVX512-BF16, AMX), a sampler given
// ops::OneDnnCallsOnThisThread counts them as GEMM; skipped elsewhere.
TEST(StepProfileTest, OneDnnGemmsAreGemm) {
  if (ops::CpuGemmRoute(DType::kBF16).rfind("onednn (", 0) != 0) {
    GTEST_SKIP() << "bf16 GEMMs are not on oneDNN's kernels here: " << ops::DescribeCpuGemm();
  }
  ThreadPool pool(1);
  ExecContext ctx;
  ctx.pool = &pool;
  const int64_t n = 256;
  Tensor a = Tensor::Zeros({n, n}, DType::kBF16), b = Tensor::Zeros({n, n}, DType::kBF16),
         c = Tensor::Zeros({n, n}, DType::kBF16);
  auto sampler = StackSampler::Create(1e-3, 100000, &ops::OneDnnCallsOnThisThread);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  ASSERT_TRUE((*sampler)->Start().ok());
  RunFor(0.3, [&] { ASSERT_TRUE(ops::Gemm(ctx, a.view(), b.view(), c.view()).ok()); });
  (*sampler)->Stop();
  const StackSampler::Profile p = (*sampler)->Summarize();
  ASSERT_GE(p.samples, 100);
  // The loop's own work and oneDNN's argument set-up outside the kernel call are small.
  EXPECT_GT(static_cast<double>(p.by_class[static_cast<int>(OpClass::kGemm)]) / p.intervals, 0.8);
}

#if defined(__x86_64__)
int InJitCode() { return 1; }  // As inside a oneDNN kernel: the sample is not unwound.

// Counts down `iterations` in registers with the stack pointer at `stack_top` (16-byte aligned),
// as some of oneDNN's JIT GEMMs run with it pointing into heap memory; no call, no push.
void SpinWithStackPointerAt(char* stack_top, uint64_t iterations) {
  asm volatile(
      "mov %%rsp, %%rbx\n\t"
      "mov %[top], %%rsp\n\t"
      "1:\n\t"
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      "mov %%rbx, %%rsp\n\t"
      : [n] "+r"(iterations)
      : [top] "r"(stack_top)
      : "rbx", "memory", "cc");
}

// The signal frames go to the sampler's own stack, not below the interrupted stack pointer:
// with the thread's stack pointer in a heap buffer, the buffer below it stays as it was. (Before
// the sampler had its own stack, each sample wrote a frame of several KiB there, which corrupted
// the heap under oneDNN's AVX2 GEMMs and aborted train_step_bench --bf16 --breakdown_steps.)
TEST(StepProfileTest, SamplesDoNotWriteBelowAForeignStackPointer) {
  std::vector<char> buffer(size_t{1} << 20, '\x5a');
  char* top = buffer.data() + buffer.size() / 2;
  top -= reinterpret_cast<uintptr_t>(top) % 16;
  auto sampler = StackSampler::Create(1e-3, 100000, &InJitCode);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  ASSERT_TRUE((*sampler)->Start().ok());
  RunFor(0.2, [&] { SpinWithStackPointerAt(top, 1000000); });
  (*sampler)->Stop();
  const StackSampler::Profile p = (*sampler)->Summarize();
  ASSERT_GE(p.samples, 50);
  EXPECT_EQ(std::count(buffer.begin(), buffer.end(), '\x5a'),
            static_cast<std::ptrdiff_t>(buffer.size()));
}
#endif

}  // namespace
}  // namespace jobs
}  // namespace mt
