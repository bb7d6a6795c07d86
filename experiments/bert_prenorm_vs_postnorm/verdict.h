// The tables and the finding of bert_prenorm_vs_postnorm from its runs' training curves: final
// losses per depth and norm (mean and spread over seeds, each seed's outcome), the curves averaged
// over seeds, and the sentences saying where post-norm degrades or diverges while pre-norm does
// not (or that it does not, with the flags that reach the regime).
#ifndef MT_EXPERIMENTS_BERT_PRENORM_VS_POSTNORM_VERDICT_H_
#define MT_EXPERIMENTS_BERT_PRENORM_VS_POSTNORM_VERDICT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "experiments/common/curves.h"
#include "experiments/common/report.h"

namespace mt {
namespace experiments {

// A run counts as stalled when its loss fell by less than this fraction (curves.h: Classify).
inline constexpr double kMinDrop = 0.05;

// One training run: its width, depth, norm position, seed, wall time and per-iteration loss.
struct NormRun {
  int64_t depth = 0;
  bool pre = false;  // Pre-norm (else post-norm).
  int64_t seed = 0;
  double seconds = 0;
  std::vector<LossPoint> curve;
  int64_t hidden = 0;
};

// The runs of one (width, depth, norm) over seeds.
struct NormFinal {
  int64_t depth = 0;
  bool pre = false;
  Spread final;  // Of the seeds' final losses (TailMean over the window).
  int diverged = 0, stalled = 0, learned = 0;
  double seconds = 0;  // Summed over seeds.
  int64_t hidden = 0;
  std::map<int64_t, double> by_seed;  // Each seed's final loss.
};

// The standard error of a group's mean final loss: sd / sqrt(n) (NaN when not finite or n < 2).
double StandardError(const Spread& s);

// Post-norm against pre-norm at one (width, depth): the gap of the means; its standard error
// taking the two groups as independent samples, sqrt(se_post^2 + se_pre^2), and gap / se; and,
// pairing the seeds both norms ran (one seed: the same batches and dropout for both), the
// standard error of the mean per-seed difference, sd(post_s - pre_s) / sqrt(pairs), and the mean
// difference over it (NaN with fewer than two pairs).
struct NormGap {
  int64_t hidden = 0, depth = 0;
  double gap = 0, se = 0, z = 0;
  int pairs = 0;
  double paired_se = 0, paired_z = 0;
};
NormGap Compare(const NormFinal& post, const NormFinal& pre);

// The CSV columns of today's results come first; the width (and, in final_losses.csv, the
// standard error and the ±1 sd band drawn on the plot) are appended, and "series" (norm and
// width, "post_h64") that the plots select rows by.
struct NormTables {
  Table curves{{"iteration", "depth", "norm", "seed", "loss", "hidden"}};
  Table mean_curves{{"series", "layers", "norm", "iteration", "mean_loss", "smoothed_loss",
                     "band_low", "band_high", "hidden"}};
  Table final_csv{{"layers", "norm", "seeds", "mean", "stddev", "min", "max", "diverged", "stalled",
                   "learned", "hidden", "stderr", "band_low", "band_high", "series"}};
  Table per_seed{{"layers", "norm", "seed", "final_loss", "outcome", "hidden", "series"}};
  Table final_table{{"hidden", "layers", "norm", "final loss (mean ± sd)", "standard error",
                     "range over seeds", "outcomes", "train time (s)"}};
  Table gaps_csv{{"hidden", "layers", "gap", "stderr", "z", "pairs", "paired_stderr", "paired_z"}};
  Table gap_table{{"hidden", "layers", "post - pre (mean)", "SE (independent)", "gap / SE",
                   "SE (paired by seed)", "gap / paired SE"}};
  std::vector<NormFinal> finals;  // In the order of the runs' first appearance.
  std::vector<NormGap> gaps;      // Per width, by depth, where both norms ran.
};

// Groups `runs` by (width, depth, norm) in order of first appearance. Final loss =
// TailMean(window); the mean curve is the per-iteration mean over seeds of the seeds' curves
// smoothed by a trailing MovingAverage(smooth), its band ±1 sample sd of those (NaN where a seed's
// loss is). Seeds of one group must log the same iterations (CHECK).
NormTables MakeNormTables(const std::vector<NormRun>& runs, int window, int smooth);

// Whether `gaps` (one width, by increasing depth) show the paper's finding: post-norm above
// pre-norm at the deepest setting by more than `min_z` standard errors (both the independent and
// the paired one), and the gap at the deepest above the gap at the shallowest.
bool ShowsFinding(const std::vector<NormGap>& gaps, double min_z);

// How many widths of `t` ShowsFinding(min_z), of how many with at least two depths.
struct Verdict {
  int shown = 0, measured = 0;
  bool supported() const { return measured > 0 && shown == measured; }
};
Verdict Judge(const NormTables& t, double min_z);

// The report's finding from `t` (both norms at each depth, one or more widths): per width and
// depth the gap post - pre with its standard error, whether the seeds' ranges separate, each
// norm's trend with depth; and the verdict (ShowsFinding with z > 3 at every width), which says
// plainly when post-norm does not degrade here and gives the flags that reach the regime.
std::string Finding(const NormTables& t, double lr, int64_t warmup_samples);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_BERT_PRENORM_VS_POSTNORM_VERDICT_H_
