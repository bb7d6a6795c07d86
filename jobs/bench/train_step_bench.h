// The settings and shared helpers of train_step_bench (jobs/bench/train_step_bench.cc
// describes the benchmark): its flags, the rank's device and threads, the reference GEMM rate, and
// the pipelined mode (train_step_bench_pipelined.cc).
#ifndef MT_JOBS_BENCH_TRAIN_STEP_BENCH_H_
#define MT_JOBS_BENCH_TRAIN_STEP_BENCH_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/parallel_context.h"
#include "core/dtype.h"
#include "core/exec_context.h"
#include "core/rank_execution.h"
#include "jobs/pretrain/pretrain.h"
#include "models/config.h"

namespace mt {
namespace jobs {
namespace bench {

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
  // With DP > 1: "both" alternates steps with the gradient all-reduce overlapped with backward
  // and after it; "overlapped" or "after" runs only that kind, as a training run does.
  std::string dp_modes = "both";
  int threads = 0;
  bool recompute = false;
  DeviceType device = DeviceType::kCpu;
  bool bf16 = false;    // CPU: the model in bf16 (a GPU always runs bf16).
  bool fp16 = false;    // CPU: the model in f16.
  bool vs_f32 = false;  // CPU, 16-bit, one rank: an f32 copy of the model stepped in turn.
  bool caching_allocator = true;
  int gemm_rate_size = 0;
  int breakdown_steps = 3;
  std::string simd_target;       // CPU: our SIMD kernels' target (empty: the CPU's best).
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
    v("dp_modes", &self.dp_modes,
      "With DP > 1: both (alternate steps with the gradient all-reduce overlapped with backward "
      "and after it), overlapped or after (only that kind of step, as a training run).");
    v("threads", &self.threads, "Threads per rank (0: cores / ranks).");
    v("recompute", &self.recompute, "Activation checkpointing.");
    ActivationConfig::Fields(self.activations, v);
    v("device", &self.device, "cpu (f32) or cuda (bf16, rank r on GPU local_rank mod GPUs).",
      kDeviceTypeNames);
    v("bf16", &self.bf16,
      "CPU: parameters' compute copies, activations and gradients in bf16 (f32 masters and Adam "
      "state, f32 math inside the kernels), as pretrain_gpt --bf16.");
    v("fp16", &self.fp16, "CPU: the same in f16 (no loss scaling: random data, timing only).");
    v("vs_f32", &self.vs_f32,
      "CPU, with --bf16 or --fp16, one rank: also an f32 copy of the model, its steps taking "
      "turns with the 16-bit model's (f32 first in every other pair), and the 16-bit / f32 "
      "ratio of each pair: the comparison in one run, which the machine's drift moves far less "
      "than two separate runs (the memory lines then count both models).");
    v("caching_allocator", &self.caching_allocator,
      "With --device=cuda: tensors from a caching allocator.");
    v("gemm_rate_size", &self.gemm_rate_size,
      "Side of the square GEMM timed as the reference rate (0: 8192 on a GPU, 2048 on the CPU); "
      "small sizes only for smoke runs, e.g. under the CUDA emulator.");
    v("simd_target", &self.simd_target,
      "CPU: run our SIMD kernels at this target, one this CPU supports (e.g. AVX2 on an AVX-512 "
      "CPU, with ONEDNN_MAX_CPU_ISA and OPENBLAS_CORETYPE, to imitate an older CPU; empty: the "
      "best).");
    v("breakdown_steps", &self.breakdown_steps,
      "CPU: steps after the timed ones, sampled every millisecond to split the step time by op "
      "class (0: no breakdown).");
  }
};

// Seconds since `a`.
double Seconds(std::chrono::steady_clock::time_point a);

// The side of the reference GEMM.
int64_t GemmRateSize(int flag, bool gpu);

// CPU GEMM rate (GFLOP/s) of this rank's threads for `dtype` operands (a 16-bit C): best of 10
// runs of an n^3 product after a warm-up; on a shared machine the best of a few 0.1 s runs is
// often a loaded one.
double GemmGflops(const ExecContext& ec, int64_t n, DType dtype = DType::kF32);

// bf16 GEMM rate (GFLOP/s) of the GPU (cuBLASLt, f32 accumulation): best of 20 runs of an n^3
// product after a warm-up (random data: a GPU's clocks and power depend on the bits it multiplies).
double GpuGemmGflops(const ExecContext& ec, int64_t n);

// What one rank runs on (threads, and on a GPU its context and allocator), and whether it is a GPU.
struct Device {
  RankExecution rank;
  bool gpu = false;
  DType dtype = DType::kF32;  // The model's compute dtype (bf16 on a GPU).
  double f32_gemm = 0;        // CPU, dtype not f32: the f32 GEMM rate too (GFLOP/s), for reference.
};
absl::StatusOr<std::unique_ptr<Device>> SetUpDevice(const BenchConfig& c, int local_rank,
                                                    int local_size);

// The reference GEMM rate's line(s): the device or the BLAS, and the rate `gemm` (GFLOP/s) in the
// model's dtype (and the f32 rate beside it for a 16-bit model on the CPU).
void PrintGemmRate(const BenchConfig& c, const Device& d, double gemm);

// "no", "full" or "selective".
const char* RecomputeName(const BenchConfig& c);

// The model part of the config line: "model=NAME architecture=A layers=L hidden=H heads=N".
std::string ModelDescription(const BenchConfig& c);

// The median of a non-empty `v`.
double MedianOf(std::vector<double> v);

// The pipelined mode (PP > 1; train_step_bench_pipelined.cc): steps through the schedule as the
// trainer runs them and rank 0 prints the report. `gemm`: this rank's GEMM rate. Errors: the
// model's, the runner's and the communicators'.
absl::Status RunPipelined(const BenchConfig& c, comm::Communicator& world,
                          comm::ParallelContext& parallel, const Device& d, double gemm);

}  // namespace bench
}  // namespace jobs
}  // namespace mt

#endif  // MT_JOBS_BENCH_TRAIN_STEP_BENCH_H_
