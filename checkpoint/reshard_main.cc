// Converts a checkpoint to another tensor-parallel degree and pipeline layout.
//
//   bazel run //checkpoint:reshard_checkpoint -- --load=DIR --save=NEW_DIR
//       --tensor_model_parallel_size=N [--pipeline_model_parallel_size=P
//       [--num_layers_per_virtual_pipeline_stage=L]] [--iteration=K]
//
// Reads iteration K (default: the latest) of the checkpoint in DIR (any layout), reassembles every
// tensor from its TP slices, re-pads the vocabulary for the new degree (vocab_size rounded up to a
// multiple of make_vocab_size_divisible_by * N, as the models do) and writes a committed
// checkpoint with N x P shards to NEW_DIR (P: the checkpoint's own number of stages when not
// given, laid out for plain 1F1B unless L is given; any layout loads into any other). Which
// tensors a pipeline stage holds comes from the model, built from the stored config through the
// registry (the standard models are linked in; a variant package's own reshard_checkpoint links
// the variant). Data parallelism needs no conversion: a checkpoint holds one copy of the state
// (the distributed optimizer's shards are gathered when saving), and loads at any DP size.
// Errors are one line on stderr with a non-zero exit.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/parameter_records.h"
#include "comm/parallel_context.h"
#include "core/fields.h"
#include "core/status.h"
#include "core/tool_main.h"
#include "gflags/gflags.h"
#include "models/config.h"
#include "models/stages.h"
#include "nlohmann/json.hpp"
#include "nn/embedding.h"

DEFINE_string(load, "", "Checkpoint directory to read.");
DEFINE_string(save, "",
              "Directory to write the resharded checkpoint to (must not hold the "
              "same iteration).");
DEFINE_int32(tensor_model_parallel_size, 0, "Tensor-parallel degree of the new checkpoint.");
DEFINE_int32(pipeline_model_parallel_size, 0,
             "Pipeline stages of the new checkpoint (0: as many as the checkpoint has).");
DEFINE_int32(num_layers_per_virtual_pipeline_stage, 0,
             "Layers per model chunk of the interleaved schedule the new checkpoint is for (0: "
             "plain 1F1B).");
DEFINE_int64(iteration, -1, "Iteration to convert (-1: the latest).");
DEFINE_string(checkpoint_verify, "crc32c", mt::checkpoint::kCheckpointVerifyHelp);

