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

// One fine-tuned model's test result, for the finding.
struct RaceRun {
  std::string label;                   // "BERT 4x128x4 pretrained".
  int64_t size_rank = 0;               // Orders the sizes: larger is higher.
  bool pretrained = true;              // False: fine-tuned from a random initialisation.
  int64_t questions = 0, correct = 0;  // Test split, both levels.
};

// The report's opening: the paper's claim (a pretrained BERT answers RACE well, the larger the
// better) and whether `runs` support it on their task: the largest pretrained model's test
// accuracy above chance (25%; exact one-sided binomial p < 0.01), pretrained above a random
// initialisation of the same size, and each larger pretrained size above the next smaller
// (one-sided two-proportion z tests, p < 0.05). A comparison without its runs says so.
std::string RaceFinding(const std::vector<RaceRun>& runs);

// Paper Table 5's RACE test accuracies (%): BERT-style 336M, 1.3B, 3.9B and the 3.9B ensemble,
// as rows model, split, subset, accuracy.
Table PaperRaceRows();

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_RACE_FINETUNE_RACE_TABLES_H_
