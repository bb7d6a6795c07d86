// Training-step benchmark: tokens/s and model TFLOP/s (Megatron's formula, models/flops.h) of full
// training steps of any registered GPT-family model (--model; GPT-2 by default) (forward, backward,
// optimizer), with the ratio to this machine's own GEMM rate measured in the same run: the CPU's
// f32 rate with the same threads, or with --device=cuda the GPU's bf16 rate (cuBLASLt, f32
// accumulation) and the model in bf16 (model FLOP utilisation, MFU). Run under mpirun for TP > 1 or
// DP > 1:
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
// --use_distributed_optimizer shards both optimizers' Adam moments over the DP ranks (ZeRO stage 1,
// train/distributed_optimizer.h); the report gives the optimizer state each rank holds and every
// rank's peak resident set (getrusage), to measure what sharding saves.
//
// With --pipeline_model_parallel_size=P > 1 each step runs the pipeline schedule (1F1B, or the
// interleaved one with --num_layers_per_virtual_pipeline_stage) over --num_micro_batches
// micro-batches per DP rank, with the DP reduction overlapped with it and the tied embedding's
// gradient summed over the first and last stage, as pretrain_gpt trains; the report gives the
// step time, tokens/s, model TFLOP/s per rank and its ratio to the GEMM rate, each stage's idle
// share of the schedule against the theory (P - 1) / (V m + P - 1) with the activation sets each
// stage keeps, and each rank's parameters, optimizer state and peak resident set
// (--keep_stage_activations=false: one activation set per chunk, recomputing at the stage
// boundary, for comparison):
//
//   mpirun -np 4 bazel-bin/experiments/benchmarks/train_step_bench
//       --pipeline_model_parallel_size=2 --use_distributed_optimizer   # PP = 2 x DP = 2
//
// On the CPU it also prints the OpenBLAS kernel in use (core/openblas.h) and, from
// --breakdown_steps more steps run under a sampling profiler (step_profile.h), where rank 0's
// step time goes by op class (GEMM, attention, element-wise, LayerNorm, loss, optimizer,
// communication, other), with the GEMMs' achieved rate next to the GEMM rate: the gap, by class.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "comm/mpi_communicator.h"
#include "comm/parallel_context.h"
#include "core/alloc.h"
#include "core/config_flags.h"
#include "core/cuda_device.h"
#include "core/openblas.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/rank_execution.h"
#include "core/status.h"
#include "experiments/benchmarks/step_profile.h"
#include "experiments/pretrain/pretrain.h"
#include "gflags/gflags.h"
#include "models/flops.h"
#include "models/registry.h"
#include "train/optimizer.h"
#include "train/pipeline_schedule.h"

namespace mt {
namespace experiments {
namespace {

// The benchmark's settings (its flags; the model's come from the model config's table).
struct BenchConfig {
  std::string model_name;
  models::ModelConfig model;
  int64_t seq_length = 256;
  int64_t micro_batch_size = 4;
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  int num_layers_per_virtual_pipeline_stage = 0;
  int num_micro_batches = 0;  // With PP: per step and DP rank (0: 4 x PP).
  bool keep_stage_activations = true;
  int64_t ddp_bucket_size = int64_t{1} << 20;
  bool use_distributed_optimizer = false;
  int steps = 5;
  int threads = 0;
  bool recompute = false;
  DeviceKind device = DeviceKind::kCpu;
  bool caching_allocator = true;
  int gemm_rate_size = 0;
  int breakdown_steps = 3;
  ActivationConfig activations;  // --sequence_parallel, --recompute_granularity.

