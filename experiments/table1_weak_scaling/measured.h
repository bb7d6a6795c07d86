// Part (d) of table1_weak_scaling: the same training step measured on this machine's CPU at
// TP=1, TP=2 and DP=2 over MPI (jobs/bench/train_step_bench under mpirun), with the
// prediction from inputs measured here: each rank's compute by part at its own shapes and thread
// count (step_op_bench, run with as many copies as the configuration has ranks), the shared-memory
// all-reduce latency and bandwidth (comm/comm_bench), and perf_model.h's element-wise kernels.
#ifndef MT_EXPERIMENTS_TABLE1_WEAK_SCALING_MEASURED_H_
#define MT_EXPERIMENTS_TABLE1_WEAK_SCALING_MEASURED_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "experiments/common/bench_parse.h"
#include "experiments/common/perf_model.h"

namespace mt {
namespace experiments {

struct MeasureConfig {
  std::string train_step_bench;  // Paths of the binaries.
  std::string comm_bench;
  std::string step_op_bench;
  int64_t hidden = 256, heads = 4, layers = 2, seq = 128, micro_batch = 4;
  int steps = 3;
  // Rounds of (op timings, training steps) per configuration; every measured time is the least
  // over them (other jobs on a shared machine only slow a run down).
  int rounds = 3;
  int breakdown_steps = 2;  // Profiled steps in the last round.
  int64_t comm_max_bytes = 16 << 20;
  int cores = 2;                         // Of this machine: a rank runs cores / ranks threads.
  int64_t dp_bucket_elements = 1 << 20;  // train_step_bench's --ddp_bucket_size default.
};

// One rank's compute per step by part, timed by step_op_bench at its shapes and threads while
// the configuration's other ranks run the same (seconds), and its copy bandwidth (bytes/s).
struct OpTimes {
  double gemm = 0, attention = 0, layernorm = 0, loss = 0, optimizer = 0;
  double copy_bandwidth = 0;
};

// The predicted step of one rank, by part (seconds).
struct PredictedStep {
  OpTimes ops;             // The measured parts, as they are.
  double elementwise = 0;  // perf_model.h's element-wise kernels at the measured copy bandwidth.
  double tp_comm = 0;      // The TP all-reduces: 4 per layer and 2 in the head.
  double dp_comm = 0;      // The DP gradient all-reduce, one ring per bucket, not hidden.
  double total() const {
    return ops.gemm + ops.attention + ops.layernorm + ops.loss + ops.optimizer + elementwise +
           tp_comm + dp_comm;
  }
};

// The shapes of one measured configuration (tp x dp ranks, f32, no recompute): the performance
// model's workload and the DP bucket size.
struct StepShape : perf::Workload {
  int64_t dp_bucket_elements = 1 << 20;
};

// One measured configuration beside its prediction.
struct MeasuredRun {
  std::string name;  // "TP=1", "TP=2", "DP=2".
  int tp = 1, dp = 1;
  int threads = 1;         // Per rank.
  double gemm_gflops = 0;  // Per rank, train_step_bench's reference square GEMM.
  double measured_s = 0;   // Best step time over the steps and rounds.
  OpTimes ops;
  PredictedStep predicted;
  // Rank 0's sampled profile of the last round's extra steps (train_step_bench
  // --breakdown_steps): seconds per step by op class, in its order.
  std::vector<std::pair<std::string, double>> profile;
  std::string command, op_command;
};

struct Measurement {
  double allreduce_alpha_s = 0;        // time = alpha + 2(n-1)/n bytes / bandwidth.
  double allreduce_bus_bandwidth = 0;  // Bytes/s.
  std::vector<std::pair<double, double>> allreduce_points;  // (bytes, seconds).
  std::vector<MeasuredRun> runs;
  std::string comm_command;
};

// train_step_bench's "step breakdown by op class" rows: (class, seconds per step); empty when
// it printed none.
std::vector<std::pair<std::string, double>> ParseStepProfile(absl::string_view output);
// step_op_bench's output; NotFound when a part is missing.
absl::StatusOr<OpTimes> ParseOpTimes(absl::string_view step_op_bench_output);

// The step of one rank: the measured parts, perf_model.h's element-wise kernels (f32, no
// recompute) at the measured copy bandwidth, the TP all-reduces of the [B*T, H] activations and
// the DP gradient all-reduce (f32, one ring per bucket; on CPU cores that also compute, nothing of
// it is hidden) at the fitted latency and bandwidth.
PredictedStep PredictStep(const StepShape& s, const OpTimes& ops, double alpha,
                          double bus_bandwidth);

// Runs comm_bench, then `rounds` times over the configurations step_op_bench and train_step_bench
// under mpirun, and predicts each step time.
absl::StatusOr<Measurement> MeasureOnThisMachine(const MeasureConfig& config);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_TABLE1_WEAK_SCALING_MEASURED_H_
