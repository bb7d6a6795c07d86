// The race_finetune experiment's tables: the paper's Table 5 RACE column and our accuracies read
// from //jobs/eval:race's results JSON, in the CSV's layout (model, split, subset, accuracy).
#ifndef MT_EXPERIMENTS_RACE_FINETUNE_RACE_TABLES_H_
#define MT_EXPERIMENTS_RACE_FINETUNE_RACE_TABLES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "experiments/common/eval_runs.h"
#include "experiments/common/report.h"

namespace mt {
namespace experiments {

struct RaceAccuracy {
  std::string split;   // "dev" or "test".
  std::string subset;  // "middle", "high" or "overall" (both levels, weighted by questions).
  int64_t questions = 0;
  double accuracy_pct = 0;
};

// Our accuracies from eval/race's results object ({"splits": {"dev/middle": {"questions",
// "correct", "accuracy", ...}, "dev": {...}, ...}}): for each of dev and test present, middle,
// high and overall (a level missing from the data is left out). NotFound naming the key when the
// object has no "splits" or an entry lacks questions or accuracy.
absl::StatusOr<std::vector<RaceAccuracy>> ReadRaceAccuracies(const Json& results);

// Paper Table 5's RACE test accuracies (%): BERT-style 336M, 1.3B, 3.9B and the 3.9B ensemble,
// as rows model, split, subset, accuracy.
Table PaperRaceRows();

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_RACE_FINETUNE_RACE_TABLES_H_
