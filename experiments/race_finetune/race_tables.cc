#include "experiments/race_finetune/race_tables.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/file_system.h"
#include "core/status.h"
#include "experiments/common/stats.h"

namespace mt {
namespace experiments {

absl::StatusOr<std::vector<RaceAccuracy>> ReadRaceAccuracies(const Json& results) {
  if (!results.contains("splits") || !results["splits"].is_object()) {
    return absl::NotFoundError("race results have no \"splits\" object");
  }
  const Json& splits = results["splits"];
  std::vector<RaceAccuracy> out;
  for (const char* split : {"dev", "test"}) {
    for (const char* subset : {"middle", "high", "overall"}) {
      const std::string key =
          std::string(subset) == "overall" ? split : absl::StrCat(split, "/", subset);
      if (!splits.contains(key)) continue;
      RaceAccuracy a{split, subset};
      ASSIGN_OR_RETURN(double questions, NumberAt(splits, {key, "questions"}, "race"));
      ASSIGN_OR_RETURN(double accuracy, NumberAt(splits, {key, "accuracy"}, "race"));
      a.questions = static_cast<int64_t>(questions);
      a.accuracy_pct = 100 * accuracy;
      out.push_back(a);
    }
  }
  return out;
}

absl::StatusOr<std::vector<bool>> RaceOutcomes(const std::string& path, const std::string& split,
                                               int64_t questions) {
  ASSIGN_OR_RETURN(const std::string text, DefaultFileSystem().ReadFile(path));
  std::map<std::tuple<std::string, std::string, int64_t>, bool> outcome;
  int64_t lines = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    ++lines;
    const Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    const bool shaped = j.is_object() && j.contains("split") && j["split"].is_string() &&
                        j.contains("level") && j["level"].is_string() && j.contains("file") &&
                        j["file"].is_string() && j.contains("question") &&
                        j["question"].is_number_integer() && j.contains("correct") &&
                        j["correct"].is_boolean();
    if (!shaped) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " line ", lines,
                       ": not an object with string \"split\", \"level\" and \"file\", an integer "
                       "\"question\" and a boolean \"correct\": '",
                       line, "'"));
    }
    if (j["split"].get<std::string>() != split) continue;
    const auto key = std::make_tuple(j["level"].get<std::string>(), j["file"].get<std::string>(),
                                     j["question"].get<int64_t>());
    if (!outcome.emplace(key, j["correct"].get<bool>()).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, " line ", lines, ": question ",
                                                     std::get<2>(key), " of ", std::get<1>(key),
                                                     " (", std::get<0>(key), ") again"));
    }
  }
  if (static_cast<int64_t>(outcome.size()) != questions) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " has ", outcome.size(), " ", split, " questions for ", questions));
  }
  std::vector<bool> correct;
  for (const auto& [key, right] : outcome) correct.push_back(right);
  return correct;
}

