#include "experiments/common/curves.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace experiments {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The mean of curve[begin, end), NaN if empty or a loss is non-finite.
double RangeMean(const std::vector<LossPoint>& curve, size_t begin, size_t end) {
  if (begin >= end) return kNaN;
  double sum = 0;
  for (size_t i = begin; i < end; ++i) {
    if (!std::isfinite(curve[i].loss)) return kNaN;
    sum += curve[i].loss;
  }
  return sum / static_cast<double>(end - begin);
}

}  // namespace

absl::StatusOr<std::vector<LossPoint>> ReadLossCurve(const std::string& path,
                                                     absl::string_view key) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open the training log ", path));
  std::vector<LossPoint> curve;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const std::string k(key);
    if (!j.is_object() || !j.contains("iteration") || !j["iteration"].is_number_integer() ||
        !j.contains(k) || !(j[k].is_number() || j[k].is_null())) {
      return absl::DataLossError(
          absl::StrCat(path, ":", number, ": not a log line with \"iteration\" and \"", k, "\""));
    }
    curve.push_back({j["iteration"].get<int64_t>(), j[k].is_null() ? kNaN : j[k].get<double>()});
  }
  return curve;
}

Spread Summarize(const std::vector<double>& values) {
  Spread s;
  s.n = static_cast<int>(values.size());
  const bool finite =
      std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); });
  if (values.empty() || !finite) {
    s.mean = s.stddev = s.min = s.max = kNaN;
    return s;
  }
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / s.n;
  double ss = 0;
  for (double v : values) ss += (v - s.mean) * (v - s.mean);
  s.stddev = s.n > 1 ? std::sqrt(ss / (s.n - 1)) : 0.0;
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  return s;
}

double HeadMean(const std::vector<LossPoint>& curve, int window) {
  return RangeMean(curve, 0, std::min(curve.size(), static_cast<size_t>(std::max(window, 1))));
}

double TailMean(const std::vector<LossPoint>& curve, int window) {
  const size_t w = std::min(curve.size(), static_cast<size_t>(std::max(window, 1)));
  return RangeMean(curve, curve.size() - w, curve.size());
}

Outcome Classify(const std::vector<LossPoint>& curve, int window, double min_drop) {
  for (const LossPoint& p : curve) {
    if (!std::isfinite(p.loss)) return Outcome::kDiverged;
  }
  const double head = HeadMean(curve, window), tail = TailMean(curve, window);
  if (!std::isfinite(head) || !std::isfinite(tail) || tail > head) return Outcome::kDiverged;
  return head - tail < min_drop * head ? Outcome::kStalled : Outcome::kLearned;
}

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kLearned:
      return "learned";
    case Outcome::kStalled:
      return "stalled";
    case Outcome::kDiverged:
      return "diverged";
  }
  return "?";
}

bool Separated(const Spread& higher, const Spread& lower) {
  if (higher.n == 0 || lower.n == 0) return false;
  return higher.min > lower.max;  // False for NaN.
}

std::vector<double> MovingAverage(const std::vector<double>& values, int window) {
  const size_t w = static_cast<size_t>(std::max(window, 1));
  std::vector<double> out(values.size());
  double sum = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    sum += values[i];
    if (i >= w) sum -= values[i - w];
    out[i] = sum / static_cast<double>(std::min(i + 1, w));
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> ParsePositiveList(absl::string_view flag,
                                                       absl::string_view text) {
  std::vector<int64_t> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(item, &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, "=", text, ": '", item, "' is not a positive integer (want e.g. 2,8,24)"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::map<int64_t, int64_t>> ParsePositiveMap(absl::string_view flag,
                                                            absl::string_view text) {
  std::map<int64_t, int64_t> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const std::vector<absl::string_view> kv = absl::StrSplit(item, ':');
    int64_t k = 0, v = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[0], &k) || !absl::SimpleAtoi(kv[1], &v) || k < 1 ||
        v < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", text, ": '", item,
                                                     "' is not a pair of positive integers "
                                                     "(want e.g. 32:1000,64:500)"));
    }
    if (!out.emplace(k, v).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, "=", text, ": ", k, " is given twice"));
    }
  }
  return out;
}

}  // namespace experiments
}  // namespace mt
