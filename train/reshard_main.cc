// Converts a checkpoint to another tensor-parallel degree.
//
//   bazel run //train:reshard_checkpoint -- --load=DIR --save=NEW_DIR
//       --tensor_model_parallel_size=N [--iteration=K]
//
// Reads iteration K (default: the latest) of the checkpoint in DIR, reassembles every tensor from
// its TP slices, re-pads the vocabulary for the new degree (vocab_size rounded up to a multiple of
// make_vocab_size_divisible_by * N, as the models do) and writes a committed checkpoint with N
// shards to NEW_DIR. Errors are one line on stderr with a non-zero exit.
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gflags/gflags.h"
#include "nlohmann/json.hpp"
#include "nn/embedding.h"
#include "train/checkpoint.h"

DEFINE_string(load, "", "Checkpoint directory to read.");
DEFINE_string(save, "",
              "Directory to write the resharded checkpoint to (must not hold the "
              "same iteration).");
DEFINE_int32(tensor_model_parallel_size, 0, "Tensor-parallel degree of the new checkpoint.");
DEFINE_int64(iteration, -1, "Iteration to convert (-1: the latest).");

namespace {

int Fail(absl::string_view message) {
  // One line, whatever the message holds.
  const std::string line = absl::StrReplaceAll(message, {{"\n", " "}});
  std::fprintf(stderr, "reshard_checkpoint: error: %s\n", line.c_str());
  return 1;
}

int Fail(const absl::Status& status) { return Fail(status.message()); }

// A positive integer field of the stored model config.
bool PositiveField(const nlohmann::json& config, const char* key, int64_t* out) {
  auto it = config.find(key);
  if (it == config.end() || !it->is_number_unsigned() || it->get<uint64_t>() == 0 ||
      it->get<uint64_t>() > (uint64_t{1} << 40)) {
    return false;
  }
  *out = static_cast<int64_t>(it->get<uint64_t>());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "Converts a checkpoint to another tensor-parallel degree:\n  reshard_checkpoint "
      "--load=DIR --save=NEW_DIR --tensor_model_parallel_size=N [--iteration=K]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (argc > 1) return Fail(absl::StrCat("unexpected argument '", argv[1], "'"));
  if (FLAGS_load.empty()) return Fail("--load is required (the checkpoint directory to read)");
  if (FLAGS_save.empty()) return Fail("--save is required (the directory to write)");
  const int tp = FLAGS_tensor_model_parallel_size;
  if (tp < 1) {
    return Fail(absl::StrCat("--tensor_model_parallel_size must be >= 1 (got ", tp, ")"));
  }
  if (FLAGS_iteration < -1) {
    return Fail(
        absl::StrCat("--iteration must be >= 0, or -1 for the latest (got ", FLAGS_iteration, ")"));
  }

  int64_t iteration = FLAGS_iteration;
  if (iteration < 0) {
    auto latest = mt::train::LatestIteration(FLAGS_load);
    if (!latest.ok()) return Fail(latest.status());
    iteration = *latest;
  }
  auto meta = mt::train::ReadShardMetadata(FLAGS_load, iteration, /*tp_rank=*/0);
  if (!meta.ok()) return Fail(meta.status());
  const nlohmann::json config =
      nlohmann::json::parse(meta->model_config_json, nullptr, /*allow_exceptions=*/false);
  int64_t vocab = 0, multiple = 0;
  if (!config.is_object() || !PositiveField(config, "vocab_size", &vocab) ||
      !PositiveField(config, "make_vocab_size_divisible_by", &multiple)) {
    return Fail(absl::StrCat("the model config stored in ", FLAGS_load, " iteration ", iteration,
                             " lacks positive integers vocab_size and "
                             "make_vocab_size_divisible_by"));
  }
  const int64_t old_padded = mt::nn::PaddedVocabSize(vocab, multiple, meta->tp_size);
  const int64_t new_padded = mt::nn::PaddedVocabSize(vocab, multiple, tp);
  absl::Status status =
      mt::train::ReshardCheckpoint(FLAGS_load, iteration, FLAGS_save, tp, vocab, new_padded);
  if (!status.ok()) return Fail(status);
  std::printf(
      "resharded iteration %lld of %s from tensor_model_parallel_size %d to %d "
      "(padded vocabulary %lld -> %lld) into %s\n",
      static_cast<long long>(iteration), FLAGS_load.c_str(), meta->tp_size, tp,
      static_cast<long long>(old_padded), static_cast<long long>(new_padded), FLAGS_save.c_str());
  return 0;
}
