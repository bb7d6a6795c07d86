// train_step_bench's pipelined mode (PP > 1): see train_step_bench.cc.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "core/alloc.h"
#include "core/cuda_device.h"
#include "core/status.h"
#include "experiments/benchmarks/train_step_bench.h"
#include "models/registry.h"
#include "train/optimizer.h"
#include "train/pipeline_schedule.h"

namespace mt {
namespace experiments {
namespace bench {
namespace {

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
}  // namespace

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
        4.0 * (o.masters_sharded() ? field(r, kMomentElements) : field(r, kParameters)) / mib,
        4.0 * field(r, kParameters) / mib, 8.0 * field(r, kMomentElements) / mib,
        static_cast<long long>(field(r, kMomentElements)),
        o.distributed() ? "a 1/DP shard" : "unsharded", field(r, kPeakRssKib) / 1024.0);
  }
  return absl::OkStatus();
}

}  // namespace bench
}  // namespace experiments
}  // namespace mt
