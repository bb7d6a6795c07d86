// Multiple choice (RACE), a capability of a models::Model (model.h: Model::multiple_choice()):
// scores the choices of each question and trains on the right one. BertModel implements it (with
// the multiple-choice head: ModelOptions::heads kMultipleChoice or kAll).
#ifndef MT_MODELS_MULTIPLE_CHOICE_H_
#define MT_MODELS_MULTIPLE_CHOICE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "models/model.h"
#include "nn/context.h"

namespace mt {
namespace models {

struct MultipleChoiceResult {
  double loss = 0;               // Mean cross-entropy over the questions.
  std::vector<int> predictions;  // [Q]: argmax of the scores (lowest index on ties).
};

class MultipleChoiceModel {
 public:
  virtual ~MultipleChoiceModel() = default;

  // Multiple choice (RACE): see Batch. Returns the mean cross-entropy over the questions and each
  // question's predicted choice; with Backward::kYes ACCUMULATES loss_scale * d(loss)/d(params).
  // A batch with `choices` is a masked choice: each row's score is the masked-LM head's mean
  // log-probability of its labelled pieces (the option written into the question's blank), so
  // the pretrained head answers the cloze; without, the choice head scores the pooled [CLS]
  // (Megatron's RACE). FailedPrecondition for a model built without the head the batch needs.
  virtual absl::StatusOr<MultipleChoiceResult> MultipleChoice(const nn::StepContext& sc,
                                                              const Batch& batch, Backward backward,
                                                              double loss_scale = 1.0) = 0;
};

// model.multiple_choice(), or Unimplemented naming the architecture when it has none.
absl::StatusOr<MultipleChoiceModel*> MultipleChoiceOf(Model& model);

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_MULTIPLE_CHOICE_H_
