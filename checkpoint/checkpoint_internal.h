// What the checkpoint code (checkpoint.h) shares between its files; internal to //checkpoint.
//
//   checkpoint.cc           the save / commit / latest-iteration protocol: directory layout,
//                           atomic shard writes, fsyncs, the pointer file, pruning
//   checkpoint_metadata.cc  the metadata.json schema: writing, parsing, comparing configs,
//                           canonical JSON
//   checkpoint_load.cc      LoadShard: does a checkpoint fit this run, then read it
//   checkpoint_reshard.cc   ReshardCheckpoint, and reassembling global tensors from the shards
//   checkpoint_load_resharded.cc   LoadResharded: this run's slices from any TP degree
#ifndef MT_CHECKPOINT_CHECKPOINT_INTERNAL_H_
#define MT_CHECKPOINT_CHECKPOINT_INTERNAL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "core/file_system.h"
#include "core/tensor.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace checkpoint {
namespace internal {

using Json = nlohmann::json;

// ---- Directory layout and records (checkpoint.cc).

// dir + "/" + name, without doubling a trailing slash.
std::string JoinPath(const std::string& dir, const std::string& name);
// "mp_rank_01" (pp_size 1), "mp_rank_01_002" (pp_rank 2 of any other pp_size); with ep_size > 1
// the expert-parallel rank follows: "mp_rank_01_001" (pp_size 1), "mp_rank_01_002_001".
std::string ShardName(int tp_rank, int pp_rank = 0, int pp_size = 1, int ep_rank = 0,
                      int ep_size = 1);
// Shape of a rank's slice of `global` (split_dim -1: the whole tensor). Assumes divisibility.
Shape LocalShape(const Shape& global, int split_dim, int tp_size);
// The checks SaveShard and LoadShard make on a caller's record (InvalidArgument naming `op` and
// the tensor): a non-empty UTF-8 name, split_dim in range, divisibility, the local view being
// the rank's slice, contiguous host memory.
absl::Status ValidateRecord(absl::string_view op, const TensorRecord& t, int tp_size);
// Every shard of the iteration (tp_size x pp_size x ep_size) exists, has a tensors file of the
// recorded size, and agrees with the first on the layout and model config. FailedPrecondition for
// a missing or inconsistent shard, DataLoss for a tensors file of the wrong size.
absl::Status VerifyComplete(FileSystem& fs, const std::string& dir, int64_t iteration, int tp_size,
                            int pp_size = 1, int ep_size = 1);

// ---- metadata.json (checkpoint_metadata.cc).

// One tensor as metadata.json lists it.
struct StoredTensor {
  std::string name;
  Shape global_shape;
  int split_dim = -1;
  bool vocab_padded = false;
  // Lowercase hex SHA-256 of the tensor's bytes in the shard's tensors file; empty in checkpoints
  // written before digests were recorded (loaded unchecked).
  std::string sha256;
  // Its CRC32C; absent in checkpoints written before CRC32Cs were recorded.
  std::optional<uint32_t> crc32c;
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
// The metadata.json document of a shard holding `tensors` (model_config: meta's config, parsed;
// digests: each tensor's SHA-256 and CRC32C, in the order of `tensors`).
Json MetadataJson(const CheckpointMetadata& meta, const Json& model_config,
                  const std::vector<TensorRecord>& tensors,
                  const std::vector<TensorDigests>& digests, int64_t tensors_file_bytes);
// Parses the metadata.json at `path` (for messages). DataLoss naming the path and the field for
// anything that is not this format and version or not self-consistent.
absl::StatusOr<ShardInfo> ParseMetadata(const std::string& path, const std::string& text);
// Reads and parses the metadata of TP rank tp_rank's shard on pipeline stage pp_rank of
// expert-parallel rank ep_rank, checking that it describes that iteration, rank, stage and EP
// rank. pp_size 0: whatever the checkpoint's pipeline and expert-parallel sizes (ep_size is then
// ignored), which the first of mp_rank_00, mp_rank_00_000 and mp_rank_00_000_000 that exists
// gives. NotFound if the shard does not exist; DataLoss as ParseMetadata.
absl::StatusOr<ShardInfo> ReadShardInfo(FileSystem& fs, const std::string& dir, int64_t iteration,
                                        int tp_rank, int pp_rank = 0, int pp_size = 0,
                                        int ep_rank = 0, int ep_size = 1);
// "a (checkpoint: 1, this run: 2); b (checkpoint: absent, this run: 3)".
std::string ConfigDifferences(const Json& checkpoint, const Json& run);
// OK when the configs are equal; else FailedPrecondition "<where>: model config differs from this
// run's: <ConfigDifferences>".
absl::Status CheckSameConfig(absl::string_view where, const Json& checkpoint, const Json& run);
// "global shape [4, 6] split on dim 1 (vocab-padded)" / "... replicated".
std::string DescribeTensor(const Shape& global_shape, int split_dim, bool vocab_padded);

// ---- Loading (checkpoint_load.cc).

// The shard's tensors file, open, with every tensor that metadata.json gives a digest for checked
// against it on each read, as `verify` says (checkpoint.h, CheckpointVerify; SafetensorsReader::
// ExpectCrc32c, ExpectSha256). The reader's errors; DataLoss for a tensor listed in metadata.json
// but absent from the file.
absl::StatusOr<SafetensorsReader> OpenShardTensors(FileSystem& fs, const ShardInfo& info,
                                                   CheckpointVerify verify);

// FailedPrecondition "<where><verb>N tensor(s) <which>: a, b, c" (at most 8 names), e.g.
// where + " lacks " ... "of this model".
absl::Status NamesError(absl::string_view where, absl::string_view verb,
                        const std::vector<std::string>& names, absl::string_view which);

// ---- Global tensors from the shards of any TP degree (checkpoint_reshard.cc).

// Copies slice `rank` of `tp` along split_dim (>= 0) between a contiguous buffer holding the
// whole tensor of global_shape and a contiguous one holding the slice (to_global: local -> global,
// else global -> local).
void CopySlice(const Shape& global_shape, int split_dim, int rank, int tp, size_t elem_bytes,
               char* global, char* local, bool to_global);
// Readers of every TP shard of one pipeline stage of checkpoint `iteration` (saved with
// first.meta.tp_size ranks; `first` is the stage's TP rank 0's info), each checked to list
// first's tensors as the rank's slices. NotFound / DataLoss for a missing or inconsistent shard.
absl::StatusOr<std::vector<SafetensorsReader>> OpenShards(FileSystem& fs, const std::string& dir,
                                                          int64_t iteration, const ShardInfo& first,
                                                          CheckpointVerify verify);

// One pipeline stage (and expert-parallel rank) of a checkpoint: its TP rank 0's metadata and a
// reader per TP shard.
struct SourceStage {
  ShardInfo first;
  std::vector<SafetensorsReader> readers;
};

// A whole checkpoint, opened (every stage and EP rank, checked complete first), and where each
// tensor name is read from: the first stage holding it (stages in pipeline order, each stage's EP
// ranks in order).
struct Source {
  std::vector<SourceStage> stages;
  struct Entry {
    int stage;
    const StoredTensor* stored;  // In stages[stage].first.tensors.
  };
  // In stored order: stage 0's (EP rank 0's) tensors, then the later ones' new names.
  std::vector<std::pair<std::string, Entry>> tensors;
  const ShardInfo& first() const { return stages[0].first; }
};

// Opens checkpoint `iteration` of dir. NotFound / DataLoss / FailedPrecondition for a missing,
// corrupt or incomplete checkpoint; DataLoss when two stages hold one name with different
// global shapes or partitioning.
absl::StatusOr<Source> OpenSource(FileSystem& fs, const std::string& dir, int64_t iteration,
                                  CheckpointVerify verify);
// Stored tensor `s` assembled from every reader's slice, in its stored global shape and dtype.
// DataLoss when the shards disagree on its dtype; the readers' errors.
absl::StatusOr<Tensor> ReadGlobal(const StoredTensor& s, std::vector<SafetensorsReader>& readers);
// `old_global`, a vocab-padded tensor, with its first real_vocab rows kept and the rest zero, in
// new_shape (rows added or dropped at the end; requires real_vocab <= both row counts).
absl::StatusOr<Tensor> Repad(Tensor old_global, const Shape& new_shape, int64_t real_vocab);

}  // namespace internal
}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_CHECKPOINT_INTERNAL_H_
