#include "experiments/gpt2_scaling_curves/scaling.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace mt {
namespace experiments {

std::vector<int64_t> EvalIterations(int64_t interval, int64_t total) {
  std::vector<int64_t> out;
  if (interval < 1 || total < 1) return out;
  for (int64_t it = interval; it < total; it += interval) out.push_back(it);
  out.push_back(total);
  return out;
}

std::string FormatParams(int64_t params) {
  if (params >= 1000000) return absl::StrFormat("%.1fM", params / 1e6);
  if (params >= 1000) return absl::StrFormat("%.0fK", params / 1e3);
  return absl::StrCat(params);
}

Table CurvesCsv(const std::vector<SizeCurve>& sizes) {
  Table t({"model", "params", "iteration", "val_loss", "val_ppl"});
  for (const SizeCurve& s : sizes) {
    for (const ValPoint& p : s.points) {
      t.AddRow({s.model, absl::StrCat(s.params), absl::StrCat(p.iteration),
                absl::StrFormat("%.6g", p.val_loss), absl::StrFormat("%.6g", p.val_ppl)});
    }
  }
  return t;
}

Table FinalTable(const std::vector<SizeCurve>& sizes) {
  Table t({"model", "layers", "hidden", "heads", "parameters", "final val loss (nats/token)",
           "final val perplexity", "train time (s)"});
  for (const SizeCurve& s : sizes) {
    const bool any = !s.points.empty();
    t.AddRow({s.model, absl::StrCat(s.layers), absl::StrCat(s.hidden), absl::StrCat(s.heads),
              absl::StrCat(FormatParams(s.params), " (", s.params, ")"),
              any ? Fixed(s.points.back().val_loss, 4) : "-",
              any ? Fixed(s.points.back().val_ppl, 2) : "-", Fixed(s.seconds, 0)});
  }
  return t;
}

std::string ScalingFinding(std::vector<SizeCurve> sizes, int64_t tokens_per_iteration) {
  std::sort(sizes.begin(), sizes.end(),
            [](const SizeCurve& a, const SizeCurve& b) { return a.params < b.params; });
  sizes.erase(std::remove_if(sizes.begin(), sizes.end(),
                             [](const SizeCurve& s) { return s.points.empty(); }),
              sizes.end());
  if (sizes.size() < 2) return "Fewer than two sizes were evaluated: nothing to compare.";
  std::vector<std::string> finals;
  int falls = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    finals.push_back(absl::StrFormat("%s (%s parameters) %.2f", sizes[i].model,
                                     FormatParams(sizes[i].params),
                                     sizes[i].points.back().val_ppl));
    if (i > 0) falls += sizes[i].points.back().val_ppl < sizes[i - 1].points.back().val_ppl;
  }
  const int steps = static_cast<int>(sizes.size()) - 1;
  // Iteration -> perplexities in size order, for the iterations every size evaluated at.
  std::map<int64_t, std::vector<double>> at;
  for (const SizeCurve& s : sizes) {
    for (const ValPoint& p : s.points) at[p.iteration].push_back(p.val_ppl);
  }
  int common = 0, ordered = 0;
  for (const auto& [iteration, ppl] : at) {
    if (ppl.size() != sizes.size()) continue;
    ++common;
    bool all = true;
    for (size_t i = 1; i < ppl.size(); ++i) all = all && ppl[i] < ppl[i - 1];
    ordered += all;
  }
  const int64_t last = sizes.back().points.back().iteration;
  std::string out = absl::StrFormat(
      "Final validation perplexity after %d iterations (%d tokens), smallest model first: %s. ",
      last, last * tokens_per_iteration, absl::StrJoin(finals, "; "));
  if (falls == steps) {
    absl::StrAppend(&out,
                    "**Every larger model reaches a lower perplexity at equal tokens**, "
                    "as in the paper's Figure 6");
  } else {
    absl::StrAppendFormat(&out,
                          "**The larger model reaches a lower final perplexity in %d of %d size "
                          "steps only**: the paper's ordering is not fully reproduced here",
                          falls, steps);
  }
  absl::StrAppendFormat(&out,
                        "; at %d of the %d evaluation iterations every larger model is below "
                        "every smaller one.",
                        ordered, common);
  return out;
}

}  // namespace experiments
}  // namespace mt
