// Training-step benchmark: tokens/s and model TFLOP/s (Megatron's formula, models/flops.h) of full
// training steps of any registered GPT-family model (--model; GPT-2 by default) (forward, backward,
// optimizer), with the ratio to this machine's own GEMM rate measured in the same run: the CPU's
// f32 rate with the same threads, or with --device=cuda the GPU's bf16 rate (cuBLASLt, f32
// accumulation) and the model in bf16 (model FLOP utilisation, MFU). Run under mpirun for TP > 1 or
// DP > 1:
//
//   bazel-bin/jobs/bench/train_step_bench --hidden_size=512 --num_layers=4
//   mpirun -np 2 bazel-bin/jobs/bench/train_step_bench --tensor_model_parallel_size=2
//   mpirun -np 2 bazel-bin/jobs/bench/train_step_bench   # DP = 2
//
// Ranks beyond the TP degree are data-parallel (each runs --micro_batch_size samples). With DP > 1
// the steps alternate between the DP gradient all-reduce overlapped with backward and the
// all-reduce after backward, and both step times, their ratio and the all-reduce time left after
// backward ("exposed") are printed.
// Every rank uses --threads threads (default: cores / ranks).
// --use_distributed_optimizer shards both optimizers' Adam moments over the DP ranks (ZeRO stage 1,
// train/distributed_optimizer.h), and on a GPU (bf16) the f32 masters too, which leaves one
// optimizer for both kinds of step; the report gives the masters and optimizer state each rank
// holds and every rank's peak resident set (getrusage), to measure what sharding saves.
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
//   mpirun -np 4 bazel-bin/jobs/bench/train_step_bench
//       --pipeline_model_parallel_size=2 --use_distributed_optimizer   # PP = 2 x DP = 2
//
// On the CPU it also prints the OpenBLAS kernel in use (core/openblas.h) and, from
// --breakdown_steps more steps run under a sampling profiler (step_profile.h), where rank 0's
// step time goes by op class (GEMM, attention, element-wise, LayerNorm, loss, optimizer,
// communication, other), with the GEMMs' achieved rate next to the GEMM rate: the gap, by class.
#include "jobs/bench/train_step_bench.h"

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

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_main.h"
#include "comm/parallel_context.h"
#include "core/alloc.h"
#include "core/config_flags.h"
#include "core/cuda_device.h"
#include "core/ops/gemm.h"
#include "core/rank_execution.h"
#include "core/simd.h"
#include "core/status.h"
#include "gflags/gflags.h"
#include "jobs/bench/step_profile.h"
#include "jobs/pretrain/pretrain.h"
#include "models/flops.h"
#include "models/registry.h"
#include "train/optimizer.h"

