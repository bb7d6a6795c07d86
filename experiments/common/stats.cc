#include "experiments/common/stats.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace mt {
namespace experiments {

Interval WilsonInterval(int64_t k, int64_t n, double z) {
  CHECK(k >= 0 && k <= n) << k << " of " << n;
  if (n == 0) return {0, 1};
  const double nn = static_cast<double>(n), p = k / nn, z2 = z * z;
  const double center = (p + z2 / (2 * nn)) / (1 + z2 / nn);
  const double half = z / (1 + z2 / nn) * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn));
  return {std::max(0.0, center - half), std::min(1.0, center + half)};
}

double BinomialUpperTail(int64_t k, int64_t n, double p) {
  if (k <= 0) return 1;
  if (k > n) return 0;
  if (p <= 0) return 0;
  if (p >= 1) return 1;
  // log C(n, i) + i log p + (n - i) log(1 - p), summed from i = k with the largest term factored
  // out (the terms fall monotonically past the mode, so k..n in order is stable enough).
  auto log_term = [&](int64_t i) {
    return std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) +
           i * std::log(p) + (n - i) * std::log1p(-p);
  };
  double max_log = -INFINITY;
  for (int64_t i = k; i <= n; ++i) max_log = std::max(max_log, log_term(i));
  double sum = 0;
  for (int64_t i = k; i <= n; ++i) sum += std::exp(log_term(i) - max_log);
  return std::min(1.0, std::exp(max_log) * sum);
}

double TwoProportionZ(int64_t k1, int64_t n1, int64_t k2, int64_t n2) {
  if (n1 == 0 || n2 == 0) return 0;
  const double pooled = static_cast<double>(k1 + k2) / (n1 + n2);
  if (pooled <= 0 || pooled >= 1) return 0;
  const double se = std::sqrt(pooled * (1 - pooled) * (1.0 / n1 + 1.0 / n2));
  return (static_cast<double>(k1) / n1 - static_cast<double>(k2) / n2) / se;
}

double NormalUpperTail(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

absl::StatusOr<PairedComparison> ComparePaired(const std::vector<bool>& first,
                                               const std::vector<bool>& second) {
  if (first.size() != second.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ComparePaired: ", first.size(), " against ", second.size(), " outcomes"));
  }
  PairedComparison c;
  for (size_t i = 0; i < first.size(); ++i) {
    c.only_first += first[i] && !second[i];
    c.only_second += !first[i] && second[i];
  }
  c.p = BinomialUpperTail(c.only_first, c.only_first + c.only_second, 0.5);
  return c;
}

}  // namespace experiments
}  // namespace mt
