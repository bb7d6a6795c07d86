// train_step_bench's pipelined mode (PP > 1): see train_step_bench.cc.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "core/alloc.h"
#include "core/cuda_device.h"
#include "core/status.h"
#include "jobs/bench/train_step_bench.h"
#include "models/registry.h"
#include "models/stages.h"
#include "train/optimizer.h"
#include "train/pipeline_schedule.h"
#include "train/trainer.h"

namespace mt {
namespace jobs {
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

comm::Communicator* DpOf(comm::ParallelContext& parallel) {
  return parallel.dp_size() > 1 ? &parallel.dp() : nullptr;
}

// The stage's model chunks, their store, the schedule runner and the optimizer, as
// train::Trainer holds them.
struct Pipeline {
  std::unique_ptr<nn::ParameterStore> store;
  std::vector<std::unique_ptr<models::Model>> chunks;
  std::unique_ptr<train::PipelineRunner> runner;
  std::optional<train::Optimizer> optimizer;
};

absl::StatusOr<Pipeline> BuildPipeline(const BenchConfig& c, const comm::PipelineSplit& split,
                                       comm::ParallelContext& parallel, const Device& d) {
  Pipeline p;
  p.store = std::make_unique<nn::ParameterStore>(parallel.tp_rank(), parallel.tp_size(), d.dtype,
                                                 d.rank.exec.device);
  models::ModelOptions options;
  ASSIGN_OR_RETURN(options.recompute, c.activations.Recompute(c.recompute));
  options.sequence_parallel = c.activations.sequence_parallel;
  ASSIGN_OR_RETURN(p.chunks, models::CreateStageModels(c.model, p.store.get(), options, split,
                                                       parallel.pp_rank()));
  RETURN_IF_ERROR(p.store->Allocate(1));
  std::vector<models::Model*> chunk_ptrs;
  for (const auto& chunk : p.chunks) chunk_ptrs.push_back(chunk.get());
  train::ChunkFactory more;
  if (c.keep_stage_activations) {
    ASSIGN_OR_RETURN(
        more, train::StageChunkFactory(c.model, p.store.get(), options, split, parallel.pp_rank()));
  }
  ASSIGN_OR_RETURN(p.runner,
                   train::PipelineRunner::Create(&parallel.pp(), split, chunk_ptrs, &d.rank.exec,
                                                 p.store->compute_dtype(), std::move(more)));
  const int tied = p.runner->tied_embedding_handle();
  train::OptimizerConfig oc;
  oc.dp_bucket_elements = c.ddp_bucket_size;
  oc.use_distributed_optimizer = c.use_distributed_optimizer;
  ASSIGN_OR_RETURN(train::Optimizer o, train::Optimizer::Create(p.store.get(), oc, DpOf(parallel)));
  o.set_pipeline(&parallel.pp(), parallel.is_first_stage() ? -1 : tied, &parallel.embedding(),
                 tied);
  p.optimizer.emplace(std::move(o));
  return p;
}

// m micro-batches of random tokens and labels.
std::vector<train::OwnedBatch> RandomBatches(const BenchConfig& c, int m) {
  std::vector<train::OwnedBatch> owned(m);
  std::mt19937 rng(7);
  const int64_t n = c.micro_batch_size * c.seq_length;
  for (train::OwnedBatch& b : owned) {
    b.tokens = Tensor::Host({c.micro_batch_size, c.seq_length}, DType::kI32);
    b.labels = Tensor::Host({c.micro_batch_size, c.seq_length}, DType::kI32);
    for (int64_t i = 0; i < n; ++i) {
      b.tokens.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % c.model.vocab_size);
      b.labels.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % c.model.vocab_size);
    }
  }
  return owned;
}

// What the timed steps measured on this rank.
struct StepTimes {
  std::vector<double> times, schedule, wait;
  double flops = 0;  // Model FLOPs of this rank's chunks in one step.
  int64_t recomputed = 0;
};

// c.steps timed steps (after one warm-up step) through the pipeline schedule, as
// train::Trainer runs them. Collective over `world`.
absl::StatusOr<StepTimes> TimeSteps(const BenchConfig& c, comm::Communicator& world,
                                    comm::ParallelContext& parallel, const Device& d, int m,
                                    Pipeline& p) {
  std::vector<train::OwnedBatch> owned = RandomBatches(c, m);
  std::vector<models::Batch> batches;
  for (const train::OwnedBatch& b : owned) batches.push_back(b.view());
  comm::Communicator* dp = DpOf(parallel);
  comm::Communicator* tp = parallel.tp_or_null();
  train::Optimizer& o = *p.optimizer;
  StepTimes t;
  for (int step = 0; step <= c.steps; ++step) {  // Step 0 warms up.
    RETURN_IF_ERROR(world.Barrier());
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(p.store->ZeroGrads(d.rank.exec));
    nn::GradReadyListener* listener = o.BeginGradReduce(dp);
    auto micro_step = [&](int micro) {
      nn::StepContext sc =
          train::TrainingMicroStep(&d.rank.exec, parallel, 1, step, 0, c.micro_batch_size, micro);
      if (micro == m - 1) sc.grads_ready = listener;
      return sc;
    };
    double step_flops = 0;
    RETURN_IF_ERROR(
        p.runner->Run(batches, micro_step, models::Backward::kYes, 1.0, &step_flops).status());
    // The DP reduction and the sum of the tied embedding's copies over the first and last stage.
    RETURN_IF_ERROR(o.FinishGradReduce());
    RETURN_IF_ERROR(
        o.Step(d.rank.exec, tp, dp, 1e-4, static_cast<double>(m) * parallel.dp_size()).status());
    if (d.gpu) RETURN_IF_ERROR(cuda::Synchronize(d.rank.exec.device.index));
    RETURN_IF_ERROR(world.Barrier());
    if (step == 0) continue;
    t.times.push_back(Seconds(start));
    t.schedule.push_back(p.runner->stats().seconds);
    t.wait.push_back(p.runner->stats().wait_seconds);
    t.recomputed += p.runner->stats().recomputed;
    t.flops = step_flops;
  }
  return t;
}

