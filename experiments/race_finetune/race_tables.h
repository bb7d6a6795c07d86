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

// Whether each question of `split` ("dev" or "test") was answered right, from eval/race's
// --per_example_jsonl file at `path` (one object per question of the last evaluation: "split",
// "level", "file", "question", "correct"), ordered by level, file and question so that two
// models' outcomes line up. Lines of other splits are skipped. InvalidArgument naming the line
// for a line without those keys or a question seen twice, and when the split's lines are not
// `questions` in number; the file system's errors.
absl::StatusOr<std::vector<bool>> RaceOutcomes(const std::string& path, const std::string& split,
                                               int64_t questions);

// One model's test result, for the finding.
struct RaceRun {
  std::string label;                   // "BERT 4x128x4 pretrained".
  int64_t size_rank = 0;               // Orders the sizes: larger is higher.
  bool pretrained = true;              // False: a random initialisation.
  int64_t questions = 0, correct = 0;  // Test split, both levels.
  std::vector<bool> test_correct;      // RaceOutcomes; empty when not at hand.
  std::vector<bool> dev_correct;       // The dev split's likewise: a second sample.
};

// The report's opening: the paper's claim (a pretrained BERT answers RACE well, the larger the
// better) and whether `runs` support it on their task: the largest pretrained model's test
// accuracy above chance (25%; exact one-sided binomial p < 0.01), pretrained above a random
// initialisation of the same size, and each larger pretrained size above the next smaller
// (p < 0.05: the exact one-sided McNemar test on the same questions when both runs' outcomes are
// at hand, else the one-sided two-proportion z test). A comparison without its runs says so.
// Where both runs' dev outcomes are at hand, each comparison also gives McNemar's test on the dev
// split, a second sample that does not enter the verdict.
std::string RaceFinding(const std::vector<RaceRun>& runs);

// Paper Table 5's RACE test accuracies (%): BERT-style 336M, 1.3B, 3.9B and the 3.9B ensemble,
// as rows model, split, subset, accuracy.
Table PaperRaceRows();

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_RACE_FINETUNE_RACE_TABLES_H_
