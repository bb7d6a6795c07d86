// BertModel::MaskedChoice: multiple choice read off the MLM head (models/multiple_choice.h).
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/cross_entropy.h"
#include "core/status.h"
#include "models/bert/bert.h"

namespace mt {
namespace models {
namespace {

// The row of each scored position (labels != -100) in row-major order, as the MLM head keeps
// them, and each row's count; InvalidArgument for a row without one.
struct ScoredRows {
  std::vector<int64_t> row_of, count;
};
absl::StatusOr<ScoredRows> ScoredRowsOf(const TensorView& labels_flat, int64_t rows, int64_t T) {
  ScoredRows out;
  out.count.assign(rows, 0);
  for (int64_t i = 0; i < rows * T; ++i) {
    if (labels_flat.data_as<int32_t>()[i] == ops::kIgnoreIndex) continue;
    out.row_of.push_back(i / T);
    ++out.count[i / T];
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (out.count[r] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("BERT masked choice: row ", r, " scores no token (every label is -100)"));
    }
  }
  return out;
}

// The mean over Q questions of the softmax cross-entropy of their C scores (score [Q * C], right
// [Q]); the argmax of each (the first on ties) into *predictions, and d(mean)/d(score) =
// (softmax - one-hot) / Q into *dscore.
double ChoiceCrossEntropy(const std::vector<double>& score, const int32_t* right, int64_t Q,
                          int64_t C, std::vector<int>* predictions, std::vector<double>* dscore) {
  dscore->assign(Q * C, 0.0);
  double total = 0;
  for (int64_t q = 0; q < Q; ++q) {
    const double* s = score.data() + q * C;
    int best = 0;
    for (int c = 1; c < C; ++c) best = s[c] > s[best] ? c : best;
    predictions->push_back(best);
    double z = 0;
    for (int c = 0; c < C; ++c) z += std::exp(s[c] - s[best]);
    total += s[best] + std::log(z) - s[right[q]];
    for (int c = 0; c < C; ++c) {
      (*dscore)[q * C + c] = (std::exp(s[c] - s[best]) / z - (c == right[q] ? 1.0 : 0.0)) / Q;
    }
  }
  return total / static_cast<double>(Q);
}

}  // namespace

absl::StatusOr<MultipleChoiceResult> BertModel::MaskedChoice(const nn::StepContext& sc,
                                                             const Batch& batch, Backward backward,
                                                             double loss_scale) {
  if (!has_pretraining_heads()) {
    return absl::FailedPreconditionError(
        "BERT: a masked choice needs the MLM head (this model was created with "
        "Heads::kMultipleChoice)");
  }
  if (!options_.stage.whole() || sc.cp_size() > 1) {
    return absl::UnimplementedError(
        "BERT: a masked choice runs on the whole model, without context parallelism");
  }
  const TensorView& tokens = batch.tokens;
  const TensorView& choices = batch.choices;
  RETURN_IF_ERROR(CheckChoiceRows("masked choice", "choices", choices, tokens));
  RETURN_IF_ERROR(CheckI32("mlm_labels", batch.labels, tokens.shape));
  const ExecContext& ec = *sc.exec;
  const int64_t rows = tokens.dim(0), T = tokens.dim(1), Q = choices.numel(), C = rows / Q;
  ASSIGN_OR_RETURN(const TensorView right_host,
                   OnHost(ec, choices, &choices_host_staging_, "BERT: choices"));
  const int32_t* right = right_host.data_as<int32_t>();
  for (int64_t q = 0; q < Q; ++q) {
    if (right[q] < 0 || right[q] >= C) {
      return absl::OutOfRangeError(absl::StrCat("BERT masked choice: choices[", q, "] = ", right[q],
                                                " is not in [0, ", C, ")"));
    }
  }
  ASSIGN_OR_RETURN(const TensorView labels_host,
                   OnHost(ec, batch.labels, &mlm_labels_host_staging_, "BERT: mlm_labels"));
  ASSIGN_OR_RETURN(const TensorView labels_flat, labels_host.Reshape({rows * T}));
  ASSIGN_OR_RETURN(const ScoredRows scored_rows, ScoredRowsOf(labels_flat, rows, T));
  const std::vector<int64_t>& row_of = scored_rows.row_of;
  const std::vector<int64_t>& count = scored_rows.count;
  RETURN_IF_ERROR(EncoderForward(sc, batch));
  int64_t scored = 0;
  RETURN_IF_ERROR(mlm_.Forward(sc, word_, seq_, labels_flat, &scored).status());
  Tensor losses = Tensor::Host({scored}, DType::kF32);
  RETURN_IF_ERROR(CopyTensor(ec, mlm_.losses(), losses.view()));
  // A row's score: the mean log-probability of its scored tokens.
  std::vector<double> score(rows, 0.0), dscore;
  for (int64_t m = 0; m < scored; ++m) {
    score[row_of[m]] -= static_cast<double>(losses.data_as<float>()[m]) / count[row_of[m]];
  }
  MultipleChoiceResult result;
  result.loss = ChoiceCrossEntropy(score, right, Q, C, &result.predictions, &dscore);
  if (backward == Backward::kNo) return result;

  // score_r = -(1 / count_r) sum of the row's losses, so d/d(loss_m) = -dscore_r / count_r.
  Tensor dl_host = Tensor::Host({scored}, DType::kF32);
  for (int64_t m = 0; m < scored; ++m) {
    dl_host.data_as<float>()[m] =
        static_cast<float>(-loss_scale * dscore[row_of[m]] / count[row_of[m]]);
  }
  ASSIGN_OR_RETURN(Tensor dl, Alloc(ec, {scored}, DType::kF32));
  RETURN_IF_ERROR(CopyTensor(ec, dl_host.view(), dl.view()));
  ASSIGN_OR_RETURN(Tensor dseq, AllocZeros(ec, {B_ * T_, config_.hidden_size}, dtype_));
  RETURN_IF_ERROR(mlm_.BackwardWeighted(sc, word_, dl.view(), dseq.view()));
  RETURN_IF_ERROR(EncoderBackward(sc, dseq.view()));
  return result;
}

}  // namespace models
}  // namespace mt
