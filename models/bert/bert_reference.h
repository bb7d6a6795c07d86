// A float64 BERT forward written independently of nn/ and core/ops (plain loops), used by the
// tests as the reference for losses and, through finite differences, for gradients. Parameters are
// looked up by the names BertModel declares (models/bert/bert.h), in their GLOBAL (serial) layout,
// with the word embedding and lm_head.bias cut to the real vocabulary (the padding never matters).
// No dropout. Sequences are [rows, T] row-major; padding_mask is 0 at padded keys.
#ifndef MT_MODELS_BERT_BERT_REFERENCE_H_
#define MT_MODELS_BERT_BERT_REFERENCE_H_

#include <map>
#include <string>
#include <vector>

#include "models/config.h"
#include "models/testing/reference_math.h"

namespace mt {
namespace models {
namespace testing {

struct BertInputs {
  int rows = 0, T = 0;
  std::vector<int> tokens, token_types, padding_mask;  // [rows, T]
};

struct ReferenceBertLosses {
  double total = 0, mlm = 0, sop = 0;
};

// MLM: mean cross-entropy over mlm_labels != -100 ([rows, T]); SOP: mean over the rows of
// sop_labels ([rows], in {0, 1}).
ReferenceBertLosses ReferenceBertPretrainingLoss(const ModelConfig& c, const ParamMap& p,
                                                 const BertInputs& in,
                                                 const std::vector<int>& mlm_labels,
                                                 const std::vector<int>& sop_labels);

// Mean cross-entropy over the questions of the choice scores; rows = questions * choices and
// labels: [questions] in [0, choices). Writes the scores ([rows]) to *scores when non-null.
double ReferenceBertMultipleChoiceLoss(const ModelConfig& c, const ParamMap& p,
                                       const BertInputs& in, const std::vector<int>& labels,
                                       std::vector<double>* scores = nullptr);

// The masked choice: row r's score is minus the mean MLM cross-entropy of its labelled positions
// (mlm_labels [rows, T], at least one per row); the mean over the questions of the cross-entropy
// of the scores, choices [questions] the right ones. Writes the scores ([rows]) when non-null.
double ReferenceBertMaskedChoiceLoss(const ModelConfig& c, const ParamMap& p, const BertInputs& in,
                                     const std::vector<int>& mlm_labels,
                                     const std::vector<int>& choices,
                                     std::vector<double>* scores = nullptr);

}  // namespace testing
}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_BERT_BERT_REFERENCE_H_
