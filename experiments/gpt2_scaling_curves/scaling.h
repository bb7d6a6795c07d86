// The table and the finding of gpt2_scaling_curves: validation perplexity over iterations of
// several GPT-2 sizes trained on the same data and token budget, and whether larger models reach
// lower perplexity at equal tokens (the paper's Figure 6).
#ifndef MT_EXPERIMENTS_GPT2_SCALING_CURVES_SCALING_H_
#define MT_EXPERIMENTS_GPT2_SCALING_CURVES_SCALING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "experiments/common/report.h"

namespace mt {
namespace experiments {

// One validation run during training.
struct ValPoint {
  int64_t iteration = 0;
  double val_loss = 0;  // Mean cross-entropy (nats/token) over the validation samples.
  double val_ppl = 0;   // exp(val_loss).
};

// One model size's curve.
struct SizeCurve {
  std::string model;  // E.g. "4L-128H".
  int64_t layers = 0, hidden = 0, heads = 0;
  int64_t params = 0;
  double seconds = 0;
  std::vector<ValPoint> points;  // By iteration.
};

// The iterations after which to validate: every `interval` up to `total`, and `total` itself
// ({25, 50, 60} for 25 and 60). Empty when either is < 1.
std::vector<int64_t> EvalIterations(int64_t interval, int64_t total);

// "12.3M" (millions with one decimal), "850K", or the number below 1000.
std::string FormatParams(int64_t params);

// val_curves.csv: model,params,iteration,val_loss,val_ppl (every point of every size).
Table CurvesCsv(const std::vector<SizeCurve>& sizes);
// The report's table: model, layers, hidden, heads, params, final validation loss and
// perplexity, training time.
Table FinalTable(const std::vector<SizeCurve>& sizes);

// The finding, from the numbers: sizes ordered by parameters; whether the final perplexity falls
// with every size step; and at how many of the evaluation iterations every size step lowers the
// perplexity (equal tokens seen). Sizes must share their evaluation iterations (else that count
// covers the common ones).
std::string ScalingFinding(std::vector<SizeCurve> sizes, int64_t tokens_per_iteration);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_GPT2_SCALING_CURVES_SCALING_H_
