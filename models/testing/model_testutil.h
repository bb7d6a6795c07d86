// Tests any registered architecture needs, through the model interface (models/model.h): its
// tensor-parallel invariance and collective count, a finite-difference gradient check, and a
// short training run that must learn. A variant package's tests call these with its config; the
// helpers build models with models::CreateModel, so the architecture must be linked in.
// Failures (a status that is not OK included) are gtest failures, never crashes. testonly.
#ifndef MT_MODELS_TESTING_MODEL_TESTUTIL_H_
#define MT_MODELS_TESTING_MODEL_TESTUTIL_H_

#include <cstdint>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "models/config.h"
#include "models/model.h"
#include "models/testing/reference_math.h"
#include "nn/parameter.h"

namespace mt {
namespace models {
namespace testing {

// A language-model batch of B sequences of T tokens (tokens and next-token labels drawn by a
// fixed rule from [0, vocab)), host i32.
struct LmBatch {
  Tensor tokens, labels;
  Batch view() const { return LanguageModelBatch(tokens.view(), labels.view()); }
};
LmBatch MakeLmBatch(int64_t B, int64_t T, int64_t vocab);

// The values of a serial (TP = 1) CPU store by parameter name, as doubles, for the float64
// references; vocabulary-padded tensors keep only their first `vocab` rows.
ParamMap ToParamMap(const nn::ParameterStore& store, int64_t vocab);

// All-reduces of the tensor-parallel group in one forward and one backward of the TP model.
struct AllReduces {
  int64_t forward = 0, backward = 0;
};

// Builds `config` serially (on every rank) and at TP = tp.size() over `tp`, with the same seed,
// runs forward and backward on `batch` with dropout on, and EXPECTs that the TP loss is the
// serial loss within `rel` (relative), that every rank's parameters are the serial values' slices
// exactly (the padded vocabulary rows excepted), and that its gradients are the serial gradients'
// slices within `rel` of the largest gradient of their tensor. Returns the TP model's all-reduce
// counts. Collective over `tp`.
AllReduces ExpectTensorParallelMatchesSerial(comm::Communicator& tp, const ModelConfig& config,
                                             const Batch& batch, double rel = 1e-5);

// Central finite differences of the loss (dropout off, f32) against the backward pass for
// `samples` parameter elements spread over every parameter tensor of the model: EXPECTs each
// within `rel` of max(|analytic|, |numerical|) plus `abs`.
void ExpectGradientsMatchFiniteDifferences(const ModelConfig& config, const Batch& batch,
                                           int samples = 40, double rel = 2e-2,
                                           double abs = 2e-4);

// Trains `config` (dropout off) with Adam (lr) for `steps` steps on one batch whose next token is
// (token + 3) mod vocab, a rule the model can only learn from content; returns the first and the
// last loss.
struct Learning {
  double first = 0, last = 0;
};
Learning TrainOnPattern(const ModelConfig& config, int steps = 150, float lr = 1e-2f);

}  // namespace testing
}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_TESTING_MODEL_TESTUTIL_H_
