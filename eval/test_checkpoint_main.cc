// Writes a model-only checkpoint for the harness tests (testonly): any registered architecture's
// config from the model flags, every weight zero (--zero, the default) or drawn from --seed, saved
// at --tensor_model_parallel_size shards as iteration 1 of --save, with --model_name recorded.
//
//   test_checkpoint --save=DIR --vocab_size=50257 --num_layers=2 --hidden_size=32 ...
//
// An all-zero GPT model predicts the uniform distribution over its real vocabulary at every
// position (zero embeddings, zero LayerNorm gains and biases, so zero logits).
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "checkpoint/model_loading_testutil.h"
#include "core/config_flags.h"
#include "core/fields.h"
#include "core/tool_main.h"
#include "gflags/gflags.h"
#include "models/config.h"

namespace {

struct TestCheckpointConfig {
  std::string save;
  std::string model_name;
  int tensor_model_parallel_size = 1;
  bool zero = true;
  uint64_t seed = 1;
  mt::models::ModelConfig model;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("save", &self.save, "Directory to write the checkpoint to.");
    v("model_name", &self.model_name, "The registered model name to record.");
    v("tensor_model_parallel_size", &self.tensor_model_parallel_size, "Shards to write.");
    v("zero", &self.zero, "Every weight zero (false: the initial values from --seed).");
    v("seed", &self.seed, "Seed of the initial values.");
    mt::models::ModelConfig::Fields(self.model, v);
  }
};

absl::Status Run(const TestCheckpointConfig& config) {
  if (config.save.empty()) return absl::InvalidArgumentError("--save is required");
  auto ranks = mt::checkpoint::testing::BuildRanks(config.model, config.tensor_model_parallel_size,
                                                   config.seed);
  if (!ranks.ok()) return ranks.status();
  for (mt::checkpoint::testing::RankModel& r : *ranks) {
    if (!config.zero) continue;
    const mt::TensorView values = r.store->flat_values();
    std::memset(values.data, 0, values.nbytes());
    if (absl::Status s = r.store->RefreshComputeWeights(mt::ExecContext{}); !s.ok()) return s;
  }
  const absl::Status saved = mt::checkpoint::testing::SaveRanks(
      config.save, 1, config.model.ToJson(), config.model_name, *ranks, /*with_optimizer=*/true);
  if (!saved.ok()) return saved;
  std::printf("wrote %s (%s, %d shard(s), %s weights)\n", config.save.c_str(),
              config.model.ArchitectureName().c_str(), config.tensor_model_parallel_size,
              config.zero ? "zero" : "random");
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  TestCheckpointConfig config;
  const mt::ConfigFlags<TestCheckpointConfig> flags(config);
  return mt::ToolMain("test_checkpoint", "Writes a model-only checkpoint for the tests.", argc,
                      argv, [&]() -> absl::Status {
                        if (absl::Status s = flags.ApplyGiven(&config); !s.ok()) return s;
                        return Run(config);
                      });
}