namespace mt {
namespace jobs {
namespace {

using bench::BenchConfig;
using bench::Device;
using bench::MedianOf;
using bench::PrintGemmRate;
using bench::RecomputeName;
using bench::Seconds;

// Timed training steps; index 0 with the DP all-reduce overlapped with backward, 1 after it (only
// with DP > 1). On the CPU, the op-class profile of --breakdown_steps more (overlapped) steps.
struct Timings {
  std::vector<double> times[2], exposed[2];
  int64_t started_in_backward = 0;
  int64_t buckets = 0;
  int64_t moment_elements = 0;  // Of one optimizer's exp_avg on this rank.
  int64_t master_elements = 0;  // f32 masters on this rank (a 1/DP shard when sharded).
  int optimizers = 1;
  int64_t part_buffers = 0;  // Distributed optimizer (overlapped): bucket-part buffers.
  double part_buffer_mib = 0;
  std::vector<double> profiled;  // The sampled steps' times.
  StackSampler::Profile profile;
  std::vector<double> f32_times;  // --vs_f32: the f32 copy's steps, paired with times[0]'s.
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
  // overlap = false: the listener is dropped, so every bucket is reduced after backward.
  absl::StatusOr<std::pair<double, double>> Run(train::Optimizer& o, int step,
                                                int64_t* started_in_backward, bool overlap = true) {
    RETURN_IF_ERROR(world.Barrier());
    auto start = std::chrono::steady_clock::now();
    sc.micro_step = step;
    RETURN_IF_ERROR(store.ZeroGrads(d.rank.exec));
    sc.grads_ready = o.BeginGradReduce(dp);
    if (!overlap) sc.grads_ready = nullptr;
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
                          int first_step, int mode, Timings* t) {
  const double expected = c.breakdown_steps * MedianOf(t->times[mode]) / kSampleInterval;
  ASSIGN_OR_RETURN(auto sampler,
                   StackSampler::Create(kSampleInterval, static_cast<int64_t>(2 * expected) + 1000,
                                        &ops::OneDnnCallsOnThisThread));
  for (int i = 0; i < c.breakdown_steps; ++i) {
    RETURN_IF_ERROR(sampler->Start());
    auto step = run.Run(o, first_step + i, nullptr, /*overlap=*/mode == 0);
    sampler->Stop();
    RETURN_IF_ERROR(step.status());
    t->profiled.push_back(step->first);
  }
  if (run.world.rank() == 0) t->profile = sampler->Summarize();
  return absl::OkStatus();
}

// --vs_f32: the f32 copy of the model whose steps take turns with the timed model's.
struct F32Partner {
  nn::ParameterStore& store;
  models::Model& model;
  nn::StepContext& sc;
};

absl::StatusOr<Timings> TimeSteps(const BenchConfig& c, comm::Communicator& world,
                                  comm::ParallelContext& parallel, const Device& d,
                                  nn::ParameterStore& store, models::Model& model,
                                  const models::Batch& batch, nn::StepContext& sc,
                                  const F32Partner* partner) {
  train::OptimizerConfig oc;
  oc.dp_bucket_elements = c.ddp_bucket_size;
  oc.overlap_grad_reduce = true;
  oc.use_distributed_optimizer = c.use_distributed_optimizer;
  comm::Communicator* dp = parallel.dp_size() > 1 ? &parallel.dp() : nullptr;
  ASSIGN_OR_RETURN(train::Optimizer overlapped, train::Optimizer::Create(&store, oc, dp));
  // The after-backward optimizer (its own Adam moments, as large as the parameters twice over)
  // exists only when there is a DP all-reduce to compare: without DP it would be dead memory in
  // the peak RSS.
  // An optimizer that shards the f32 masters (bf16 compute) takes them from the store, so there
  // can be only one: it runs the after-backward steps too, with the overlap listener dropped.
  std::optional<train::Optimizer> after;
  if (dp != nullptr && !overlapped.masters_sharded() && c.dp_modes != "overlapped") {
    oc.overlap_grad_reduce = false;
    ASSIGN_OR_RETURN(after, train::Optimizer::Create(&store, oc, dp));
  }
  StepRunner run{world, dp, d, store, model, batch, sc};
  Timings t;
  std::optional<train::Optimizer> partner_optimizer;
  std::optional<StepRunner> partner_run;
  if (partner != nullptr) {  // One rank (ResolveConfig, Run): no DP.
    ASSIGN_OR_RETURN(partner_optimizer, train::Optimizer::Create(&partner->store, oc, nullptr));
    partner_run.emplace(
        StepRunner{world, nullptr, d, partner->store, partner->model, batch, partner->sc});
  }
  // The partner's step before the timed model's in even steps, after it in odd ones: neither
  // always follows the other (whose memory traffic leaves the caches and pages as it does).
  auto partner_step = [&](int step) -> absl::Status {
    ASSIGN_OR_RETURN(auto times, partner_run->Run(*partner_optimizer, step, nullptr));
    if (step >= 1) t.f32_times.push_back(times.first);
    return absl::OkStatus();
  };
  // The kinds of step timed: index 0 overlapped, 1 after backward (by the after-backward
  // optimizer: each bucket all-reduced and waited for in turn after backward, as pretrain_gpt
  // --overlap_grad_reduce=false).
  std::vector<int> kinds = {0};
  if (dp != nullptr && c.dp_modes == "both") kinds = {0, 1};
  if (dp != nullptr && c.dp_modes == "after") kinds = {1};
  const int modes = static_cast<int>(kinds.size());
  for (int step = 0; step < (c.steps + 1) * modes; ++step) {
    const int mode = kinds[step % modes];
    if (partner_run && step % 2 == 0) RETURN_IF_ERROR(partner_step(step));
    ASSIGN_OR_RETURN(auto times, run.Run(mode == 0 || !after ? overlapped : *after, step,
                                         mode == 0 ? &t.started_in_backward : nullptr,
                                         /*overlap=*/mode == 0));
    if (step >= modes) {  // The first step of each mode warms up.
      t.times[mode].push_back(times.first);
      t.exposed[mode].push_back(times.second);
    }
    if (partner_run && step % 2 == 1) RETURN_IF_ERROR(partner_step(step));
  }
  t.buckets = overlapped.grad_reducer().num_buckets();
  t.moment_elements = overlapped.exp_avg().numel();
  t.master_elements =
      overlapped.masters_sharded() ? overlapped.exp_avg().numel() : store.NumLocalElements();
  t.optimizers = after ? 2 : 1;
  if (const train::DistributedOptimizerState* dist = overlapped.distributed_state()) {
    t.part_buffers = dist->part_buffers();
    t.part_buffer_mib = 4.0 * dist->part_buffer_elements() / 1048576.0;
  }
  if (!d.gpu && c.breakdown_steps > 0) {
    RETURN_IF_ERROR(ProfileSteps(c, run, overlapped, (c.steps + 1) * modes, kinds[0], &t));
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

// --vs_f32: the f32 copy's median step and the median of the pairs' 16-bit / f32 ratios, then
// each side's fastest step and their ratio (one rank, so the timed steps are times[0]).
void PrintF32Pairs(const Device& d, const Timings& t) {
  std::vector<double> ratios;
  for (size_t i = 0; i < t.f32_times.size() && i < t.times[0].size(); ++i) {
    ratios.push_back(t.times[0][i] / t.f32_times[i]);
  }
  const std::string dtype(DTypeName(d.dtype));
  std::printf(
      "f32 copy, its steps taking turns with these (median of %zu): %.3f s | %s / f32: median "
      "of the %zu pairs' ratios %.3f (lowest %.3f, highest %.3f)\n",
      t.f32_times.size(), MedianOf(t.f32_times), dtype.c_str(), ratios.size(), MedianOf(ratios),
      *std::min_element(ratios.begin(), ratios.end()),
      *std::max_element(ratios.begin(), ratios.end()));
  // A busy machine only ever adds time, so each side's fastest step is its least disturbed one.
  const double best = *std::min_element(t.times[0].begin(), t.times[0].end());
  const double best_f32 = *std::min_element(t.f32_times.begin(), t.f32_times.end());
  std::printf("fastest steps: %s %.3f s, f32 %.3f s | %s / f32: %.3f\n", dtype.c_str(), best,
              best_f32, dtype.c_str(), best / best_f32);
}

void Report(const BenchConfig& c, const comm::ParallelContext& parallel, const Device& d,
            const models::Model& model, int64_t parameters, double gemm, const Timings& t,
            const models::Model::ActivationBytes& act, size_t device_in_use, size_t peak_bytes) {
  const models::ModelConfig& mc = model.config();
  const int64_t B = c.micro_batch_size, T = c.seq_length;
  const int dp_size = parallel.dp_size(), ranks = parallel.world_size();
  const bool has_dp = dp_size > 1;
  const bool sharded = c.use_distributed_optimizer && has_dp;
  // The kind of step the headline times are of: overlapped, unless only after-backward ran.
  const int main_kind = t.times[0].empty() ? 1 : 0;
  const char* kind_label = !has_dp          ? ""
                           : main_kind == 0 ? ", DP all-reduce overlapped"
                                            : ", DP all-reduce after backward";
  const double median = MedianOf(t.times[main_kind]);
  const double flops = model.TrainingFlops(B * dp_size, T, B * dp_size * T);
  const double per_rank_gflops = flops / median / ranks / 1e9;
  std::printf(
      "config: %s seq=%lld batch=%lld vocab=%lld (padded %lld) tp=%d dp=%d ranks=%d "
      "threads/rank=%d recompute=%s sequence_parallel=%s dtype=%s\n",
      ModelDescription(c).c_str(), static_cast<long long>(T), static_cast<long long>(B),
      static_cast<long long>(mc.vocab_size), static_cast<long long>(model.padded_vocab()),
      parallel.tp_size(), dp_size, ranks, d.rank.threads, RecomputeName(c),
      c.activations.sequence_parallel ? "yes" : "no", std::string(DTypeName(d.dtype)).c_str());
  std::printf("parameters: %lld\n", static_cast<long long>(parameters));
  PrintGemmRate(c, d, gemm);
  std::printf(
      "step time (median of %d%s): %.3f s | tokens/s: %.0f | model TFLOP/s per rank: %.4f | "
      "ratio to GEMM rate%s: %.1f%%\n",
      c.steps, kind_label, median, B * T * dp_size / median, per_rank_gflops / 1e3,
      d.gpu ? " (MFU)" : "", 100.0 * per_rank_gflops / gemm);
  std::printf("step time (best of %d%s): %.3f s\n", c.steps, kind_label,
              *std::min_element(t.times[main_kind].begin(), t.times[main_kind].end()));
  if (!t.f32_times.empty()) PrintF32Pairs(d, t);
  if (d.gpu) {
    std::printf("device memory in use after a forward pass (cudaMemGetInfo): %.2f GiB\n",
                device_in_use / 1073741824.0);
  }
  if (has_dp) {
    std::printf(
        "DP gradient all-reduce, %lld buckets of <= %lld elements (%lld started during "
        "backward when overlapped):\n",
        static_cast<long long>(t.buckets), static_cast<long long>(c.ddp_bucket_size),
        static_cast<long long>(t.started_in_backward));
    const char* names[2] = {"overlapped with backward:", "after backward:          "};
    for (int k = 0; k < 2; ++k) {
      if (t.times[k].empty()) continue;
      std::printf("  %s step %.3f s, exposed after backward %.1f ms\n", names[k],
                  MedianOf(t.times[k]), MedianOf(t.exposed[k]) * 1e3);
    }
    if (!t.times[0].empty() && !t.times[1].empty()) {
      std::printf("  step time overlapped / after: %.3f\n",
                  MedianOf(t.times[0]) / MedianOf(t.times[1]));
    }
    if (sharded) {
      std::printf(
          "  (distributed optimizer: each bucket reduce-scattered, the updated weights "
          "all-gathered; "
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
      "memory per rank (rank 0): f32 masters %.1f MiB (%s), f32 gradients %.1f MiB, Adam "
      "moments %.1f MiB per optimizer (%lld elements each: %s)%s\n",
      4.0 * t.master_elements / mib, t.master_elements < local ? "a 1/DP shard" : "whole",
      4 * local / mib, 8.0 * t.moment_elements / mib, static_cast<long long>(t.moment_elements),
      c.use_distributed_optimizer && dp_size > 1 ? "a 1/DP shard" : "unsharded",
      t.optimizers > 1 ? "; two optimizers exist (overlapped and after-backward steps)" : "");
  std::printf("peak RSS per rank (getrusage):");
  for (int r = 0; r < world.size(); ++r) {
    std::printf(" %.1f MiB", all.data_as<int64_t>()[r] / 1024.0);
  }
  std::printf("\n");
  return absl::OkStatus();
}

// The target --simd_target names among this CPU's; InvalidArgument listing them otherwise.
absl::StatusOr<SimdTarget> FindSimdTarget(const std::string& name) {
  std::vector<std::string> names;
  for (const SimdTarget& t : SimdTargets()) {
    if (t.name == name) return t;
    names.push_back(t.name);
  }
  return absl::InvalidArgumentError(absl::StrCat("--simd_target=", name,
                                                 ": not a SIMD target of this CPU (it has ",
                                                 absl::StrJoin(names, ", "), ")"));
}

absl::Status Run(const BenchConfig& c, const comm::MpiProcess& process) {
  std::optional<ScopedSimdTarget> simd;  // Before any kernel runs.
  if (!c.simd_target.empty()) {
    ASSIGN_OR_RETURN(const SimdTarget target, FindSimdTarget(c.simd_target));
    simd.emplace(target);
  }
  comm::Communicator& world = process.world;
  comm::ParallelConfig pc;
  pc.tensor_parallel = c.tensor_model_parallel_size;
  pc.pipeline_parallel = c.pipeline_model_parallel_size;
  ASSIGN_OR_RETURN(auto parallel,
                   comm::ParallelContext::Create(world, pc, c.model.num_attention_heads));
  ASSIGN_OR_RETURN(auto d, bench::SetUpDevice(c, process.local_rank, process.local_size));
  // Measure every rank's GEMM rate at once (they share the machine as in training).
  const int64_t n = bench::GemmRateSize(c.gemm_rate_size, d->gpu);
  const double gemm =
      d->gpu ? bench::GpuGemmGflops(d->rank.exec, n) : bench::GemmGflops(d->rank.exec, n, d->dtype);
  if (!d->gpu && d->dtype != DType::kF32) d->f32_gemm = bench::GemmGflops(d->rank.exec, n);
  if (parallel->pp_size() > 1) return bench::RunPipelined(c, world, *parallel, *d, gemm);

  nn::ParameterStore store(parallel->tp_rank(), parallel->tp_size(), d->dtype, d->rank.exec.device);
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
  nn::StepContext sc = nn::StepContext::Train(&d->rank.exec, parallel->tp_or_null(), 1);
  // --vs_f32: the same model in f32, from the same seed.
  std::optional<nn::ParameterStore> f32_store;
  std::unique_ptr<models::Model> f32_model;
  std::optional<nn::StepContext> f32_sc;
  std::optional<F32Partner> partner;
  if (c.vs_f32) {
    if (world.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat("--vs_f32 runs one rank, not ", world.size()));
    }
    f32_store.emplace(0, 1, DType::kF32, d->rank.exec.device);
    ASSIGN_OR_RETURN(f32_model, models::CreateModel(c.model, &*f32_store, options));
    RETURN_IF_ERROR(f32_store->Allocate(1));
    f32_sc.emplace(nn::StepContext::Train(&d->rank.exec, nullptr, 1));
    partner.emplace(F32Partner{*f32_store, *f32_model, *f32_sc});
  }
  ASSIGN_OR_RETURN(Timings t, TimeSteps(c, world, *parallel, *d, store, *model, batch, sc,
                                        partner ? &*partner : nullptr));
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
  if (c->dp_modes != "both" && c->dp_modes != "overlapped" && c->dp_modes != "after") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dp_modes must be both, overlapped or after, not '", c->dp_modes, "'"));
  }
  if (c->num_micro_batches < 0) {
    return absl::InvalidArgumentError("--num_micro_batches must be >= 0 (0: 4 x PP)");
  }
  RETURN_IF_ERROR(comm::MakePipelineSplit(c->model.num_layers, c->pipeline_model_parallel_size,
                                          c->num_layers_per_virtual_pipeline_stage)
                      .status());
  RETURN_IF_ERROR(c->activations.Validate(c->tensor_model_parallel_size, c->seq_length));
  RETURN_IF_ERROR(c->activations.Recompute(c->recompute).status());
  if (!c->simd_target.empty()) RETURN_IF_ERROR(FindSimdTarget(c->simd_target).status());
  if (c->vs_f32 && (c->device != DeviceType::kCpu || !(c->bf16 || c->fp16) ||
                    c->pipeline_model_parallel_size > 1)) {
    return absl::InvalidArgumentError(
        "--vs_f32 compares a CPU model's --bf16 or --fp16 steps with f32 ones, without pipeline "
        "stages");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace jobs
}  // namespace mt

int main(int argc, char** argv) {
  using mt::jobs::BenchConfig;
  BenchConfig config;
  const mt::ConfigFlags<BenchConfig> flags(config, {"family", "compute_dtype"});
  return mt::comm::MpiMain(
      argc, argv, {"train_step_bench", "Full training steps of a GPT-family model, timed."},
      [&](int) { return mt::jobs::ResolveConfig(flags, &config); },
      [&](const mt::comm::MpiProcess& p) -> absl::StatusOr<int> {
        RETURN_IF_ERROR(mt::jobs::Run(config, p));
        return 0;
      });
}
