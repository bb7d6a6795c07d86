// The paper's numbers for Table 1, the heads table and strong scaling, and the performance
// model's predictions for them (perf_model.h), as report tables and CSV rows.
#ifndef MT_EXPERIMENTS_TABLE1_WEAK_SCALING_TABLES_H_
#define MT_EXPERIMENTS_TABLE1_WEAK_SCALING_TABLES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "experiments/common/perf_model.h"
#include "experiments/common/report.h"
#include "models/config.h"

namespace mt {
namespace experiments {

// One row of the paper's Table 1 (Shoeybi et al. 2019) with the registry's model.
struct PaperConfig {
  std::string label;  // "1.2B" as the paper writes it.
  std::string model;  // Registered name.
  int mp_gpus = 1;
  double mp_pct = 0, mp_dp_pct = 0;
};
const std::vector<PaperConfig>& PaperTable1();

// The workload of model `mc` at TP `tp` x DP `dp` (parameter count and padded vocabulary from
// models/count.h), `micro_batch` samples of `seq` tokens per model replica.
absl::StatusOr<perf::Workload> WorkloadOf(const models::ModelConfig& mc, int tp, int dp,
                                          int64_t seq, int64_t micro_batch);

// The workload of a registered model at TP `tp` x DP `dp` (parameter counts and padded vocabulary
// from the registry), batch 8 per model replica, sequence 1024.
absl::StatusOr<perf::Workload> RegistryWorkload(const std::string& model, int tp, int dp,
                                                int heads_override = 0);

struct Table1Results {
  Table efficiency{{"params", "gpus", "mode", "paper_pct", "model_pct"}};
  Table parameters{{"params", "model", "layers", "hidden", "heads", "parameters (registry)",
                    "per rank at MP", "padded vocab"}};
  Table breakdown{{"config", "GEMM (s)", "element-wise (s)", "TP all-reduce (s)", "logits+loss (s)",
                   "optimizer (s)", "DP exposed (s)", "iteration (s)", "model TFLOP/s per GPU"}};
  Table heads{{"heads", "head dim", "paper_pct", "model_pct"}};
  Table strong{{"gpus", "paper_speedup", "model_speedup"}};
  Table sensitivity{{"parameter", "value",
                     "x0.8: MP 2.5B/4.2B/8.3B, MP+DP 8.3B, heads16, "
                     "strong x8",
                     "x1.2: same"}};
  double baseline_tflops = 0;
  int mp_within3 = 0, mp_dp_within4 = 0, heads_within4 = 0, strong_within10 = 0;
};
absl::StatusOr<Table1Results> ComputeTable1(const perf::Hardware& hw, const perf::Software& sw);

// The four configurations and larger ones on H200 nodes, for the 2019 software and a fused one:
// weak-scaling efficiency relative to the 1.2B model on one H200 (which can exceed 100% where
// the baseline itself runs far below the GPU's rate), and the absolute model TFLOP/s per GPU
// with its percentage of the H200's dense bf16 peak, which cannot.
struct H200Results {
  Table table{{"model", "layers/hidden/heads", "TP", "TP x DP GPUs", "MP % (2019 sw)",
               "MP+DP % (2019 sw)", "MP % (fused)", "MP+DP % (fused)",
               "MP TFLOP/s per GPU (% of peak), 2019 sw", "MP+DP TFLOP/s (% of peak), 2019 sw",
               "MP TFLOP/s (% of peak), fused", "MP+DP TFLOP/s (% of peak), fused"}};
  double baseline_tflops_2019 = 0, baseline_tflops_fused = 0;  // 1.2B on one H200.
  double max_pct_of_peak = 0;                                  // Over every cell.
  std::vector<double> gemm_share;  // Per row: the GEMMs' share of the MP iteration (2019 sw).
};
absl::StatusOr<H200Results> ComputeH200(const perf::Software& sw_2019, const perf::Software& fused);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_TABLE1_WEAK_SCALING_TABLES_H_
