// Training-step benchmark: tokens/s and model TFLOP/s (REFERENCE.md's formula) of full GPT-2
// training steps (forward, backward, optimizer), with the ratio to this machine's own GEMM rate
// measured in the same run: the CPU's f32 rate with the same threads, or with --device=cuda the
// GPU's bf16 rate (cuBLASLt, f32 accumulation) and the model in bf16 (model FLOP utilisation,
// MFU). Run under mpirun for TP > 1 or DP > 1:
//
//   bazel-bin/experiments/benchmarks/train_step_bench --hidden_size=512 --num_layers=4
//   mpirun -np 2 bazel-bin/experiments/benchmarks/train_step_bench --tensor_model_parallel_size=2
//   mpirun -np 2 bazel-bin/experiments/benchmarks/train_step_bench   # DP = 2
//
// Ranks beyond the TP degree are data-parallel (each runs --micro_batch_size samples). With DP > 1
// the steps alternate between the DP gradient all-reduce overlapped with backward and the
// all-reduce after backward, and both step times, their ratio and the all-reduce time left after
// backward ("exposed") are printed.
// Every rank uses --threads threads (default: cores / ranks).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/parallel_context.h"
#include "core/alloc.h"
#include "core/cuda/caching_allocator.h"
#include "core/cuda/device_context.h"
#include "core/cuda_device.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/thread_pool.h"
#include "gflags/gflags.h"
#include "models/gpt2/gpt2.h"
#include "train/flops.h"
#include "train/optimizer.h"

DEFINE_int32(num_layers, 4, "Layers.");
DEFINE_int32(hidden_size, 512, "Hidden size.");
DEFINE_int32(num_attention_heads, 8, "Heads.");
DEFINE_int32(seq_length, 256, "Sequence length.");
DEFINE_int32(micro_batch_size, 4, "Samples per step.");
DEFINE_int32(vocab_size, 50257, "Vocabulary.");
DEFINE_int32(tensor_model_parallel_size, 1, "TP degree (ranks / TP are data-parallel).");
DEFINE_int64(ddp_bucket_size, 1 << 20, "Gradient elements per DP all-reduce bucket.");
DEFINE_int32(steps, 5, "Timed steps (after one warm-up step).");
DEFINE_int32(threads, 0, "Threads per rank (0: cores / ranks).");
DEFINE_bool(recompute, false, "Activation checkpointing.");
DEFINE_string(device, "cpu", "cpu (f32) or cuda (bf16, rank r on GPU r mod GPUs).");
DEFINE_bool(caching_allocator, true, "With --device=cuda: tensors from a caching allocator.");
DEFINE_int32(max_position_embeddings, 0, "Learned positions (0: seq_length).");
DEFINE_int32(gemm_rate_size, 0,
             "Side of the square GEMM timed as the reference rate (0: 8192 on a GPU, 2048 on the "
             "CPU); small sizes only for smoke runs, e.g. under the CUDA emulator.");

namespace {

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

// The side of the reference GEMM.
int64_t GemmRateSize(bool gpu) {
  return FLAGS_gemm_rate_size > 0 ? FLAGS_gemm_rate_size : (gpu ? 8192 : 2048);
}

// f32 GEMM rate of this rank's threads: best of 3 runs of a product (2048^3 by default).
double GemmGflops(const mt::ExecContext& ec) {
  const int64_t n = GemmRateSize(false);
  mt::Tensor a = mt::Tensor::Zeros({n, n}, mt::DType::kF32), b = mt::Tensor::Zeros({n, n}, mt::DType::kF32),
             c = mt::Tensor::Zeros({n, n}, mt::DType::kF32);
  std::mt19937 rng(1);
  for (int64_t i = 0; i < n * n; ++i) {
    a.data_as<float>()[i] = static_cast<float>(rng() % 100) / 100.0f;
    b.data_as<float>()[i] = static_cast<float>(rng() % 100) / 100.0f;
  }
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    auto t = std::chrono::steady_clock::now();
    CHECK(mt::ops::Gemm(ec, a.view(), b.view(), c.view()).ok());
    best = std::min(best, Seconds(t));
  }
  return 2.0 * n * n * n / best / 1e9;
}

