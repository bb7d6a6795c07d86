// Tests any registered architecture needs, through the model interface (models/model.h): its
// tensor-parallel invariance and collective count, a finite-difference gradient check, and a
// short training run that must learn. A variant package's tests call these with its config; the
// helpers build models with models::CreateModel, so the architecture must be linked in.
// Failures (a status that is not OK included) are gtest failures, never crashes. testonly.
#ifndef MT_MODELS_TESTING_MODEL_TESTUTIL_H_
#define MT_MODELS_TESTING_MODEL_TESTUTIL_H_

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
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

// Collectives of the tensor-parallel group in one forward and one backward of the TP model.
struct AllReduces {
  int64_t forward = 0, backward = 0;
  int64_t others = 0;  // Collectives other than all-reduces, forward and backward together.
};

// What a TP-vs-serial check runs: the pretraining objective (Model::ForwardBackward) or the
// multiple-choice one (Model::MultipleChoice, whose predictions must agree too).
enum class Objective { kPretraining, kMultipleChoice };

// How ExpectTensorParallelMatchesSerial builds, runs and compares the two models.
struct TensorParallelCheck {
  double loss_rel = 1e-5;  // Every loss, relative to the serial one.
  // Gradients, relative to the largest serial gradient of their tensor; logits, relative to
  // 1 + |serial logit|.
  double grad_rel = 1e-5;
  Objective objective = Objective::kPretraining;
  ModelOptions options;       // Both models' (e.g. BERT's heads; sequence parallelism: the TP
                              // model's only).
  uint64_t seed = 7;          // Both stores' initial values.
  int64_t sample_offset = 0;  // The step's first sample (it keys the dropout masks).
  // Where the TP model and its store live: null for the CPU, else an ExecContext on a device.
  // The serial model runs on the CPU.
  const ExecContext* tp_exec = nullptr;
  // Parameters whose gradient is zero in exact arithmetic (both sides are rounding noise), each
  // with the parameter whose largest serial gradient scales the comparison instead (the noise
  // must stay below loss_rel of it).
  std::vector<std::pair<std::string, std::string>> zero_gradients;
  // Vocabulary-padded parameters whose spec does not say so (ParamSpec::vocab_padded).
  std::vector<std::string> vocab_padded;
};

// Builds `config` serially (on every rank, on the CPU) and at TP = tp.size() over `tp`, with the
// same seed, runs check.objective forward and backward on `batch` with dropout on (and checks that
// dropout changes the serial loss), and EXPECTs that the TP model's losses (and predictions) are
// the serial ones within check.loss_rel, that every rank's parameters are the serial values'
// slices exactly (the padded vocabulary rows excepted), that its gradients are the serial
// gradients' slices within check.grad_rel of the largest gradient of their tensor (which must not
// be zero), and, for models with Logits, that the gathered logits are the serial ones. Returns the
// TP model's collective counts. Collective over `tp`.
AllReduces ExpectTensorParallelMatchesSerial(comm::Communicator& tp, const ModelConfig& config,
                                             const Batch& batch, const TensorParallelCheck& check);
// The pretraining objective on the CPU with loss_rel = grad_rel = rel.
AllReduces ExpectTensorParallelMatchesSerial(comm::Communicator& tp, const ModelConfig& config,
                                             const Batch& batch, double rel = 1e-5);

// Context parallelism (models/context_parallel.h) over `cp` (its size C): builds `config` with
// ModelOptions::context_parallel = C; if the architecture refuses it, EXPECTs a clear error
// (InvalidArgument or Unimplemented naming context parallelism) and returns false. Otherwise
// EXPECTs that one training step on the whole `batch` (T divisible by 2C; dropout as configured,
// attention dropout too) gives the serial model's loss within `rel` and, summed over the CP
// ranks, its gradients within `rel` of each tensor's largest, and returns true. Collective over
// `cp`.
bool ExpectContextParallelMatchesSerialOrRefused(comm::Communicator& cp, const ModelConfig& config,
                                                 const Batch& batch, double rel = 2e-5);

// Central finite differences of the loss (dropout off, f32) against the backward pass for
// `samples` parameter elements spread over every parameter tensor of the model: EXPECTs each
// within `rel` of max(|analytic|, |numerical|) plus `abs`.
void ExpectGradientsMatchFiniteDifferences(const ModelConfig& config, const Batch& batch,
                                           int samples = 40, double rel = 2e-2, double abs = 2e-4);

// Trains `config` (dropout off) with Adam (lr) for `steps` steps on one batch whose next token is
// (token + 3) mod vocab, a rule the model can only learn from content; returns the first and the
// last loss.
struct Learning {
  double first = 0, last = 0;
};
Learning TrainOnPattern(const ModelConfig& config, int steps = 150, float lr = 1e-2f);

// The model tests' tiny transformer of `family`: `layers` layers of hidden 8 with 2 heads, a
// vocabulary of `vocab` padded to a multiple of 4 (with vocab 11, the padded column exercises the
// mask), `positions` positions, `norm`, dropout off, init_std 0.3 (large enough that attention is
// far from uniform); BERT with 2 token types.
ModelConfig TinyConfig(Family family, nn::NormPosition norm, int layers = 2, int64_t vocab = 11,
                       int64_t positions = 6);

// The cases of the models' mixed-precision tests: bf16 and f16 compute, each with pre-norm and
// post-norm layers; named "bf16_pre", "f16_post", ...
using PrecisionParam = std::tuple<DType, nn::NormPosition>;
inline auto HalfPrecisionCases() {
  return ::testing::Combine(
      ::testing::Values(DType::kBF16, DType::kF16),
      ::testing::Values(nn::NormPosition::kPreNorm, nn::NormPosition::kPostNorm));
}
std::string PrecisionCaseName(const ::testing::TestParamInfo<PrecisionParam>& info);

}  // namespace testing
}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_TESTING_MODEL_TESTUTIL_H_