// Every rank's PipelineField figures, [world.size() * kNumPipelineFields] on rank 0.
absl::StatusOr<Tensor> GatherFields(const BenchConfig& c, comm::Communicator& world,
                                    const comm::ParallelContext& parallel, const Pipeline& p,
                                    const StepTimes& t) {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  Tensor mine = Tensor::Host({kNumPipelineFields}, DType::kI64);
  Tensor all = Tensor::Host({world.size() * kNumPipelineFields}, DType::kI64);
  int64_t* f = mine.data_as<int64_t>();
  f[kStage] = parallel.pp_rank();
  f[kTpRank] = parallel.tp_rank();
  f[kDpRank] = parallel.dp_rank();
  f[kParameters] = p.store->NumLocalElements();
  f[kMomentElements] = p.optimizer->exp_avg().numel();
  f[kPeakRssKib] = usage.ru_maxrss;
  f[kScheduleNs] = std::llround(MedianOf(t.schedule) * 1e9);
  f[kWaitNs] = std::llround(MedianOf(t.wait) * 1e9);
  f[kRecomputed] = t.recomputed / c.steps;
  f[kInstances] = p.runner->stats().instances;
  f[kFlops] = std::llround(t.flops);
  RETURN_IF_ERROR(world.AllGather(mine.view(), all.view()));
  return all;
}

// Rank 0's report: the config, the step time against the GEMM rate, each stage's bubble, the DP
// reduction and every rank's memory.
void PrintReport(const BenchConfig& c, const comm::ParallelContext& parallel,
                 const comm::PipelineSplit& split, const Device& d, double gemm, int m,
                 const train::Optimizer& o, const StepTimes& t, const Tensor& all) {
  const int P = parallel.pp_size(), V = split.virtual_stages, dp_size = parallel.dp_size();
  const int ranks = static_cast<int>(all.numel() / kNumPipelineFields);
  const int64_t B = c.micro_batch_size, T = c.seq_length;
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
  const double median = MedianOf(t.times);
  const double per_rank_gflops = step_model_flops / median / ranks / 1e9;
  std::printf(
      "config: %s seq=%lld micro_batch=%lld micro_batches=%d tp=%d dp=%d pp=%d virtual_stages=%d "
      "ranks=%d threads/rank=%d recompute=%s sequence_parallel=%s distributed_optimizer=%s "
      "dtype=%s\n",
      ModelDescription(c).c_str(), static_cast<long long>(T), static_cast<long long>(B), m,
      parallel.tp_size(), dp_size, P, V, ranks, d.rank.threads, RecomputeName(c),
      c.activations.sequence_parallel ? "yes" : "no", o.distributed() ? "yes" : "no",
      std::string(DTypeName(d.dtype)).c_str());
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
  if (dp_size > 1) {
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
}

}  // namespace

// Timed steps through the pipeline schedule, as train::Trainer runs them (PP > 1; see the file
// comment). Collective over `world`.
absl::Status RunPipelined(const BenchConfig& c, comm::Communicator& world,
                          comm::ParallelContext& parallel, const Device& d, double gemm) {
  ASSIGN_OR_RETURN(const comm::PipelineSplit split,
                   comm::MakePipelineSplit(c.model.num_layers, c.pipeline_model_parallel_size,
                                           c.num_layers_per_virtual_pipeline_stage));
  ASSIGN_OR_RETURN(Pipeline p, BuildPipeline(c, split, parallel, d));
  const int m = c.num_micro_batches > 0 ? c.num_micro_batches : 4 * parallel.pp_size();
  ASSIGN_OR_RETURN(const StepTimes t, TimeSteps(c, world, parallel, d, m, p));
  ASSIGN_OR_RETURN(const Tensor all, GatherFields(c, world, parallel, p, t));
  if (world.rank() == 0) PrintReport(c, parallel, split, d, gemm, m, *p.optimizer, t, all);
  return absl::OkStatus();
}

}  // namespace bench
}  // namespace jobs
}  // namespace mt