namespace {

std::string Accuracy(const RaceRun& r) {
  const Interval ci = WilsonInterval(r.correct, r.questions);
  return absl::StrFormat("%lld / %lld = %.1f%% (95%% Wilson interval %.1f-%.1f%%)",
                         static_cast<long long>(r.correct), static_cast<long long>(r.questions),
                         r.questions > 0 ? 100.0 * r.correct / r.questions : 0.0, 100 * ci.low,
                         100 * ci.high);
}

// "**<claim>: supported**: a vs b, test, p" for a one-sided test of a above b: McNemar's on the
// same questions when both outcomes are at hand, else the two-proportion z.
std::string Compare(const std::string& claim, const RaceRun& a, const RaceRun& b) {
  const double z = TwoProportionZ(a.correct, a.questions, b.correct, b.questions);
  const double p = NormalUpperTail(z);
  bool above = z > 0 && p < 0.05;
  std::string test = absl::StrFormat("one-sided two-proportion z = %.2f, p = %.2g", z, p);
  if (!a.test_correct.empty() && !b.test_correct.empty()) {
    const absl::StatusOr<PairedComparison> c = ComparePaired(a.test_correct, b.test_correct);
    if (c.ok()) {
      above = c->only_first > c->only_second && c->p < 0.05;
      test = absl::StrFormat(
          "on the same %zu questions the first alone is right on %lld and the second alone on "
          "%lld: exact one-sided McNemar test p = %.2g (the two-proportion z, which ignores the "
          "pairing, is %.2f)",
          a.test_correct.size(), static_cast<long long>(c->only_first),
          static_cast<long long>(c->only_second), c->p, z);
    } else {
      absl::StrAppend(&test, " (unpaired: ", c.status().message(), ")");
    }
  }
  std::string out = absl::StrFormat("- **%s: %s**: %s %s vs %s %s; %s.\n", claim,
                                    above ? "supported" : "not supported", a.label, Accuracy(a),
                                    b.label, Accuracy(b), test);
  if (!a.dev_correct.empty() && !b.dev_correct.empty()) {
    const absl::StatusOr<PairedComparison> d = ComparePaired(a.dev_correct, b.dev_correct);
    if (d.ok()) {
      const auto right = [](const std::vector<bool>& v) {
        return static_cast<long long>(std::count(v.begin(), v.end(), true));
      };
      absl::StrAppendFormat(
          &out,
          "  - The dev split, a second sample: %lld against %lld right of %zu; the first alone "
          "right on %lld and the second alone on %lld: exact one-sided McNemar test p = %.2g.\n",
          right(a.dev_correct), right(b.dev_correct), a.dev_correct.size(),
          static_cast<long long>(d->only_first), static_cast<long long>(d->only_second), d->p);
    }
  }
  return out;
}

}  // namespace

std::string RaceFinding(const std::vector<RaceRun>& runs) {
  std::string out =
      "**The paper's claim** (Table 5): a pretrained BERT fine-tuned on RACE answers far above "
      "chance, and the larger model scores higher.\n\n";
  std::vector<RaceRun> pre, rand;
  for (const RaceRun& r : runs) (r.pretrained ? pre : rand).push_back(r);
  auto by_size = [](const RaceRun& x, const RaceRun& y) { return x.size_rank < y.size_rank; };
  std::sort(pre.begin(), pre.end(), by_size);
  if (pre.empty()) return out + "- No pretrained model was fine-tuned.\n";
  const RaceRun& best = pre.back();
  const double p = BinomialUpperTail(best.correct, best.questions, 0.25);
  absl::StrAppend(&out,
                  absl::StrFormat("- **Above chance (25%%), p < 0.01: %s**: %s %s; exact one-sided "
                                  "binomial p = %.2g.\n",
                                  p < 0.01 && best.questions > 0 ? "supported" : "not supported",
                                  best.label, Accuracy(best), p));
  bool compared = false;
  for (const RaceRun& r : rand) {
    for (const RaceRun& q : pre) {
      if (q.size_rank != r.size_rank) continue;
      absl::StrAppend(&out, Compare("Pretrained above random initialisation", q, r));
      compared = true;
    }
  }
  if (!compared) absl::StrAppend(&out, "- Pretrained vs random initialisation: not run.\n");
  for (size_t i = 1; i < pre.size(); ++i) {
    absl::StrAppend(&out, Compare("Larger above smaller", pre[i], pre[i - 1]));
  }
  if (pre.size() < 2) absl::StrAppend(&out, "- Larger vs smaller: one size only.\n");
  return out;
}

Table PaperRaceRows() {
  struct Row {
    const char* model;
    double middle, high, overall;
  };
  constexpr Row kRows[] = {{"paper Megatron-BERT 336M", 86.9, 81.5, 83.0},
                           {"paper Megatron-BERT 1.3B", 90.4, 86.1, 87.3},
                           {"paper Megatron-BERT 3.9B", 91.8, 88.6, 89.5},
                           {"paper Megatron-BERT 3.9B ensemble (5 models)", 93.1, 90.0, 90.9}};
  Table t({"model", "split", "subset", "accuracy"});
  for (const Row& r : kRows) {
    t.AddRow({r.model, "test", "middle", Fixed(r.middle, 1)});
    t.AddRow({r.model, "test", "high", Fixed(r.high, 1)});
    t.AddRow({r.model, "test", "overall", Fixed(r.overall, 1)});
  }
  return t;
}

}  // namespace experiments
}  // namespace mt
