#include "experiments/race_finetune/race_tables.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

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
