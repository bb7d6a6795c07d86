// Binomial statistics for the experiments' accuracies: a confidence interval for a proportion,
// the one-sided test of an accuracy against chance, and of one predictor against another.
#ifndef MT_EXPERIMENTS_COMMON_STATS_H_
#define MT_EXPERIMENTS_COMMON_STATS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace mt {
namespace experiments {

struct Interval {
  double low = 0, high = 0;
};

// The Wilson score interval of k successes in n trials at two-sided level 1 - alpha, where
// `z` is the normal quantile (1.959964 for 95%). {0, 1} when n == 0. Requires 0 <= k <= n.
Interval WilsonInterval(int64_t k, int64_t n, double z = 1.959963984540054);

// P(X >= k) for X ~ Binomial(n, p): the one-sided p-value of k or more successes by chance,
// summed exactly in log space (no normal approximation). 1 when k <= 0, 0 when k > n.
double BinomialUpperTail(int64_t k, int64_t n, double p);

// The two-proportion z statistic of k1/n1 against k2/n2 (pooled standard error); 0 when either n
// is 0 or the pooled proportion is 0 or 1. Positive when the first is higher.
double TwoProportionZ(int64_t k1, int64_t n1, int64_t k2, int64_t n2);

// P(Z >= z) for a standard normal Z.
double NormalUpperTail(double z);

// The paired comparison of two predictors on the same examples: `only_first` examples the first
// gets right and the second wrong, `only_second` the reverse, and the exact one-sided McNemar
// (sign) test of "the first is right more often": P(X >= only_first) for X ~ Binomial(only_first
// + only_second, 1/2), 1 when they never disagree. InvalidArgument when the lengths differ.
struct PairedComparison {
  int64_t only_first = 0, only_second = 0;
  double p = 1;
};
absl::StatusOr<PairedComparison> ComparePaired(const std::vector<bool>& first,
                                               const std::vector<bool>& second);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_COMMON_STATS_H_
