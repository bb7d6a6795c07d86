// Training curves read back from the trainer's JSONL log (train/metrics_log.h), and the summary
// statistics the curve experiments report: means and spreads over seeds, the mean of a curve's
// first and last iterations, whether a run learned, stalled or diverged, and whether two groups
// of runs are separated. Used by bert_prenorm_vs_postnorm and gpt2_scaling_curves.
#ifndef MT_EXPERIMENTS_COMMON_CURVES_H_
#define MT_EXPERIMENTS_COMMON_CURVES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {
namespace experiments {

struct LossPoint {
  int64_t iteration = 0;
  double loss = 0;  // NaN when the log holds null (a non-finite loss).
};

// The points of a trainer JSONL log: "iteration" and the number under `key` ("loss": the total;
// "lm_loss", "sop_loss": its parts) of every line, in file order. NotFound naming the file if it
// cannot be opened; DataLoss naming the file and line for a malformed line or a missing key.
absl::StatusOr<std::vector<LossPoint>> ReadLossCurve(const std::string& path,
                                                     absl::string_view key = "loss");

// Mean, sample standard deviation (n - 1 in the denominator; 0 for one value), minimum and
// maximum of `values`. Every field is NaN when `values` is empty or holds a non-finite value.
struct Spread {
  int n = 0;
  double mean = 0, stddev = 0, min = 0, max = 0;
};
Spread Summarize(const std::vector<double>& values);

// The mean loss of the first / last `window` points (all of them when there are fewer); NaN when
// the curve is empty or one of those losses is non-finite. window >= 1.
double HeadMean(const std::vector<LossPoint>& curve, int window);
double TailMean(const std::vector<LossPoint>& curve, int window);

// How a run ended, from its curve: kDiverged when a loss is non-finite or the tail mean (last
// `window` points) is above the head mean (first `window`); kStalled when the tail mean fell by
// less than `min_drop` (a fraction, e.g. 0.05) of the head mean; kLearned otherwise.
enum class Outcome { kLearned, kStalled, kDiverged };
Outcome Classify(const std::vector<LossPoint>& curve, int window, double min_drop);
const char* OutcomeName(Outcome outcome);  // "learned", "stalled", "diverged".

// Whether every value of `higher` is above every value of `lower` (their ranges do not overlap):
// min(higher) > max(lower). False when either is empty or non-finite.
bool Separated(const Spread& higher, const Spread& lower);

// The trailing moving average of `values` over `window` points: out[i] is the mean of
// values[max(0, i - window + 1) .. i]; after a non-finite value every later one is NaN.
// window >= 1.
std::vector<double> MovingAverage(const std::vector<double>& values, int window);

// A comma-separated list of positive integers ("2,8,24"). InvalidArgument naming `flag` for an
// empty list or item, a non-integer, or a value < 1.
absl::StatusOr<std::vector<int64_t>> ParsePositiveList(absl::string_view flag,
                                                       absl::string_view text);

// Comma-separated KEY:VALUE pairs of positive integers ("32:1000,64:500"). InvalidArgument naming
// `flag` for an empty list or item, a pair without one ':', a part that is not a positive
// integer, or a key given twice.
absl::StatusOr<std::map<int64_t, int64_t>> ParsePositiveMap(absl::string_view flag,
                                                            absl::string_view text);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_COMMON_CURVES_H_