namespace {

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

// The new layout's stages_of: from the stage models of the stored config under the new split.
absl::StatusOr<std::function<std::vector<int>(const std::string&)>> StagesOf(
    const std::string& model_config_json, int tp, int pp, int layers_per_virtual_stage) {
  ASSIGN_OR_RETURN(const mt::models::ModelConfig config,
                   mt::models::ModelConfig::FromJson(model_config_json));
  ASSIGN_OR_RETURN(const mt::comm::PipelineSplit split,
                   mt::comm::MakePipelineSplit(config.num_layers, pp, layers_per_virtual_stage));
  ASSIGN_OR_RETURN(const std::vector<std::vector<std::string>> names,
                   mt::models::StageParameterNames(config, tp, split));
  auto stages = std::make_shared<std::map<std::string, std::vector<int>>>();
  for (int p = 0; p < pp; ++p) {
    for (const std::string& name : names[p]) (*stages)[name].push_back(p);
  }
  return [stages](const std::string& tensor) {
    auto it = stages->find(mt::checkpoint::ParameterOfTensor(tensor));
    return it == stages->end() ? std::vector<int>() : it->second;
  };
}

// ", pipeline_model_parallel_size 2 to 1, expert-parallel shards 2 to 1 (...)" for the
// printed summary: what changes besides the TP degree.
std::string LayoutChange(const mt::checkpoint::CheckpointMetadata& meta, int new_pp) {
  std::string change =
      meta.pp_size == 1 && new_pp == 1
          ? std::string()
          : absl::StrCat(", pipeline_model_parallel_size ", meta.pp_size, " to ", new_pp);
  if (meta.ep_size > 1) {
    absl::StrAppend(&change, ", expert-parallel shards ", meta.ep_size,
                    " to 1 (every expert in one shard, loadable at any EP size)");
  }
  return change;
}

absl::Status Run() {
  if (FLAGS_load.empty()) {
    return absl::InvalidArgumentError("--load is required (the checkpoint directory to read)");
  }
  if (FLAGS_save.empty()) {
    return absl::InvalidArgumentError("--save is required (the directory to write)");
  }
  const int tp = FLAGS_tensor_model_parallel_size;
  if (tp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tensor_model_parallel_size must be >= 1 (got ", tp, ")"));
  }
  if (FLAGS_pipeline_model_parallel_size < 0 || FLAGS_num_layers_per_virtual_pipeline_stage < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pipeline_model_parallel_size and --num_layers_per_virtual_pipeline_stage must be >= 0 "
        "(got ",
        FLAGS_pipeline_model_parallel_size, " and ", FLAGS_num_layers_per_virtual_pipeline_stage,
        ")"));
  }
  if (FLAGS_iteration < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--iteration must be >= 0, or -1 for the latest (got ", FLAGS_iteration, ")"));
  }

  int64_t iteration = FLAGS_iteration;
  if (iteration < 0) {
    auto latest = mt::checkpoint::LatestIteration(FLAGS_load);
    if (!latest.ok()) return latest.status();
    iteration = *latest;
  }
  auto meta = mt::checkpoint::ReadShardMetadata(FLAGS_load, iteration, /*tp_rank=*/0);
  if (!meta.ok()) return meta.status();
  const nlohmann::json config =
      nlohmann::json::parse(meta->model_config_json, nullptr, /*allow_exceptions=*/false);
  int64_t vocab = 0, multiple = 0;
  if (!config.is_object() || !PositiveField(config, "vocab_size", &vocab) ||
      !PositiveField(config, "make_vocab_size_divisible_by", &multiple)) {
    return absl::InvalidArgumentError(absl::StrCat("the model config stored in ", FLAGS_load,
                                                   " iteration ", iteration,
                                                   " lacks positive integers vocab_size and "
                                                   "make_vocab_size_divisible_by"));
  }
  // Each TP rank holds whole key/value groups (the fused QKV columns are ordered by group, so a
  // contiguous split keeps a group's query heads with its key and value).
  int64_t groups = 0;
  if (config.value("group_query_attention", false) &&
      PositiveField(config, "num_query_groups", &groups) && groups % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model in ", FLAGS_load, " has ", groups,
                     " key/value groups (num_query_groups), which tensor_model_parallel_size ", tp,
                     " does not divide; choose a TP size that divides them"));
  }
  const int64_t old_padded = mt::nn::PaddedVocabSize(vocab, multiple, meta->tp_size);
  const int64_t new_padded = mt::nn::PaddedVocabSize(vocab, multiple, tp);
  mt::checkpoint::ReshardLayout layout;
  layout.tp_size = tp;
  layout.padded_vocab = new_padded;
  ASSIGN_OR_RETURN(layout.verify, mt::ParseEnum<mt::checkpoint::CheckpointVerify>(
                                      "checkpoint_verify", FLAGS_checkpoint_verify,
                                      mt::checkpoint::kCheckpointVerifyNames));
  layout.pp_size =
      FLAGS_pipeline_model_parallel_size > 0 ? FLAGS_pipeline_model_parallel_size : meta->pp_size;
  if (layout.pp_size > 1 || FLAGS_num_layers_per_virtual_pipeline_stage > 0) {
    auto stages_of = StagesOf(meta->model_config_json, tp, layout.pp_size,
                              FLAGS_num_layers_per_virtual_pipeline_stage);
    if (!stages_of.ok()) return stages_of.status();
    layout.stages_of = *std::move(stages_of);
  }
  absl::Status status =
      mt::checkpoint::ReshardCheckpoint(FLAGS_load, iteration, FLAGS_save, vocab, layout);
  if (!status.ok()) return status;
  const std::string stages = LayoutChange(*meta, layout.pp_size);
  std::printf(
      "resharded iteration %lld of %s from tensor_model_parallel_size %d to %d%s "
      "(padded vocabulary %lld -> %lld) into %s\n",
      static_cast<long long>(iteration), FLAGS_load.c_str(), meta->tp_size, tp, stages.c_str(),
      static_cast<long long>(old_padded), static_cast<long long>(new_padded), FLAGS_save.c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  return mt::ToolMain(
      "reshard_checkpoint",
      "Converts a checkpoint to another tensor-parallel degree and pipeline layout:\n  "
      "reshard_checkpoint --load=DIR --save=NEW_DIR --tensor_model_parallel_size=N "
      "[--pipeline_model_parallel_size=P [--num_layers_per_virtual_pipeline_stage=L]] "
      "[--iteration=K]",
      argc, argv, Run);
}