  BenchConfig() {
    model.hidden_size = 512;
    model.num_attention_heads = 8;
  }

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("model", &self.model_name,
      "A registered GPT-family model; the model flags given override it.");
    models::ModelConfig::Fields(self.model, v);
    v("seq_length", &self.seq_length, "Sequence length.");
    v("micro_batch_size", &self.micro_batch_size, "Samples per step.");
    v("tensor_model_parallel_size", &self.tensor_model_parallel_size,
      "TP degree (ranks / TP are data-parallel).");
    v("pipeline_model_parallel_size", &self.pipeline_model_parallel_size,
      "Pipeline stages (world = TP x DP x PP); each step then runs the 1F1B schedule.");
    v("num_layers_per_virtual_pipeline_stage", &self.num_layers_per_virtual_pipeline_stage,
      "With PP: layers per model chunk for the interleaved schedule (0: plain 1F1B).");
    v("num_micro_batches", &self.num_micro_batches,
      "With PP: micro-batches per step and DP rank (0: 4 x PP).");
    v("keep_stage_activations", &self.keep_stage_activations,
      "With PP: keep every in-flight micro-batch's activations, as the drivers do (false: one "
      "set per chunk, recomputing forwards at the stage boundary, to compare).");
    v("ddp_bucket_size", &self.ddp_bucket_size, "Gradient elements per DP all-reduce bucket.");
    v("use_distributed_optimizer", &self.use_distributed_optimizer,
      "Shard the Adam moments over the DP ranks (ZeRO stage 1).");
    v("steps", &self.steps, "Timed steps (after one warm-up step).");
    v("threads", &self.threads, "Threads per rank (0: cores / ranks).");
    v("recompute", &self.recompute, "Activation checkpointing.");
    ActivationConfig::Fields(self.activations, v);
    v("device", &self.device, "cpu (f32) or cuda (bf16, rank r on GPU local_rank mod GPUs).",
      kDeviceNames);
    v("caching_allocator", &self.caching_allocator,
      "With --device=cuda: tensors from a caching allocator.");
    v("gemm_rate_size", &self.gemm_rate_size,
      "Side of the square GEMM timed as the reference rate (0: 8192 on a GPU, 2048 on the CPU); "
      "small sizes only for smoke runs, e.g. under the CUDA emulator.");
    v("breakdown_steps", &self.breakdown_steps,
      "CPU: steps after the timed ones, sampled every millisecond to split the step time by op "
      "class (0: no breakdown).");
  }
};

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

// The side of the reference GEMM.
int64_t GemmRateSize(int flag, bool gpu) { return flag > 0 ? flag : (gpu ? 8192 : 2048); }

// f32 GEMM rate of this rank's threads: best of 10 runs of a product (2048^3 by default) after a
// warm-up; on a shared machine the best of a few 0.1 s runs is often a loaded one.
double GemmGflops(const mt::ExecContext& ec, int64_t n) {
  mt::Tensor a = mt::Tensor::Zeros({n, n}, mt::DType::kF32),
             b = mt::Tensor::Zeros({n, n}, mt::DType::kF32),
             c = mt::Tensor::Zeros({n, n}, mt::DType::kF32);
  std::mt19937 rng(1);
  for (int64_t i = 0; i < n * n; ++i) {
    a.data_as<float>()[i] = static_cast<float>(rng() % 100) / 100.0f;
    b.data_as<float>()[i] = static_cast<float>(rng() % 100) / 100.0f;
  }
  double best = 1e30;
  for (int r = 0; r < 11; ++r) {
    auto t = std::chrono::steady_clock::now();
    CHECK(mt::ops::Gemm(ec, a.view(), b.view(), c.view()).ok());
    if (r > 0) best = std::min(best, Seconds(t));
  }
  return 2.0 * n * n * n / best / 1e9;
}

// bf16 GEMM rate of the GPU (cuBLASLt, f32 accumulation): best of 20 runs of a product (8192^3)
// after a warm-up (random data: a GPU's clocks and power depend on the bits it multiplies).
double GpuGemmGflops(const mt::ExecContext& ec, int64_t n) {
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

// What one rank runs on (threads, and on a GPU its context and allocator), and whether it is a GPU.
struct Device {
  RankExecution rank;
  bool gpu = false;
};

absl::StatusOr<std::unique_ptr<Device>> SetUpDevice(const BenchConfig& c, int local_rank,
                                                    int local_size) {
  auto d = std::make_unique<Device>();
  d->gpu = c.device == DeviceKind::kCuda;
  RankExecutionOptions ro;
  ro.cuda = d->gpu;
  ro.threads = c.threads;
  ro.local_rank = local_rank;
  ro.local_size = local_size;
  ro.caching_allocator = c.caching_allocator;
  ASSIGN_OR_RETURN(d->rank, CreateRankExecution(ro));
  return d;
}

// The reference GEMM rate's line(s): the device or the BLAS, and the rate `gemm` (GFLOP/s).
void PrintGemmRate(const BenchConfig& c, const Device& d, double gemm) {
  if (d.gpu) {
    std::printf("device: %s; bf16 GEMM rate (cuBLASLt, %lld^3, f32 accumulation): %.1f TFLOP/s\n",
                cuda::Describe().c_str(),
                static_cast<long long>(GemmRateSize(c.gemm_rate_size, true)), gemm / 1e3);
  } else {
    std::printf("blas: %s\n", DescribeBlas().c_str());
    std::printf("f32 GEMM rate per rank (%lld^3, %d threads, OpenBLAS core %s): %.1f GFLOP/s\n",
                static_cast<long long>(GemmRateSize(c.gemm_rate_size, false)), d.rank.threads,
                LoadOpenBlas().core.c_str(), gemm);
  }
}

// "no", "full" or "selective".
const char* RecomputeName(const BenchConfig& c) {
  const absl::StatusOr<nn::Recompute> r = c.activations.Recompute(c.recompute);
  if (!r.ok() || *r == nn::Recompute::kNo) return "no";
  return *r == nn::Recompute::kYes ? "full" : "selective";
}

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Timed training steps; index 0 with the DP all-reduce overlapped with backward, 1 after it (only
// with DP > 1). On the CPU, the op-class profile of --breakdown_steps more (overlapped) steps.
struct Timings {
  std::vector<double> times[2], exposed[2];
  int64_t started_in_backward = 0;
  int64_t buckets = 0;
  int64_t moment_elements = 0;  // Of one optimizer's exp_avg on this rank.
  int64_t part_buffers = 0;     // Distributed optimizer (overlapped): bucket-part buffers.
  double part_buffer_mib = 0;
  std::vector<double> profiled;  // The sampled steps' times.
  StackSampler::Profile profile;
};

// What one training step runs on.
struct StepRunner {
  comm::Communicator& world;
  comm::Communicator* dp;
  const Device& d;
  nn::ParameterStore& store;
  models::Model& model;
  const models::Batch& batch;
  nn::StepContext& sc;

  // One step with `o`: its time and the DP all-reduce time left after backward; the buckets
  // started during backward go to `started_in_backward` when it is set.
  absl::StatusOr<std::pair<double, double>> Run(train::Optimizer& o, int step,
                                                int64_t* started_in_backward) {
    RETURN_IF_ERROR(world.Barrier());
    auto start = std::chrono::steady_clock::now();
    sc.micro_step = step;
    RETURN_IF_ERROR(store.ZeroGrads(d.rank.exec));
    sc.grads_ready = o.BeginGradReduce(dp);
    RETURN_IF_ERROR(model.ForwardBackward(sc, batch, models::Backward::kYes).status());
    sc.grads_ready = nullptr;
    if (d.gpu) RETURN_IF_ERROR(cuda::Synchronize(d.rank.exec.device.index));
    auto t_reduce = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(o.FinishGradReduce());
    const double reduce_s = Seconds(t_reduce);
    if (started_in_backward != nullptr) {
      *started_in_backward = o.grad_reducer().buckets_started_in_backward();
    }
    RETURN_IF_ERROR(o.Step(d.rank.exec, sc.tp, dp, 1e-4, 1.0).status());
    if (d.gpu) RETURN_IF_ERROR(cuda::Synchronize(d.rank.exec.device.index));
    RETURN_IF_ERROR(world.Barrier());
    return std::make_pair(Seconds(start), reduce_s);
  }
};

constexpr double kSampleInterval = 1e-3;  // Seconds.

// --breakdown_steps more steps, each rank sampling its own main thread; rank 0 summarises.
absl::Status ProfileSteps(const BenchConfig& c, StepRunner& run, train::Optimizer& o,
                          int first_step, Timings* t) {
  const double expected = c.breakdown_steps * MedianOf(t->times[0]) / kSampleInterval;
  ASSIGN_OR_RETURN(auto sampler, StackSampler::Create(kSampleInterval,
                                                      static_cast<int64_t>(2 * expected) + 1000));
  for (int i = 0; i < c.breakdown_steps; ++i) {
    RETURN_IF_ERROR(sampler->Start());
    auto step = run.Run(o, first_step + i, nullptr);
    sampler->Stop();
    RETURN_IF_ERROR(step.status());
    t->profiled.push_back(step->first);
  }
  if (run.world.rank() == 0) t->profile = sampler->Summarize();
  return absl::OkStatus();
}

absl::StatusOr<Timings> TimeSteps(const BenchConfig& c, comm::Communicator& world,
                                  comm::ParallelContext& parallel, const Device& d,
                                  nn::ParameterStore& store, models::Model& model,
                                  const models::Batch& batch, nn::StepContext& sc) {
  train::OptimizerConfig oc;
  oc.dp_bucket_elements = c.ddp_bucket_size;
  oc.overlap_grad_reduce = true;
  oc.use_distributed_optimizer = c.use_distributed_optimizer;
  comm::Communicator* dp = parallel.dp_size() > 1 ? &parallel.dp() : nullptr;
  ASSIGN_OR_RETURN(train::Optimizer overlapped, train::Optimizer::Create(&store, oc, dp));
  // The after-backward optimizer (its own Adam moments, as large as the parameters twice over)
  // exists only when there is a DP all-reduce to compare: without DP it would be dead memory in
  // the peak RSS.
  std::optional<train::Optimizer> after;
  if (dp != nullptr) {
    oc.overlap_grad_reduce = false;
    ASSIGN_OR_RETURN(after, train::Optimizer::Create(&store, oc, dp));
  }
  StepRunner run{world, dp, d, store, model, batch, sc};
  const int modes = dp != nullptr ? 2 : 1;
  Timings t;
  for (int step = 0; step < (c.steps + 1) * modes; ++step) {
    const int mode = step % modes;
    ASSIGN_OR_RETURN(auto times, run.Run(mode == 0 ? overlapped : *after, step,
                                         mode == 0 ? &t.started_in_backward : nullptr));
    if (step >= modes) {  // The first step of each mode warms up.
      t.times[mode].push_back(times.first);
      t.exposed[mode].push_back(times.second);
    }
  }
  t.buckets = overlapped.grad_reducer().num_buckets();
  t.moment_elements = overlapped.exp_avg().numel();
  if (const train::DistributedOptimizerState* dist = overlapped.distributed_state()) {
    t.part_buffers = dist->part_buffers();
    t.part_buffer_mib = 4.0 * dist->part_buffer_elements() / 1048576.0;
  }
  if (!d.gpu && c.breakdown_steps > 0) {
    RETURN_IF_ERROR(ProfileSteps(c, run, overlapped, (c.steps + 1) * modes, &t));
  }
  return t;
}

// The profile of the sampled steps by op class, in seconds per step, with the GEMMs' achieved
// rate: the model's matrix-product FLOPs outside attention (Megatron's count less its attention
// term) over the time sampled in GEMMs.
void ReportBreakdown(const BenchConfig& c, const comm::ParallelContext& parallel,
                     const models::Model& model, double gemm, const Timings& t) {
  const StackSampler::Profile& p = t.profile;
  if (p.intervals == 0) return;
  double step = 0;
  for (double s : t.profiled) step += s / t.profiled.size();
  const models::ModelConfig& mc = model.config();
  const int64_t B = c.micro_batch_size * parallel.dp_size(), T = c.seq_length;
  const double gemm_flops =
      (model.TrainingFlops(B, T, B * T) - models::LayerFlops(B, T, mc.num_layers, mc.hidden_size,
                                                             /*layer_weights=*/0.0, c.recompute)) /
      parallel.world_size();
  std::printf(
      "step breakdown by op class (rank 0's main thread sampled every %.0f ms over %d "
      "more steps, %.3f s each on average; %lld samples standing for %lld intervals; "
      "shares within about +-%.1f%%):\n",
      kSampleInterval * 1e3, c.breakdown_steps, step, static_cast<long long>(p.samples),
      static_cast<long long>(p.intervals), 100.0 / std::sqrt(std::max<int64_t>(1, p.samples)));
  double gemm_s = 0;
  for (int k = 0; k < kNumOpClasses; ++k) {
    const OpClass op_class = static_cast<OpClass>(k);
    const double share = static_cast<double>(p.by_class[k]) / p.intervals;
    std::string note;
    if (op_class == OpClass::kGemm && share > 0) {
      gemm_s = share * step;
      const double rate = gemm_flops / gemm_s / 1e9;
      note = absl::StrFormat(
          "  %.1f GFLOP/s on the GEMM FLOPs outside attention = %.0f%% of the "
          "GEMM rate",
          rate, 100.0 * rate / gemm);
    }
    if (op_class == OpClass::kOther) {
      for (const auto& [name, n] : p.other_top) {
        if (n * 1000 < p.intervals) break;  // Under 0.1%.
        absl::StrAppendFormat(&note, "%s %s %.1f%%", note.empty() ? "  most:" : ",", name,
                              100.0 * n / p.intervals);
      }
    }
    std::printf("  %-14s %7.3f s %6.1f%%%s\n", OpClassName(op_class), share * step, 100.0 * share,
                note.c_str());
  }
  std::printf("  with the GEMMs at the GEMM rate and the rest as sampled: %.3f s per step\n",
              step - gemm_s + gemm_flops / gemm / 1e9);
}

void Report(const BenchConfig& c, const comm::ParallelContext& parallel, const Device& d,
            const models::Model& model, int64_t parameters, double gemm, const Timings& t,
            const models::Model::ActivationBytes& act, size_t device_in_use, size_t peak_bytes) {
  const models::ModelConfig& mc = model.config();
  const int64_t B = c.micro_batch_size, T = c.seq_length;
  const int dp_size = parallel.dp_size(), ranks = parallel.world_size();
  const bool has_dp = dp_size > 1;
  const bool sharded = c.use_distributed_optimizer && has_dp;
  const double median = MedianOf(t.times[0]);
  const double flops = model.TrainingFlops(B * dp_size, T, B * dp_size * T);
  const double per_rank_gflops = flops / median / ranks / 1e9;
  std::printf(
      "config: model=%s architecture=%s layers=%d hidden=%d heads=%d seq=%lld batch=%lld "
      "vocab=%lld (padded %lld) tp=%d dp=%d ranks=%d threads/rank=%d recompute=%s "
      "sequence_parallel=%s dtype=%s\n",
      c.model_name.empty() ? "(flags)" : c.model_name.c_str(), mc.ArchitectureName().c_str(),
      mc.num_layers, static_cast<int>(mc.hidden_size), mc.num_attention_heads,
      static_cast<long long>(T), static_cast<long long>(B), static_cast<long long>(mc.vocab_size),
      static_cast<long long>(model.padded_vocab()), parallel.tp_size(), dp_size, ranks,
      d.rank.threads, RecomputeName(c), c.activations.sequence_parallel ? "yes" : "no",
      d.gpu ? "bf16" : "f32");
  std::printf("parameters: %lld\n", static_cast<long long>(parameters));
  PrintGemmRate(c, d, gemm);
  std::printf(
      "step time (median of %d%s): %.3f s | tokens/s: %.0f | model TFLOP/s per rank: %.4f | "
      "ratio to GEMM rate%s: %.1f%%\n",
      c.steps, has_dp ? ", DP all-reduce overlapped" : "", median, B * T * dp_size / median,
      per_rank_gflops / 1e3, d.gpu ? " (MFU)" : "", 100.0 * per_rank_gflops / gemm);
  std::printf("step time (best of %d%s): %.3f s\n", c.steps,
              has_dp ? ", DP all-reduce overlapped" : "",
              *std::min_element(t.times[0].begin(), t.times[0].end()));
  if (d.gpu) {
    std::printf("device memory in use after a forward pass (cudaMemGetInfo): %.2f GiB\n",
                device_in_use / 1073741824.0);
  }
  if (has_dp) {
    const double after = MedianOf(t.times[1]);
    std::printf(
        "DP gradient all-reduce, %lld buckets of <= %lld elements (%lld started during "
        "backward when overlapped):\n"
        "  overlapped with backward: step %.3f s, exposed after backward %.1f ms\n"
        "  after backward:           step %.3f s, exposed after backward %.1f ms\n"
        "  step time overlapped / after: %.3f\n",
        static_cast<long long>(t.buckets), static_cast<long long>(c.ddp_bucket_size),
        static_cast<long long>(t.started_in_backward), median, MedianOf(t.exposed[0]) * 1e3, after,
        MedianOf(t.exposed[1]) * 1e3, median / after);
    if (sharded) {
      std::printf(
          "  (distributed optimizer: each bucket reduce-scattered, the masters all-gathered; "
          "%lld bucket-part buffers of %.1f MiB for the reduce-scatters pending at once)\n",
          static_cast<long long>(t.part_buffers), t.part_buffer_mib);
    }
  }
  std::printf(
      "transformer activations per rank: held after forward %.1f MiB, recompute "
      "transient in backward %.1f MiB, peak %.1f MiB\n",
      act.held / 1048576.0, act.backward_extra / 1048576.0,
      (act.held + act.backward_extra) / 1048576.0);
  if (d.rank.memory_pool != nullptr) {
    std::printf(
        "device memory per rank (caching allocator): peak during a training step %.1f MiB\n",
        static_cast<double>(peak_bytes) / 1048576.0);
  }
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    std::printf("peak RSS of rank 0: %.1f MiB\n", usage.ru_maxrss / 1024.0);
  }
  if (!d.gpu) ReportBreakdown(c, parallel, model, gemm, t);
}

// The optimizer state and gradients this rank holds, and every rank's peak resident set
// (getrusage: the whole process, both optimizers included). Collective over `world`.
absl::Status ReportMemory(const BenchConfig& c, comm::Communicator& world, int dp_size,
                          const nn::ParameterStore& store, const Timings& t) {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  Tensor mine = Tensor::Host({1}, DType::kI64), all = Tensor::Host({world.size()}, DType::kI64);
  mine.data_as<int64_t>()[0] = static_cast<int64_t>(usage.ru_maxrss);  // KiB.
  RETURN_IF_ERROR(world.AllGather(mine.view(), all.view()));
  if (world.rank() != 0) return absl::OkStatus();
  const double mib = 1048576.0, local = static_cast<double>(store.NumLocalElements());
  std::printf(
      "memory per rank (rank 0): f32 masters %.1f MiB, f32 gradients %.1f MiB, Adam moments "
      "%.1f MiB per optimizer (%lld elements each: %s)%s\n",
      4 * local / mib, 4 * local / mib, 8.0 * t.moment_elements / mib,
      static_cast<long long>(t.moment_elements),
      c.use_distributed_optimizer && dp_size > 1 ? "a 1/DP shard" : "unsharded",
      dp_size > 1 ? "; two optimizers exist (overlapped and after-backward steps)" : "");
  std::printf("peak RSS per rank (getrusage):");
  for (int r = 0; r < world.size(); ++r) {
    std::printf(" %.1f MiB", all.data_as<int64_t>()[r] / 1024.0);
  }
  std::printf("\n");
  return absl::OkStatus();
}

// ---- Pipeline parallelism (PP > 1)

// One rank's figures of a pipelined run, gathered to rank 0 as i64 (times in ns).
enum PipelineField {
  kStage,
  kTpRank,
  kDpRank,
  kParameters,
  kMomentElements,
  kPeakRssKib,
  kScheduleNs,
  kWaitNs,
  kRecomputed,
  kInstances,
  kFlops,
  kNumPipelineFields
};

// Timed steps through the pipeline schedule, as train::Trainer runs them (PP > 1; see the file
// comment). Collective over `world`.
absl::Status RunPipelined(const BenchConfig& c, comm::Communicator& world,
                          comm::ParallelContext& parallel, const Device& d, double gemm) {
  ASSIGN_OR_RETURN(const comm::PipelineSplit split,
                   comm::MakePipelineSplit(c.model.num_layers, c.pipeline_model_parallel_size,
                                           c.num_layers_per_virtual_pipeline_stage));
  nn::ParameterStore store(parallel.tp_rank(), parallel.tp_size(),
                           d.gpu ? DType::kBF16 : DType::kF32, d.rank.exec.device);
  models::ModelOptions options;
  ASSIGN_OR_RETURN(options.recompute, c.activations.Recompute(c.recompute));
  options.sequence_parallel = c.activations.sequence_parallel;
  ASSIGN_OR_RETURN(auto chunks,
                   train::CreateStageModels(c.model, &store, options, split, parallel.pp_rank()));
  RETURN_IF_ERROR(store.Allocate(1));
  std::vector<models::Model*> chunk_ptrs;
  int tied = -1;
  for (const auto& chunk : chunks) {
    chunk_ptrs.push_back(chunk.get());
    if (chunk->tied_embedding_handle() >= 0) tied = chunk->tied_embedding_handle();
  }
  train::ChunkFactory more;
  if (c.keep_stage_activations) {
    ASSIGN_OR_RETURN(more,
                     train::StageChunkFactory(c.model, &store, options, split, parallel.pp_rank()));
  }
  ASSIGN_OR_RETURN(auto runner,
                   train::PipelineRunner::Create(&parallel.pp(), split, chunk_ptrs, &d.rank.exec,
                                                 store.compute_dtype(), std::move(more)));
  comm::Communicator* dp = parallel.dp_size() > 1 ? &parallel.dp() : nullptr;
  train::OptimizerConfig oc;
  oc.dp_bucket_elements = c.ddp_bucket_size;
  oc.use_distributed_optimizer = c.use_distributed_optimizer;
  ASSIGN_OR_RETURN(train::Optimizer o, train::Optimizer::Create(&store, oc, dp));
  o.set_pipeline(&parallel.pp(), parallel.is_first_stage() ? -1 : tied, &parallel.embedding(),
                 tied);

  const int m = c.num_micro_batches > 0 ? c.num_micro_batches : 4 * parallel.pp_size();
  const int64_t B = c.micro_batch_size, T = c.seq_length;
  std::vector<train::OwnedBatch> owned(m);
  std::vector<models::Batch> batches;
  std::mt19937 rng(7);
  for (train::OwnedBatch& b : owned) {
    b.tokens = Tensor::Host({B, T}, DType::kI32);
    b.labels = Tensor::Host({B, T}, DType::kI32);
    for (int64_t i = 0; i < B * T; ++i) {
      b.tokens.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % c.model.vocab_size);
      b.labels.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % c.model.vocab_size);
    }
    batches.push_back(b.view());
  }
  std::vector<double> times, schedule, wait;
  double flops = 0;
  int64_t recomputed = 0;
  for (int step = 0; step <= c.steps; ++step) {  // Step 0 warms up.
    RETURN_IF_ERROR(world.Barrier());
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(store.ZeroGrads(d.rank.exec));
    nn::GradReadyListener* listener = o.BeginGradReduce(dp);
    auto micro_step = [&](int micro) {
      nn::StepContext sc;
      sc.exec = &d.rank.exec;
      sc.tp = parallel.tp_size() > 1 ? &parallel.tp() : nullptr;
      sc.dropout_seed = 1;
      sc.micro_step = step;
      sc.sample_offset = B * (micro * parallel.dp_size() + parallel.dp_rank());
      if (micro == m - 1) sc.grads_ready = listener;
      return sc;
    };
    double step_flops = 0;
    RETURN_IF_ERROR(
        runner->Run(batches, micro_step, models::Backward::kYes, 1.0, &step_flops).status());
    // The DP reduction and the sum of the tied embedding's copies over the first and last stage.
    RETURN_IF_ERROR(o.FinishGradReduce());
    RETURN_IF_ERROR(o.Step(d.rank.exec, parallel.tp_size() > 1 ? &parallel.tp() : nullptr, dp, 1e-4,
                           static_cast<double>(m) * parallel.dp_size())
                        .status());
    if (d.gpu) RETURN_IF_ERROR(cuda::Synchronize(d.rank.exec.device.index));
    RETURN_IF_ERROR(world.Barrier());
    if (step == 0) continue;
    times.push_back(Seconds(start));
    schedule.push_back(runner->stats().seconds);
    wait.push_back(runner->stats().wait_seconds);
    recomputed += runner->stats().recomputed;
    flops = step_flops;
  }

  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  Tensor mine = Tensor::Host({kNumPipelineFields}, DType::kI64);
  Tensor all = Tensor::Host({world.size() * kNumPipelineFields}, DType::kI64);
  int64_t* f = mine.data_as<int64_t>();
  f[kStage] = parallel.pp_rank();
  f[kTpRank] = parallel.tp_rank();
  f[kDpRank] = parallel.dp_rank();
  f[kParameters] = store.NumLocalElements();
  f[kMomentElements] = o.exp_avg().numel();
  f[kPeakRssKib] = usage.ru_maxrss;
  f[kScheduleNs] = std::llround(MedianOf(schedule) * 1e9);
  f[kWaitNs] = std::llround(MedianOf(wait) * 1e9);
  f[kRecomputed] = recomputed / c.steps;
  f[kInstances] = runner->stats().instances;
  f[kFlops] = std::llround(flops);
  RETURN_IF_ERROR(world.AllGather(mine.view(), all.view()));
  if (world.rank() != 0) return absl::OkStatus();

