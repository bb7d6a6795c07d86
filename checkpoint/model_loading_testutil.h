// Test fixtures for model loading (model_loading.h): models of any registered architecture built
// for every rank of a TP degree in one process, a value pattern that is a function of (parameter
// name, global element index) only, so that a checkpoint written at one degree can be checked at
// any other by index arithmetic independent of the checkpoint code, and a writer of checkpoints
// from such stores. testonly.
#ifndef MT_CHECKPOINT_MODEL_LOADING_TESTUTIL_H_
#define MT_CHECKPOINT_MODEL_LOADING_TESTUTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/exec_context.h"
#include "gtest/gtest.h"
#include "models/config.h"
#include "models/model.h"
#include "nn/parameter.h"

namespace mt {
namespace checkpoint {
namespace testing {

// Element `global_index` (row-major in the serial model's tensor) of parameter `name`: values in
// (-1, 1), distinct across names and indices in practice. For a vocab-padded tensor the index of
// a real row's element does not depend on the padded row count (dimension 0 is outermost).
float PatternValue(const std::string& name, int64_t global_index);

// A small config of `family`'s standard architecture: hidden 16, 8 positions, the given layers
// and heads, and a vocabulary of vocab_size padded to a multiple of vocab_multiple x TP.
models::ModelConfig TinyConfig(models::Family family, int num_layers, int heads, int64_t vocab_size,
                               int64_t vocab_multiple);

// One TP rank's store (CPU, f32, allocated) and the model declared in it.
struct RankModel {
  std::unique_ptr<nn::ParameterStore> store;
  std::unique_ptr<models::Model> model;
};

// config's model (models::CreateModel) for every rank of tp, allocated from `seed`.
absl::StatusOr<std::vector<RankModel>> BuildRanks(const models::ModelConfig& config, int tp,
                                                  uint64_t seed,
                                                  const models::ModelOptions& options = {});

// Sets every master of `store` (CPU, allocated), padding rows included, to PatternValue of its
// global index, and refreshes the compute copies (whose errors it returns).
absl::Status FillWithPattern(nn::ParameterStore* store);

// Writes a committed checkpoint `iteration` under `dir` from ranks[r] (rank r of ranks.size()):
// every parameter's masters, plus "optimizer.exp_avg.<name>" (twice the masters) for each when
// with_optimizer, as training checkpoints hold them. model_config_json is what metadata.json
// records (normally config.ToJson()).
absl::Status SaveRanks(const std::string& dir, int64_t iteration,
                       const std::string& model_config_json, const std::string& model_name,
                       const std::vector<RankModel>& ranks, bool with_optimizer);

// Whether every master of `store` (any device; read through ctx) holds PatternValue of its
// global index, except rows >= real_vocab of vocab-padded tensors, which must be zero, and the
// parameters named in `skip`.
::testing::AssertionResult HoldsPattern(const nn::ParameterStore& store, const ExecContext& ctx,
                                        int64_t real_vocab,
                                        const std::vector<std::string>& skip = {});

}  // namespace testing
}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_MODEL_LOADING_TESTUTIL_H_
