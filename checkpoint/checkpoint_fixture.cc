// Test helper for reshard_test.sh: writes the synthetic checkpoint of checkpoint_testutil.h, or
// checks that a (resharded) checkpoint holds exactly its slices.
//
//   checkpoint_fixture --mode=write --dir=D --tp=2 --iteration=100 [--config_json=...]
//   checkpoint_fixture --mode=verify --dir=D --tp=4 --source_tp=2 --iteration=100
#include <cstdio>
#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_testutil.h"
#include "core/tool_main.h"
#include "gflags/gflags.h"

DEFINE_string(mode, "", "write or verify.");
DEFINE_string(dir, "", "Checkpoint directory.");
DEFINE_int32(tp, 2, "TP degree of the checkpoint to write or verify.");
DEFINE_int32(source_tp, 2, "verify: the TP degree the synthetic model was written with.");
DEFINE_int64(iteration, 100, "Iteration.");
DEFINE_uint64(seed, 17, "Seed of the synthetic model.");
DEFINE_string(config_json, "", "write: a model config replacing the synthetic one.");

namespace mt {
namespace checkpoint {
namespace testing {
namespace {

absl::Status Run() {
  const auto model = SyntheticModel(PaddedVocab(FLAGS_source_tp), FLAGS_seed);
  if (FLAGS_mode == "write") {
    const auto written = SyntheticModel(PaddedVocab(FLAGS_tp), FLAGS_seed);
    for (int r = 0; r < FLAGS_tp; ++r) {
      std::vector<Tensor> storage;
      CheckpointMetadata meta = SyntheticMeta(FLAGS_iteration, r, FLAGS_tp);
      if (!FLAGS_config_json.empty()) meta.model_config_json = FLAGS_config_json;
      absl::Status s = SaveShard(FLAGS_dir, meta, FilledRecords(written, r, FLAGS_tp, &storage));
      if (!s.ok()) return s;
    }
    absl::Status s = CommitCheckpoint(FLAGS_dir, FLAGS_iteration, FLAGS_tp, 0);
    return s;
  }
  if (FLAGS_mode == "verify") {
    ::testing::AssertionResult ok =
        HoldsModel(FLAGS_dir, FLAGS_iteration, FLAGS_tp, Repadded(model, PaddedVocab(FLAGS_tp)));
    if (!ok) return absl::DataLossError(ok.message());
    std::printf("verified %s: TP %d holds the synthetic model\n", FLAGS_dir.c_str(), FLAGS_tp);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError("--mode must be write or verify");
}

}  // namespace
}  // namespace testing
}  // namespace checkpoint
}  // namespace mt

int main(int argc, char** argv) {
  return mt::ToolMain("checkpoint_fixture", "Writes or verifies the synthetic test checkpoint.",
                      argc, argv, mt::checkpoint::testing::Run);
}
