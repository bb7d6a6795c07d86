// The gpt2_zeroshot experiment's parts below its main(): model sizes from a flag, scoring one
// checkpoint with the WikiText-103 and LAMBADA harnesses, and the report with the paper's Tables
// 2-3 beside ours (zeroshot.csv, wikitext_ppl.png, lambada_acc.png).
#ifndef MT_EXPERIMENTS_GPT2_ZEROSHOT_ZEROSHOT_TABLES_H_
#define MT_EXPERIMENTS_GPT2_ZEROSHOT_ZEROSHOT_TABLES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device.h"
#include "experiments/common/report.h"

namespace mt {
namespace experiments {

// A GPT-2 shape to train.
struct ModelSize {
  int layers = 0;
  int64_t hidden = 0;
  int heads = 0;
  std::string Label() const;  // "gpt2_4x128x4".
};

// "2x64x4,4x128x4" (LAYERSxHIDDENxHEADS, comma-separated) -> sizes. InvalidArgument quoting the
// item for an empty list, a malformed item, a value < 1, or heads not dividing hidden.
absl::StatusOr<std::vector<ModelSize>> ParseModelSizes(absl::string_view list);

// An evaluation file and how the report names it.
struct EvalData {
  std::string path;
  std::string name;
};

// How the harnesses run.
struct ScoringSettings {
  std::vector<std::string> launcher;  // E.g. {"mpirun", "-np", "2"}; empty: a plain process.
  std::string wikitext_bin, lambada_bin;
  DeviceType device = DeviceType::kCpu;
  int64_t overlapping_eval = 32;
  // The LAMBADA file (an index into the files scored) whose per-example outcomes to keep, and the
  // directory (one the harness's rank 0 can write, e.g. the experiment's work directory beside
  // the held-out files) for the harness's per-example lines; -1: none kept.
  int paired_lambada = -1;
  std::string example_dir;
};

struct ModelScores {
  std::string label;          // The checkpoint directory's last component.
  std::string model;          // The registered model name the checkpoint records.
  std::string shape;          // "4 layers, hidden 128, 4 heads".
  int64_t params = 0;         // Parameters of the serial model (padded vocabulary).
  double train_seconds = -1;  // < 0: not trained here.
  std::vector<double> wikitext_adjusted_ppl, wikitext_ppl;  // Per WikiText file, in order.
  std::vector<double> lambada_accuracy;                     // Per LAMBADA file.
  std::vector<int64_t> lambada_examples;
  // Per LAMBADA file, per example in the file's order: whether the model got it right (the
  // harness's --per_example_jsonl); empty but for ScoringSettings::paired_lambada.
  std::vector<std::vector<bool>> lambada_example_correct;
};

// Runs both harnesses on `checkpoint` for every file; for settings.paired_lambada, the per-example
// lines go to <example_dir>/<checkpoint's last component>.lambada.jsonl (kept) and are read back.
// Errors: the checkpoint's (checkpoint::ReadCheckpointModel), the harnesses' (their exit and
// message), missing result keys, ExampleOutcomes', and outcomes whose count of right answers is
// not the harness's.
absl::StatusOr<ModelScores> ScoreCheckpoint(const ScoringSettings& settings,
                                            const std::string& checkpoint,
                                            const std::vector<EvalData>& wikitext,
                                            const std::vector<EvalData>& lambada);

// Whether each example was right, from the lambada harness's --per_example_jsonl file at `path`
// (one JSON object per example, naming its index "example" and "correct" true or false).
// InvalidArgument naming the line for a line that is not such an object, an index outside
// [0, examples) or repeated, and for fewer lines than examples; the file system's errors.
absl::StatusOr<std::vector<bool>> ExampleOutcomes(const std::string& path, int64_t examples);

// What the report tests the models against, when the held-out documents are scored.
struct HeldOutBaseline {
  int wikitext_index = -1, lambada_index = -1;  // The held-out files among the inputs' (-1: none).
  int64_t examples = 0, bigram_correct = 0;     // Of the LAMBADA-format file.
  std::vector<bool> bigram_example_correct;     // Per line of that file, in order.
};

// The report's opening: the paper's claim (perplexity falls and LAMBADA accuracy rises with
// size) and whether these scores support it, with the statistics: every size step lowers the
// held-out perplexity; the largest model's LAMBADA-format accuracy with its 95% Wilson interval,
// above 0 and above the bigram baseline's on the same lines (exact one-sided McNemar test,
// p < 0.05; the two-proportion z test when the per-line outcomes are not both at hand).
std::string ZeroShotFinding(const std::vector<ModelScores>& scores, const HeldOutBaseline& b);

struct ZeroShotReportInputs {
  std::string data_name;  // What the models were trained on.
  bool trained_here = true;
  int64_t train_iters = 0, global_batch_size = 0, seq_length = 0;
  std::vector<EvalData> wikitext, lambada;
  HeldOutBaseline baseline;
  bool lambada_copy_targets = false;  // The held-out LAMBADA lines: heldout.h's copy passages.
  // The held-out documents share no 13-word run with the training text (the prose corpus's);
  // false: --data_path's test split, not screened.
  bool heldout_screened = false;
  double lr = 0, dropout = 0;  // The training's peak learning rate and dropout.
};

// The paper's rows (Table 2: 355M, 2.5B, 8.3B and the previous state of the art) in the CSV's
// layout: model, params, dataset, metric, value.
Table PaperZeroShotRows();

// zeroshot.csv (model,params,dataset,metric,value: the paper's rows then ours), the two PNGs and
// report.md in `run`'s directory.
absl::Status WriteZeroShotResults(const ExperimentRun& run, const ZeroShotReportInputs& in,
                                  const std::vector<ModelScores>& scores);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_GPT2_ZEROSHOT_ZEROSHOT_TABLES_H_
