#include "experiments/common/bench_parse.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace mt {
namespace experiments {

absl::StatusOr<double> NumberAfter(absl::string_view text, absl::string_view line_prefix,
                                   absl::string_view marker) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const size_t at = line.find(line_prefix);
    if (at == absl::string_view::npos) continue;
    const size_t m = line.find(marker, at);
    if (m == absl::string_view::npos) continue;
    absl::string_view rest = line.substr(m + marker.size());
    const size_t end = rest.find_first_of(" |");
    double v;
    if (absl::SimpleAtod(rest.substr(0, end), &v)) return v;
  }
  return absl::NotFoundError(
      absl::StrCat("no number after '", line_prefix, "...", marker, "' in the output:\n", text));
}

std::vector<std::pair<double, double>> ParseAllReduceRows(absl::string_view out,
                                                          absl::string_view section) {
  std::vector<std::pair<double, double>> rows;
  bool in_section = false;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (absl::StartsWith(line, "#")) {
      // A section's header: "# all_reduce (sum)", "# all_gather", "# overlap: ...".
      std::vector<absl::string_view> words =
          absl::StrSplit(line.substr(1), ' ', absl::SkipWhitespace());
      if (!words.empty()) {
        const absl::string_view op = absl::StripSuffix(words[0], ":");
        if (op == "all_reduce" || op == "all_reduce_async" || op == "all_gather" ||
            op == "overlap") {
          in_section = op == section;
        }
      }
      continue;
    }
    if (!in_section) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    double bytes, us;
    if (f.size() >= 4 && absl::SimpleAtod(f[0], &bytes) && absl::SimpleAtod(f[3], &us)) {
      rows.emplace_back(bytes, us * 1e-6);
    }
  }
  return rows;
}

absl::StatusOr<std::pair<double, double>> FitAllReduce(
    const std::vector<std::pair<double, double>>& rows, int ranks) {
  if (rows.empty() || ranks < 2) {
    return absl::InvalidArgumentError("FitAllReduce: needs rows and at least 2 ranks");
  }
  // The fastest time of any size: on a loaded machine the smallest message can be the one a
  // preemption slowed, and taking its time would push every larger size below the latency.
  double alpha = -1, largest = 0, largest_s = 0;
  for (const auto& [bytes, s] : rows) {
    if (!(bytes > 0) || !(s >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("FitAllReduce: bad row (", bytes, " bytes, ", s, " s)"));
    }
    if (alpha < 0 || s < alpha) alpha = s;
    if (bytes > largest) {
      largest = bytes;
      largest_s = s;
    }
  }
  if (!(largest_s > alpha)) {  // The largest message is (one of) the fastest.
    return absl::InvalidArgumentError("FitAllReduce: the times do not grow with the size");
  }
  const double k = 2.0 * (ranks - 1) / ranks;
  double sxx = 0, sxy = 0;
  for (const auto& [bytes, s] : rows) {
    sxx += k * bytes * k * bytes;
    sxy += k * bytes * (s - alpha);
  }
  if (!(sxy > 0)) {
    return absl::InvalidArgumentError("FitAllReduce: the times do not grow with the size");
  }
  return std::make_pair(alpha, sxx / sxy);
}

}  // namespace experiments
}  // namespace mt
