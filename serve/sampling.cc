#include "serve/sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/philox.h"
#include "core/status.h"

namespace mt {
namespace serve {

absl::Status SamplingConfig::Validate() const {
  if (!(std::isfinite(temperature) && temperature > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature ", temperature, " must be finite and > 0"));
  }
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k ", top_k, " must be >= 0"));
  if (!(top_p >= 0 && top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p ", top_p, " must be in [0, 1]"));
  }
  if (top_k > 1 && top_p > 0) {
    return absl::InvalidArgumentError(absl::StrCat("top_k ", top_k, " and top_p ", top_p,
                                                   ": pick one of top-k and top-p sampling"));
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckLogits(absl::Span<const float> logits) {
  if (logits.empty()) return absl::InvalidArgumentError("sampling: no logits");
  bool any_finite = false;
  for (size_t v = 0; v < logits.size(); ++v) {
    if (std::isnan(logits[v]) || logits[v] == std::numeric_limits<float>::infinity()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling: logit ", v, " is ", logits[v], " (NaN and +inf are invalid)"));
    }
    any_finite = any_finite || std::isfinite(logits[v]);
  }
  if (!any_finite) return absl::InvalidArgumentError("sampling: every logit is -inf");
  return absl::OkStatus();
}

// The first id of the largest logit.
int32_t Argmax(absl::Span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// The ids top-k keeps: every id whose logit is at least the k-th largest (all ids for k <= 1 or
// k >= n), in increasing order.
std::vector<int32_t> TopK(absl::Span<const float> logits, int k) {
  const size_t V = logits.size();
  std::vector<int32_t> ids;
  if (k <= 1 || static_cast<size_t>(k) >= V) {
    ids.resize(V);
    std::iota(ids.begin(), ids.end(), 0);
    return ids;
  }
  std::vector<float> values(logits.begin(), logits.end());
  std::nth_element(values.begin(), values.begin() + (k - 1), values.end(), std::greater<float>());
  const float kth = values[k - 1];
  for (size_t v = 0; v < V; ++v) {
    if (logits[v] >= kth) ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

// Keeps the smallest set of candidates, taken by decreasing probability (ties by id), whose
// probability reaches top_p; renormalises. Candidates stay in increasing id order.
void Nucleus(double top_p, TokenDistribution* d) {
  std::vector<size_t> order(d->ids.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return d->probs[a] > d->probs[b] || (d->probs[a] == d->probs[b] && d->ids[a] < d->ids[b]);
  });
  size_t n = 0;
  double mass = 0;  // Of the candidates kept so far.
  while (n < order.size() && (n == 0 || mass < top_p)) mass += d->probs[order[n++]];
  order.resize(n);
  std::sort(order.begin(), order.end());  // Back to id order.
  TokenDistribution kept;
  for (size_t i : order) {
    kept.ids.push_back(d->ids[i]);
    kept.probs.push_back(d->probs[i] / mass);
  }
  *d = std::move(kept);
}

}  // namespace

absl::StatusOr<TokenDistribution> SamplingDistribution(absl::Span<const float> logits,
                                                       const SamplingConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  RETURN_IF_ERROR(CheckLogits(logits));
  TokenDistribution d;
  if (config.IsGreedy()) {
    d.ids = {Argmax(logits)};
    d.probs = {1.0};
    return d;
  }
  d.ids = TopK(logits, config.top_k);
  // softmax(logits / temperature) over the candidates, in double.
  const double t = config.temperature;
  double top = -std::numeric_limits<double>::infinity();
  for (int32_t v : d.ids) top = std::max(top, logits[v] / t);
  d.probs.resize(d.ids.size());
  double sum = 0;
  for (size_t i = 0; i < d.ids.size(); ++i)
    sum += d.probs[i] = std::exp(logits[d.ids[i]] / t - top);
  for (double& p : d.probs) p /= sum;
  if (config.top_p > 0) Nucleus(config.top_p, &d);
  return d;
}

int32_t Draw(const TokenDistribution& distribution, double u) {
  double cumulative = 0;
  for (size_t i = 0; i < distribution.ids.size(); ++i) {
    cumulative += distribution.probs[i];
    if (u < cumulative) return distribution.ids[i];
  }
  return distribution.ids.back();
}

double SamplingUniform(uint64_t seed, int64_t row, int64_t position) {
  const uint64_t index = 2 * static_cast<uint64_t>(position);
  const uint64_t hi = PhiloxBits(seed, static_cast<uint64_t>(row), index) >> 5;      // 27 bits
  const uint64_t lo = PhiloxBits(seed, static_cast<uint64_t>(row), index + 1) >> 6;  // 26 bits
  return static_cast<double>((hi << 26) | lo) * (1.0 / 9007199254740992.0);          // 2^-53
}

absl::StatusOr<int32_t> SampleToken(absl::Span<const float> logits, const SamplingConfig& config,
                                    int64_t row, int64_t position) {
  ASSIGN_OR_RETURN(const TokenDistribution d, SamplingDistribution(logits, config));
  if (d.ids.size() == 1) return d.ids[0];
  return Draw(d, SamplingUniform(config.seed, row, position));
}

double LogProbability(absl::Span<const float> logits, int32_t id) {
  double top = -std::numeric_limits<double>::infinity();
  for (float z : logits) top = std::max(top, static_cast<double>(z));
  double sum = 0;
  for (float z : logits) sum += std::exp(z - top);
  return logits[id] - top - std::log(sum);
}

}  // namespace serve
}  // namespace mt
