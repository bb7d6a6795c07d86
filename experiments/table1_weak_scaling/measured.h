// Part (d) of table1_weak_scaling: the same training step measured on this machine's CPU at
// TP=1, TP=2 and DP=2 over MPI (experiments/benchmarks/train_step_bench under mpirun), with the
// performance model's prediction from inputs measured here: each run's GEMM rate, the
// shared-memory all-reduce latency and bandwidth (comm/comm_bench) and the memory bandwidth.
#ifndef MT_EXPERIMENTS_TABLE1_WEAK_SCALING_MEASURED_H_
#define MT_EXPERIMENTS_TABLE1_WEAK_SCALING_MEASURED_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {
namespace experiments {

struct MeasureConfig {
  std::string train_step_bench;  // Paths of the binaries.
  std::string comm_bench;
  int64_t hidden = 256, heads = 4, layers = 2, seq = 128, micro_batch = 4;
  int steps = 3;
  int64_t comm_max_bytes = 16 << 20;
};

// One measured configuration beside its prediction.
struct MeasuredRun {
  std::string name;  // "TP=1", "TP=2", "DP=2".
  int tp = 1, dp = 1;
  double gemm_gflops = 0;  // Per rank, measured by the run.
  double measured_s = 0;   // Median step time.
  double predicted_s = 0;
  std::string command;
};

struct Measurement {
  double allreduce_alpha_s = 0;        // Fitted: time = alpha + 2(n-1)/n bytes / bandwidth.
  double allreduce_bus_bandwidth = 0;  // Bytes/s.
  double mem_bandwidth_1thread = 0;    // Copy, bytes/s (read + write).
  double mem_bandwidth_all = 0;        // With every core.
  std::vector<std::pair<double, double>> allreduce_points;  // (bytes, seconds).
  std::vector<MeasuredRun> runs;
  std::string comm_command;
};

// The numbers printed after `prefix` on the first line of `text` containing it, e.g.
// NumberAfter(out, "step time (median of", ": ") for "step time (median of 3): 0.12 s".
absl::StatusOr<double> NumberAfter(absl::string_view text, absl::string_view line_prefix,
                                   absl::string_view marker);
// comm_bench's all-reduce rows: (bytes, seconds).
std::vector<std::pair<double, double>> ParseAllReduceRows(absl::string_view comm_bench_output);
// Least squares time = alpha + 2 (n - 1) / n * bytes / bandwidth over the rows.
std::pair<double, double> FitAllReduce(const std::vector<std::pair<double, double>>& rows,
                                       int ranks);

// Runs the three configurations and comm_bench under mpirun, and predicts each step time.
absl::StatusOr<Measurement> MeasureOnThisMachine(const MeasureConfig& config);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_TABLE1_WEAK_SCALING_MEASURED_H_
