// The tables and the finding of bert_prenorm_vs_postnorm from its runs' training curves: final
// losses per depth and norm (mean and spread over seeds, each seed's outcome), the curves averaged
// over seeds, and the sentences saying where post-norm degrades or diverges while pre-norm does
// not (or that it does not, with the flags that reach the regime).
#ifndef MT_EXPERIMENTS_BERT_PRENORM_VS_POSTNORM_VERDICT_H_
#define MT_EXPERIMENTS_BERT_PRENORM_VS_POSTNORM_VERDICT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "experiments/common/curves.h"
#include "experiments/common/report.h"

namespace mt {
namespace experiments {

// A run counts as stalled when its loss fell by less than this fraction (curves.h: Classify).
inline constexpr double kMinDrop = 0.05;

// One training run: its depth, norm position, seed, wall time and per-iteration training loss.
struct NormRun {
  int64_t depth = 0;
  bool pre = false;  // Pre-norm (else post-norm).
  int64_t seed = 0;
  double seconds = 0;
  std::vector<LossPoint> curve;
};

// The runs of one (depth, norm) over seeds.
struct NormFinal {
  int64_t depth = 0;
  bool pre = false;
  Spread final;  // Of the seeds' final losses (TailMean over the window).
  int diverged = 0, stalled = 0, learned = 0;
  double seconds = 0;  // Summed over seeds.
};

struct NormTables {
  Table curves{{"iteration", "depth", "norm", "seed", "loss"}};
  Table mean_curves{{"series", "layers", "norm", "iteration", "mean_loss", "smoothed_loss"}};
  Table final_csv{{"layers", "norm", "seeds", "mean", "stddev", "min", "max", "diverged", "stalled",
                   "learned"}};
  Table per_seed{{"layers", "norm", "seed", "final_loss", "outcome"}};
  Table final_table{{"layers", "norm", "final loss (mean ± sd)", "range over seeds", "outcomes",
                     "train time (s)"}};
  std::vector<NormFinal> finals;  // In the order of the runs' first appearance.
};

// Groups `runs` by (depth, norm) in order of first appearance. Final loss = TailMean(window);
// the mean curve is the per-iteration mean over seeds (NaN where a seed's loss is), smoothed by a
// trailing MovingAverage(smooth). Seeds of one group must log the same iterations (CHECK).
NormTables MakeNormTables(const std::vector<NormRun>& runs, int window, int smooth);

// The report's finding from `finals` (both norms at each depth): per depth the gap post - pre and
// whether the seeds' ranges separate; each norm's trend with depth; and the conclusion, which says
// plainly when post-norm does not degrade here and gives the flags (depth, learning rate, no
// warmup, width) that reach the regime.
std::string Finding(const std::vector<NormFinal>& finals, double lr, int64_t hidden);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_BERT_PRENORM_VS_POSTNORM_VERDICT_H_
