// The table and the finding of gpt2_scaling_curves: validation perplexity over iterations of
// several GPT-2 sizes trained on the same data and token budget, and whether larger models reach
// lower perplexity at equal tokens (the paper's Figure 6).
#ifndef MT_EXPERIMENTS_GPT2_SCALING_CURVES_SCALING_H_
#define MT_EXPERIMENTS_GPT2_SCALING_CURVES_SCALING_H_

#include <cstdint>
#include <optional>
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
  int64_t non_embedding = 0;   // NonEmbeddingParams.
  double flops_per_token = 0;  // TrainFlopsPerToken.
  int64_t tokens_per_iteration = 0;
  double seconds = 0;
  std::vector<ValPoint> points;  // By iteration.
};

// Kaplan et al. 2020's N: the parameters less the token and position embeddings (the output
// layer is tied to the token embedding, so it is not counted twice).
int64_t NonEmbeddingParams(int64_t total, int64_t padded_vocab, int64_t positions, int64_t hidden);

// Training FLOPs per token, Kaplan et al.'s C = 6 N + 6 L T d, with N here every weight a token
// multiplies by (the non-embedding parameters and the hidden x vocabulary output layer, which
// dominates at these sizes) and T the sequence length.
double TrainFlopsPerToken(int64_t non_embedding, int64_t layers, int64_t hidden,
                          int64_t padded_vocab, int64_t seq_length);

// Iterations of a compute-matched run: `reference_iters` x reference FLOPs / this size's
// FLOPs per token, rounded, at least 1.
int64_t ComputeMatchedIters(int64_t reference_iters, double reference_flops, double flops);

// L(N) = (N_c / N)^alpha fitted by least squares of ln L on ln N.
struct PowerLawFit {
  int points = 0;
  double alpha = 0;                      // -slope.
  double alpha_low = 0, alpha_high = 0;  // 95% interval: Student t with points - 2 dof.
  double intercept = 0;                  // ln L at N = 1: ln L = intercept - alpha ln N.
  double r2 = 0;
};
// Nothing with fewer than 3 points or with all N equal.
std::optional<PowerLawFit> FitPowerLaw(const std::vector<double>& n,
                                       const std::vector<double>& loss);
// The 0.975 quantile of Student's t with `dof` >= 1 degrees of freedom (a table to 30, then the
// Cornish-Fisher expansion).
double StudentT975(int dof);

// Kaplan et al. 2020's exponent of L(N) (converged models, non-embedding parameters).
inline constexpr double kKaplanAlphaN = 0.076;

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

// final_losses.csv: variant,model,non_embedding_params,train_flops,final_val_loss,fit_loss (the
// fitted power law's loss at that N; empty without a fit), one row per size that has points.
Table FinalLossesCsv(const std::vector<SizeCurve>& sizes, const std::string& variant);

// compute_curves.csv rows: model,non_embedding_params,iteration,tokens,train_flops,val_loss.
Table ComputeCurvesCsv(const std::vector<SizeCurve>& sizes);

// The report's opening: the claims (Figure 6: every larger model lower at equal tokens; Kaplan et
// al. 2020: L(N) a power law in non-embedding parameters with alpha_N = 0.076) and what these
// runs show: the span of N, whether each larger size ends lower in each variant, and the fitted
// exponent with its 95% interval beside Kaplan's.
std::string PowerLawFinding(const std::vector<SizeCurve>& equal_tokens,
                            const std::vector<SizeCurve>& compute_matched);

// The finding, from the numbers: sizes ordered by parameters; whether the final perplexity falls
// with every size step; and at how many of the evaluation iterations every size step lowers the
// perplexity (equal tokens seen). Sizes must share their evaluation iterations (else that count
// covers the common ones).
std::string ScalingFinding(std::vector<SizeCurve> sizes, int64_t tokens_per_iteration);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_GPT2_SCALING_CURVES_SCALING_H_