// bf16 GEMM rate of the GPU (cuBLASLt, f32 accumulation): best of 20 runs of a product (8192^3)
// after a warm-up (random data: a GPU's clocks and power depend on the bits it multiplies).
double GpuGemmGflops(const mt::ExecContext& ec) {
  const int64_t n = GemmRateSize(true);
  auto host = [&](uint32_t seed) {
    mt::Tensor h = mt::Tensor::Host({n, n}, mt::DType::kF32);
    std::mt19937 rng(seed);
    for (int64_t i = 0; i < n * n; ++i) h.data_as<float>()[i] = (rng() % 2001) / 1000.0f - 1.0f;
    auto d = mt::CopyToDevice(ec, h.view());
    CHECK(d.ok()) << d.status();
    auto b = mt::Alloc(ec, {n, n}, mt::DType::kBF16);
    CHECK(b.ok()) << b.status();
    CHECK(mt::ops::Convert(ec, d->view(), b->view()).ok());
    return std::move(*b);
  };
  mt::Tensor a = host(1), b = host(2);
  auto c = mt::Alloc(ec, {n, n}, mt::DType::kBF16);
  CHECK(c.ok()) << c.status();
  double best = 1e30;
  for (int r = 0; r < 23; ++r) {
    CHECK(mt::cuda::Synchronize(ec.device.index).ok());
    auto t = std::chrono::steady_clock::now();
    CHECK(mt::ops::Gemm(ec, a.view(), b.view(), c->view()).ok());
    CHECK(mt::cuda::Synchronize(ec.device.index).ok());
    if (r >= 3) best = std::min(best, Seconds(t));
  }
  return 2.0 * n * n * n / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  auto runtime = mt::comm::MpiRuntime::Init(&argc, &argv);
  if (!runtime.ok()) {
    std::fprintf(stderr, "train_step_bench: error: %s\n", std::string(runtime.status().message()).c_str());
    return 1;
  }
  auto world = (*runtime)->World();
  if (!world.ok()) mt::comm::MpiRuntime::Abort(world.status());
  mt::models::ModelConfig mc;
  mc.num_layers = FLAGS_num_layers;
  mc.hidden_size = FLAGS_hidden_size;
  mc.num_attention_heads = FLAGS_num_attention_heads;
  mc.vocab_size = FLAGS_vocab_size;
  mc.max_position_embeddings = FLAGS_seq_length;
  mt::comm::ParallelConfig pc;
  pc.tensor_parallel = FLAGS_tensor_model_parallel_size;
  auto parallel = mt::comm::ParallelContext::Create(**world, pc, mc.num_attention_heads);
  if (!parallel.ok()) mt::comm::MpiRuntime::Abort(parallel.status());
  const int ranks = (*world)->size();
  const int threads = FLAGS_threads > 0
                          ? FLAGS_threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks);
  mt::ThreadPool pool(threads);
  mt::ExecContext ec;
  ec.pool = &pool;
  const bool gpu = FLAGS_device == "cuda";
  std::unique_ptr<mt::cuda::DeviceContext> device_context;
  std::unique_ptr<mt::cuda::CachingAllocator> memory_pool;
  if (gpu) {
    if (mt::cuda::DeviceCount() < 1) {
      mt::comm::MpiRuntime::Abort(absl::FailedPreconditionError(mt::cuda::Describe()));
    }
    const int index = (*world)->rank() % mt::cuda::DeviceCount();
    auto dc = mt::cuda::DeviceContext::Create(index);
    if (!dc.ok()) mt::comm::MpiRuntime::Abort(dc.status());
    device_context = std::move(*dc);
    ec.device = mt::Device::Cuda(index);
    ec.cuda = device_context.get();
    if (FLAGS_caching_allocator) {
      memory_pool = std::make_unique<mt::cuda::CachingAllocator>(
          mt::cuda::CachingAllocator::CudaBackend(index));
      ec.memory_pool = memory_pool.get();
    }
  } else if (FLAGS_device != "cpu") {
    mt::comm::MpiRuntime::Abort(absl::InvalidArgumentError("--device must be cpu or cuda"));
  }
  const mt::DType dtype = gpu ? mt::DType::kBF16 : mt::DType::kF32;
  if (FLAGS_max_position_embeddings > 0) mc.max_position_embeddings = FLAGS_max_position_embeddings;

  // Measure every rank's GEMM rate at once (they share the machine as in training).
  const double gemm = gpu ? GpuGemmGflops(ec) : GemmGflops(ec);
  auto sync = [&]() {
    if (gpu) CHECK(mt::cuda::Synchronize(ec.device.index).ok());
  };

  mt::nn::ParameterStore store((*parallel)->tp_rank(), (*parallel)->tp_size(), dtype, ec.device);
  auto model = mt::models::GptModel::Create(
      mc, &store, FLAGS_recompute ? mt::nn::Recompute::kYes : mt::nn::Recompute::kNo);
  if (!model.ok()) mt::comm::MpiRuntime::Abort(model.status());
  if (auto s = store.Allocate(1); !s.ok()) mt::comm::MpiRuntime::Abort(s);
  mt::train::OptimizerConfig oc;
  oc.dp_bucket_elements = FLAGS_ddp_bucket_size;
  oc.overlap_grad_reduce = true;
  auto opt = mt::train::Optimizer::Create(&store, oc);
  if (!opt.ok()) mt::comm::MpiRuntime::Abort(opt.status());
  oc.overlap_grad_reduce = false;
  auto opt_after = mt::train::Optimizer::Create(&store, oc);
  if (!opt_after.ok()) mt::comm::MpiRuntime::Abort(opt_after.status());
  const int64_t B = FLAGS_micro_batch_size, T = FLAGS_seq_length;
  mt::Tensor tokens = mt::Tensor::Host({B, T}, mt::DType::kI32), labels = mt::Tensor::Host({B, T}, mt::DType::kI32);
  std::mt19937 rng(7);
  for (int64_t i = 0; i < B * T; ++i) {
    tokens.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % mc.vocab_size);
    labels.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % mc.vocab_size);
  }
  mt::nn::StepContext sc;
  sc.exec = &ec;
  sc.tp = (*parallel)->tp_size() > 1 ? &(*parallel)->tp() : nullptr;
  sc.dropout_seed = 1;
  mt::comm::Communicator* dp = (*parallel)->dp_size() > 1 ? &(*parallel)->dp() : nullptr;
  // Index 0: overlapped, 1: after backward (only with DP > 1).
  std::vector<double> times[2], exposed[2];
  int64_t started_in_backward = 0;
  const int modes = dp != nullptr ? 2 : 1;
  for (int step = 0; step < (FLAGS_steps + 1) * modes; ++step) {
    const int mode = step % modes;
    mt::train::Optimizer& o = mode == 0 ? *opt : *opt_after;
    if (auto s = (*world)->Barrier(); !s.ok()) mt::comm::MpiRuntime::Abort(s);
    auto t = std::chrono::steady_clock::now();
    sc.micro_step = step;
    if (auto s = store.ZeroGrads(ec); !s.ok()) mt::comm::MpiRuntime::Abort(s);
    sc.grads_ready = o.BeginGradReduce(dp);
    auto loss = (*model)->ForwardBackward(sc, tokens.view(), labels.view(), true);
    if (!loss.ok()) mt::comm::MpiRuntime::Abort(loss.status());
    sc.grads_ready = nullptr;
    sync();
    auto t_reduce = std::chrono::steady_clock::now();
    if (auto s = o.FinishGradReduce(); !s.ok()) mt::comm::MpiRuntime::Abort(s);
    const double reduce_s = Seconds(t_reduce);
    if (mode == 0) started_in_backward = o.grad_reducer().buckets_started_in_backward();
    auto stats = o.Step(ec, sc.tp, dp, 1e-4, 1.0);
    if (!stats.ok()) mt::comm::MpiRuntime::Abort(stats.status());
    sync();
    if (auto s = (*world)->Barrier(); !s.ok()) mt::comm::MpiRuntime::Abort(s);
    if (step >= modes) {  // The first step of each mode warms up.
      times[mode].push_back(Seconds(t));
      exposed[mode].push_back(reduce_s);
    }
  }
  // Activation memory of the transformer stack: held between forward and backward, plus the
  // transient of one recomputed layer during backward (activation checkpointing).
  auto fwd = (*model)->ForwardBackward(sc, tokens.view(), labels.view(), false);
  if (!fwd.ok()) mt::comm::MpiRuntime::Abort(fwd.status());
  const int64_t held = (*model)->stack().HeldActivationBytes();
  size_t device_in_use = 0;  // After the forward pass: parameters, optimizer state, activations.
  if (gpu) {
    auto used = mt::cuda::MemoryInUse(ec.device.index);
    if (used.ok()) device_in_use = *used;
  }
  if (auto s = store.ZeroGrads(ec); !s.ok()) mt::comm::MpiRuntime::Abort(s);
  auto fb = (*model)->ForwardBackward(sc, tokens.view(), labels.view(), true);
  if (!fb.ok()) mt::comm::MpiRuntime::Abort(fb.status());
  const int64_t extra = (*model)->stack().peak_backward_extra_bytes();
  auto median_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double median = median_of(times[0]);
  const int dp_size = (*parallel)->dp_size();
  const double flops = mt::train::ModelFlopsPerIteration(B * dp_size, T, mc.num_layers, mc.hidden_size,
                                                         (*model)->padded_vocab(), FLAGS_recompute);
  const double per_rank_gflops = flops / median / ranks / 1e9;
  if ((*world)->rank() == 0) {
    std::printf(
        "config: layers=%d hidden=%d heads=%d seq=%lld batch=%lld vocab=%lld (padded %lld) "
        "tp=%d dp=%d ranks=%d threads/rank=%d recompute=%s dtype=%s\n",
        mc.num_layers, static_cast<int>(mc.hidden_size), mc.num_attention_heads,
        static_cast<long long>(T), static_cast<long long>(B), static_cast<long long>(mc.vocab_size),
        static_cast<long long>((*model)->padded_vocab()), (*parallel)->tp_size(), dp_size, ranks, threads,
        FLAGS_recompute ? "yes" : "no", std::string(mt::DTypeName(dtype)).c_str());
    std::printf("parameters: %lld\n", static_cast<long long>(store.NumGlobalElements()));
    if (gpu) {
      std::printf("device: %s; bf16 GEMM rate (cuBLASLt, %lld^3, f32 accumulation): %.1f "
                  "TFLOP/s\n",
                  mt::cuda::Describe().c_str(), static_cast<long long>(GemmRateSize(true)),
                  gemm / 1e3);
    } else {
      std::printf("f32 GEMM rate per rank (%lld^3, %d threads): %.1f GFLOP/s\n",
                  static_cast<long long>(GemmRateSize(false)), threads, gemm);
    }
    std::printf("step time (median of %d%s): %.3f s | tokens/s: %.0f | model TFLOP/s per rank: %.4f | "
                "ratio to GEMM rate%s: %.1f%%\n",
                FLAGS_steps, dp != nullptr ? ", DP all-reduce overlapped" : "", median,
                B * T * dp_size / median, per_rank_gflops / 1e3, gpu ? " (MFU)" : "",
                100.0 * per_rank_gflops / gemm);
    if (gpu) {
      std::printf("device memory in use after a forward pass (cudaMemGetInfo): %.2f GiB\n",
                  device_in_use / 1073741824.0);
    }
    if (dp != nullptr) {
      const double after = median_of(times[1]);
      std::printf("DP gradient all-reduce, %lld buckets of <= %lld elements (%lld started during "
                  "backward when overlapped):\n"
                  "  overlapped with backward: step %.3f s, exposed after backward %.1f ms\n"
                  "  after backward:           step %.3f s, exposed after backward %.1f ms\n"
                  "  step time overlapped / after: %.3f\n",
                  static_cast<long long>(opt->grad_reducer().num_buckets()),
                  static_cast<long long>(FLAGS_ddp_bucket_size),
                  static_cast<long long>(started_in_backward), median,
                  median_of(exposed[0]) * 1e3, after, median_of(exposed[1]) * 1e3,
                  median / after);
    }
    std::printf("transformer activations per rank: held after forward %.1f MiB, recompute "
                "transient in backward %.1f MiB, peak %.1f MiB\n",
                held / 1048576.0, extra / 1048576.0, (held + extra) / 1048576.0);
  }
  return 0;
}
