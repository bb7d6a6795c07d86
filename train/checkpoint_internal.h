// What the checkpoint code (checkpoint.h) shares between its files; internal to train:checkpoint.
//
//   checkpoint.cc           the save / commit / latest-iteration protocol: directory layout,
//                           atomic shard writes, fsyncs, the pointer file, pruning
//   checkpoint_metadata.cc  the metadata.json schema: writing, parsing, comparing configs,
//                           canonical JSON
//   checkpoint_load.cc      LoadShard: does a checkpoint fit this run, then read it
//   checkpoint_reshard.cc   ReshardCheckpoint
#ifndef MT_TRAIN_CHECKPOINT_INTERNAL_H_
#define MT_TRAIN_CHECKPOINT_INTERNAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"
#include "nlohmann/json.hpp"
#include "train/checkpoint.h"

namespace mt {
namespace train {
namespace internal {

using Json = nlohmann::json;

// ---- Directory layout and records (checkpoint.cc).

// dir + "/" + name, without doubling a trailing slash.
std::string JoinPath(const std::string& dir, const std::string& name);
// "mp_rank_01".
std::string ShardName(int tp_rank);
// Shape of a rank's slice of `global` (split_dim -1: the whole tensor). Assumes divisibility.
Shape LocalShape(const Shape& global, int split_dim, int tp_size);
// The checks SaveShard and LoadShard make on a caller's record (InvalidArgument naming `op` and
// the tensor): a non-empty UTF-8 name, split_dim in range, divisibility, the local view being
// the rank's slice, contiguous host memory.
absl::Status ValidateRecord(absl::string_view op, const TensorRecord& t, int tp_size);
// Every shard of the iteration exists, has a tensors file of the recorded size, and agrees with
// shard 0 on tp_size and model config. FailedPrecondition for a missing or inconsistent shard,
// DataLoss for a tensors file of the wrong size.
absl::Status VerifyComplete(const std::string& dir, int64_t iteration, int tp_size);

// ---- metadata.json (checkpoint_metadata.cc).

// One tensor as metadata.json lists it.
struct StoredTensor {
  std::string name;
  Shape global_shape;
  int split_dim = -1;
  bool vocab_padded = false;
};

// A shard's parsed metadata.json.
struct ShardInfo {
  CheckpointMetadata meta;  // model_config_json in canonical form
  Json model_config;
  std::vector<StoredTensor> tensors;
  int64_t tensors_file_bytes = 0;
  std::string shard_dir;  // set by ReadShardInfo
};

// Compact JSON (indent -1), or indented by `indent` spaces; keys sorted (nlohmann's object
// order), so compact output is the canonical form configs are compared and returned in.
std::string Dump(const Json& j, int indent = -1);
// `text` parsed as a JSON object; a discarded value (is_discarded()) for anything else.
Json ParseObject(absl::string_view text);
// The metadata.json document of a shard holding `tensors` (model_config: meta's config, parsed).
Json MetadataJson(const CheckpointMetadata& meta, const Json& model_config,
                  const std::vector<TensorRecord>& tensors, int64_t tensors_file_bytes);
// Parses the metadata.json at `path` (for messages). DataLoss naming the path and the field for
// anything that is not this format and version or not self-consistent.
absl::StatusOr<ShardInfo> ParseMetadata(const std::string& path, const std::string& text);
// Reads and parses shard tp_rank's metadata, checking that it describes that iteration and rank.
// NotFound if the shard does not exist; DataLoss as ParseMetadata.
absl::StatusOr<ShardInfo> ReadShardInfo(const std::string& dir, int64_t iteration, int tp_rank);
// "a (checkpoint: 1, this run: 2); b (checkpoint: absent, this run: 3)".
std::string ConfigDifferences(const Json& checkpoint, const Json& run);
// "global shape [4, 6] split on dim 1 (vocab-padded)" / "... replicated".
std::string DescribeTensor(const Shape& global_shape, int split_dim, bool vocab_padded);

}  // namespace internal
}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_CHECKPOINT_INTERNAL_H_
