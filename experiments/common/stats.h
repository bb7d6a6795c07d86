// Binomial statistics for the experiments' accuracies: a confidence interval for a proportion and
// the one-sided test of an accuracy against chance.
#ifndef MT_EXPERIMENTS_COMMON_STATS_H_
#define MT_EXPERIMENTS_COMMON_STATS_H_

#include <cstdint>

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

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_COMMON_STATS_H_