  const int P = parallel.pp_size(), V = split.virtual_stages, dp_size = parallel.dp_size();
  const int ranks = world.size();
  auto field = [&](int rank, PipelineField k) {
    return all.data_as<int64_t>()[rank * kNumPipelineFields + k];
  };
  // Model FLOPs of a step: every stage's chunks over its m micro-batches (each TP rank counts
  // the whole layers), times the DP replicas.
  double step_model_flops = 0;
  for (int r = 0; r < ranks; ++r) {
    if (field(r, kTpRank) == 0 && field(r, kDpRank) == 0) step_model_flops += field(r, kFlops);
  }
  step_model_flops *= dp_size;
  const double median = MedianOf(times);
  const double per_rank_gflops = step_model_flops / median / ranks / 1e9;
  const models::ModelConfig& mc = c.model;
  std::printf(
      "config: model=%s architecture=%s layers=%d hidden=%d heads=%d seq=%lld micro_batch=%lld "
      "micro_batches=%d tp=%d dp=%d pp=%d virtual_stages=%d ranks=%d threads/rank=%d "
      "recompute=%s sequence_parallel=%s distributed_optimizer=%s dtype=%s\n",
      c.model_name.empty() ? "(flags)" : c.model_name.c_str(), mc.ArchitectureName().c_str(),
      mc.num_layers, static_cast<int>(mc.hidden_size), mc.num_attention_heads,
      static_cast<long long>(T), static_cast<long long>(B), m, parallel.tp_size(), dp_size, P, V,
      ranks, d.rank.threads, RecomputeName(c), c.activations.sequence_parallel ? "yes" : "no",
      o.distributed() ? "yes" : "no", d.gpu ? "bf16" : "f32");
  PrintGemmRate(c, d, gemm);
  std::printf(
      "step time (median of %d, %d micro-batches of %lld per DP rank): %.3f s | tokens/s: %.0f | "
      "model TFLOP/s per rank: %.4f | ratio to GEMM rate%s: %.1f%%\n",
      c.steps, m, static_cast<long long>(B), median, m * B * T * dp_size / median,
      per_rank_gflops / 1e3, d.gpu ? " (MFU)" : "", 100.0 * per_rank_gflops / gemm);
  // Each stage's idle share, as pretrain_gpt reports it: 1 - busy / the longest schedule.
  double longest = 0;
  for (int r = 0; r < ranks; ++r) longest = std::max<double>(longest, field(r, kScheduleNs));
  std::printf("pipeline bubble (idle share of the schedule), theory (P-1)/(V m+P-1) = %.1f%%:",
              100.0 * (P - 1) / (V * m + P - 1));
  for (int stage = 0; stage < P; ++stage) {
    for (int r = 0; r < ranks; ++r) {
      if (field(r, kStage) != stage || field(r, kTpRank) != 0 || field(r, kDpRank) != 0) continue;
      std::printf(" stage %d %.1f%% (activation sets %lld, forwards recomputed %lld)", stage,
                  100.0 * (1.0 - (field(r, kScheduleNs) - field(r, kWaitNs)) / longest),
                  static_cast<long long>(field(r, kInstances)),
                  static_cast<long long>(field(r, kRecomputed)));
    }
  }
  std::printf("\n");
  if (dp != nullptr) {
    std::printf(
        "DP gradient %s of rank 0: %lld buckets of <= %lld elements, %lld started during the "
        "schedule\n",
        o.distributed() ? "reduce-scatter" : "all-reduce",
        static_cast<long long>(o.grad_reducer().num_buckets()),
        static_cast<long long>(c.ddp_bucket_size),
        static_cast<long long>(o.grad_reducer().buckets_started_in_backward()));
  }
  const double mib = 1048576.0;
  for (int r = 0; r < ranks; ++r) {
    std::printf(
        "rank %d (stage %lld, tp %lld, dp %lld): parameters %lld (f32 masters %.1f MiB, f32 "
        "gradients %.1f MiB), Adam moments %.1f MiB (%lld elements each, %s), peak RSS %.1f "
        "MiB\n",
        r, static_cast<long long>(field(r, kStage)), static_cast<long long>(field(r, kTpRank)),
        static_cast<long long>(field(r, kDpRank)), static_cast<long long>(field(r, kParameters)),
        4.0 * field(r, kParameters) / mib, 4.0 * field(r, kParameters) / mib,
        8.0 * field(r, kMomentElements) / mib, static_cast<long long>(field(r, kMomentElements)),
        o.distributed() ? "a 1/DP shard" : "unsharded", field(r, kPeakRssKib) / 1024.0);
  }
  return absl::OkStatus();
}

absl::Status Run(const BenchConfig& c, comm::MpiRuntime& runtime, comm::Communicator& world) {
  comm::ParallelConfig pc;
  pc.tensor_parallel = c.tensor_model_parallel_size;
  pc.pipeline_parallel = c.pipeline_model_parallel_size;
  ASSIGN_OR_RETURN(auto parallel,
                   comm::ParallelContext::Create(world, pc, c.model.num_attention_heads));
  ASSIGN_OR_RETURN(auto d, SetUpDevice(c, runtime.local_rank(), runtime.local_size()));
  // Measure every rank's GEMM rate at once (they share the machine as in training).
  const int64_t n = GemmRateSize(c.gemm_rate_size, d->gpu);
  const double gemm = d->gpu ? GpuGemmGflops(d->rank.exec, n) : GemmGflops(d->rank.exec, n);
  if (parallel->pp_size() > 1) return RunPipelined(c, world, *parallel, *d, gemm);

  nn::ParameterStore store(parallel->tp_rank(), parallel->tp_size(),
                           d->gpu ? DType::kBF16 : DType::kF32, d->rank.exec.device);
  models::ModelOptions options;
  ASSIGN_OR_RETURN(options.recompute, c.activations.Recompute(c.recompute));
  options.sequence_parallel = c.activations.sequence_parallel;
  ASSIGN_OR_RETURN(auto model, models::CreateModel(c.model, &store, options));
  RETURN_IF_ERROR(store.Allocate(1));
  const int64_t B = c.micro_batch_size, T = c.seq_length;
  Tensor tokens = Tensor::Host({B, T}, DType::kI32), labels = Tensor::Host({B, T}, DType::kI32);
  std::mt19937 rng(7);
  for (int64_t i = 0; i < B * T; ++i) {
    tokens.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % c.model.vocab_size);
    labels.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % c.model.vocab_size);
  }
  models::Batch batch;
  batch.tokens = tokens.view();
  batch.labels = labels.view();
  nn::StepContext sc;
  sc.exec = &d->rank.exec;
  sc.tp = parallel->tp_size() > 1 ? &parallel->tp() : nullptr;
  sc.dropout_seed = 1;
  ASSIGN_OR_RETURN(Timings t, TimeSteps(c, world, *parallel, *d, store, *model, batch, sc));
  // Activation memory: held between forward and backward, plus the transient of one recomputed
  // layer during backward (activation checkpointing).
  RETURN_IF_ERROR(model->ForwardBackward(sc, batch, models::Backward::kNo).status());
  const int64_t held = model->activation_bytes().held;
  size_t device_in_use = 0;  // After the forward pass: parameters, optimizer state, activations.
  if (d->gpu) {
    auto used = cuda::MemoryInUse(d->rank.exec.device.index);
    if (used.ok()) device_in_use = *used;
  }
  RETURN_IF_ERROR(store.ZeroGrads(d->rank.exec));
  cuda::CachingAllocator* pool = d->rank.memory_pool.get();
  if (pool != nullptr) pool->ResetPeak();
  RETURN_IF_ERROR(model->ForwardBackward(sc, batch, models::Backward::kYes).status());
  const size_t peak_bytes = pool != nullptr ? pool->stats().peak_bytes_in_use : 0;
  const models::Model::ActivationBytes act{held, model->activation_bytes().backward_extra};
  if (world.rank() == 0) {
    Report(c, *parallel, *d, *model, store.NumGlobalElements(), gemm, t, act, device_in_use,
           peak_bytes);
  }
  return ReportMemory(c, world, parallel->dp_size(), store, t);
}

// --model and the flags given, as the pretraining drivers resolve them; positions cover
// seq_length unless given.
absl::Status ResolveConfig(const ConfigFlags<BenchConfig>& flags, BenchConfig* c) {
  RETURN_IF_ERROR(flags.ApplyGiven(c));
  if (!c->model_name.empty()) {
    ASSIGN_OR_RETURN(const models::RegisteredModel m, models::FindModel(c->model_name));
    c->model = m.config;
    RETURN_IF_ERROR(flags.ApplyGiven(c));
  }
  if (!FlagGiven("max_position_embeddings")) c->model.max_position_embeddings = c->seq_length;
  if (c->model.family != models::Family::kGpt2) {
    return absl::InvalidArgumentError("train_step_bench runs GPT-family models");
  }
  if (c->steps < 1) return absl::InvalidArgumentError("--steps must be >= 1");
  if (c->num_micro_batches < 0) {
    return absl::InvalidArgumentError("--num_micro_batches must be >= 0 (0: 4 x PP)");
  }
  RETURN_IF_ERROR(comm::MakePipelineSplit(c->model.num_layers, c->pipeline_model_parallel_size,
                                          c->num_layers_per_virtual_pipeline_stage)
                      .status());
  RETURN_IF_ERROR(c->activations.Validate(c->tensor_model_parallel_size, c->seq_length));
  RETURN_IF_ERROR(c->activations.Recompute(c->recompute).status());
  return absl::OkStatus();
}

}  // namespace
}  // namespace experiments
}  // namespace mt

int main(int argc, char** argv) {
  using mt::experiments::BenchConfig;
  BenchConfig config;
  const mt::ConfigFlags<BenchConfig> flags(config, {"family", "compute_dtype"});
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  absl::Status s = mt::experiments::ResolveConfig(flags, &config);
  if (!s.ok()) {
    std::fprintf(stderr, "train_step_bench: error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  auto runtime = mt::comm::MpiRuntime::Init(&argc, &argv);
  if (!runtime.ok()) {
    std::fprintf(stderr, "train_step_bench: error: %s\n",
                 std::string(runtime.status().message()).c_str());
    return 1;
  }
  auto world = (*runtime)->World();
  if (!world.ok()) mt::comm::MpiRuntime::Abort(world.status());
  s = mt::experiments::Run(config, **runtime, **world);
  if (!s.ok()) mt::comm::MpiRuntime::Abort(s);
  return 0;
}
