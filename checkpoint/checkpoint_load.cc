// LoadShard (checkpoint.h): checks that a checkpoint fits this run before anything is written
// into the caller's tensors, then reads them.
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_internal.h"
#include "checkpoint/safetensors.h"
#include "core/status.h"

namespace mt {
namespace checkpoint {

namespace internal {

absl::Status NamesError(absl::string_view where, absl::string_view verb,
                        const std::vector<std::string>& names, absl::string_view which) {
  return absl::FailedPreconditionError(absl::StrCat(
      where, verb, names.size(), " tensor(s) ", which, ": ",
      absl::StrJoin(names.begin(), names.begin() + std::min<size_t>(names.size(), 8), ", "),
      names.size() > 8 ? ", ..." : ""));
}

absl::StatusOr<SafetensorsReader> OpenShardTensors(FileSystem& fs, const ShardInfo& info,
                                                   CheckpointVerify verify) {
  ASSIGN_OR_RETURN(SafetensorsReader reader,
                   SafetensorsReader::Open(JoinPath(info.shard_dir, kShardTensorsFile), fs));
  for (const StoredTensor& s : info.tensors) {
    // The digest `verify` asks for, else the other one the tensor has (a checkpoint from before
    // CRC32Cs has SHA-256s only); none in checkpoints from before digests: read unchecked.
    if (verify == CheckpointVerify::kNone) break;
    const bool crc32c =
        s.crc32c.has_value() && (verify == CheckpointVerify::kCrc32c || s.sha256.empty());
    if (!crc32c && s.sha256.empty()) continue;
    absl::Status expected =
        crc32c ? reader.ExpectCrc32c(s.name, *s.crc32c) : reader.ExpectSha256(s.name, s.sha256);
    if (absl::IsNotFound(expected)) {
      return absl::DataLossError(absl::StrCat(reader.path(), ": tensor '", s.name,
                                              "' is listed in ", kShardMetadataFile,
                                              " but missing"));
    }
    RETURN_IF_ERROR(expected);
  }
  return reader;
}

}  // namespace internal

namespace {

using internal::Json;
using internal::ShardInfo;
using internal::StoredTensor;

// The shard's metadata, checked against this run's TP degree, pipeline size and model config.
absl::StatusOr<ShardInfo> ReadMatchingShard(FileSystem& fs, const std::string& load_dir,
                                            int64_t iteration, int tp_rank, int tp_size,
                                            int pp_rank, int pp_size, const Json& expected_config,
                                            const std::string& where) {
  // The first shard says how the checkpoint is laid out.
  ASSIGN_OR_RETURN(const ShardInfo first, internal::ReadShardInfo(fs, load_dir, iteration, 0));
  if (first.meta.tp_size != tp_size || first.meta.pp_size != pp_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, " was saved with tensor_model_parallel_size ", first.meta.tp_size,
        " and pipeline_model_parallel_size ", first.meta.pp_size, " but this run uses ", tp_size,
        " and ", pp_size,
        "; convert it first: bazel run //checkpoint:reshard_checkpoint -- --load=", load_dir,
        " --save=<new dir> --tensor_model_parallel_size=", tp_size,
        " --pipeline_model_parallel_size=", pp_size, " --iteration=", iteration));
  }
  if (first.meta.ep_size != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, " holds its experts in ", first.meta.ep_size,
        " expert-parallel shards (expert_model_parallel_size ", first.meta.ep_size,
        "); read it with LoadResharded, which finds each expert in the shard holding it"));
  }
  ASSIGN_OR_RETURN(ShardInfo info,
                   internal::ReadShardInfo(fs, load_dir, iteration, tp_rank, pp_rank, pp_size));
  RETURN_IF_ERROR(internal::CheckSameConfig(where, info.model_config, expected_config));
  return info;
}

// Whether stored tensor `s` can be read into `t`: the same partitioning and dtype, and a tensors
// file entry of the rank's slice shape.
absl::Status CheckFits(const StoredTensor& s, const TensorRecord& t,
                       const SafetensorsReader& reader, int tp_size, const std::string& where) {
  if (t.global_shape != s.global_shape || t.split_dim != s.split_dim ||
      t.vocab_padded != s.vocab_padded) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": tensor '", s.name, "' has ",
        internal::DescribeTensor(s.global_shape, s.split_dim, s.vocab_padded),
        " in the checkpoint, ",
        internal::DescribeTensor(t.global_shape, t.split_dim, t.vocab_padded), " in this model"));
  }
  const SafetensorsEntry* e = reader.Find(s.name);
  if (e == nullptr) {
    return absl::DataLossError(absl::StrCat(reader.path(), ": tensor '", s.name, "' is listed in ",
                                            kShardMetadataFile, " but missing"));
  }
  if (e->shape != internal::LocalShape(s.global_shape, s.split_dim, tp_size)) {
    return absl::DataLossError(absl::StrCat(reader.path(), ": tensor '", s.name, "' has shape ",
                                            ShapeToString(e->shape), ", not the rank's slice ",
                                            "of ", ShapeToString(s.global_shape)));
  }
  if (e->dtype != t.local.dtype) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": tensor '", s.name, "' is ",
                                                      DTypeName(e->dtype), " in the checkpoint, ",
                                                      DTypeName(t.local.dtype), " in this model"));
  }
  return absl::OkStatus();
}

// Whether the checkpoint holds exactly the tensors `wanted` names, each fitting.
absl::Status CheckAllFit(const ShardInfo& info, const SafetensorsReader& reader,
                         const std::map<std::string, const TensorRecord*>& wanted, int tp_size,
                         const std::string& where) {
  std::vector<std::string> extra;
  std::set<std::string> stored_names;
  for (const StoredTensor& s : info.tensors) {
    stored_names.insert(s.name);
    auto it = wanted.find(s.name);
    if (it == wanted.end()) {
      extra.push_back(s.name);
      continue;
    }
    RETURN_IF_ERROR(CheckFits(s, *it->second, reader, tp_size, where));
  }
  std::vector<std::string> missing;
  for (const auto& [name, record] : wanted) {
    if (stored_names.count(name) == 0) missing.push_back(name);
  }
  if (!missing.empty()) return internal::NamesError(where, " lacks ", missing, "of this model");
  if (!extra.empty()) {
    return internal::NamesError(where, " holds ", extra, "this model does not have");
  }
  if (reader.entries().size() != info.tensors.size()) {
    return absl::DataLossError(absl::StrCat(reader.path(), " holds ", reader.entries().size(),
                                            " tensors, ", kShardMetadataFile, " lists ",
                                            info.tensors.size()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadShard(const std::string& load_dir, int64_t iteration, int tp_rank, int tp_size,
                       const std::string& expected_model_config_json,
                       const std::vector<TensorRecord>& into, CheckpointMetadata* meta, int pp_rank,
                       int pp_size, FileSystem& fs, CheckpointVerify verify) {
  constexpr char kOp[] = "LoadShard";
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size || pp_size < 1 || pp_rank < 0 ||
      pp_rank >= pp_size) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": bad tp_rank ", tp_rank, " of tp_size ",
                                                   tp_size, " or pp_rank ", pp_rank, " of pp_size ",
                                                   pp_size));
  }
  const Json expected_config = internal::ParseObject(expected_model_config_json);
  if (expected_config.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": expected model config is not a JSON object: ", expected_model_config_json));
  }
  std::map<std::string, const TensorRecord*> wanted;
  for (const TensorRecord& t : into) {
    RETURN_IF_ERROR(internal::ValidateRecord(kOp, t, tp_size));
    if (!wanted.emplace(t.name, &t).second) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": tensor '", t.name, "' listed twice"));
    }
  }

  const std::string where = absl::StrCat("checkpoint ", load_dir, " iteration ", iteration);
  ASSIGN_OR_RETURN(const ShardInfo info,
                   ReadMatchingShard(fs, load_dir, iteration, tp_rank, tp_size, pp_rank, pp_size,
                                     expected_config, where));
  // Does the checkpoint fit `into`? All of this is checked before anything is overwritten.
  ASSIGN_OR_RETURN(SafetensorsReader reader, internal::OpenShardTensors(fs, info, verify));
  RETURN_IF_ERROR(CheckAllFit(info, reader, wanted, tp_size, where));
  std::vector<SafetensorsReader::ReadRequest> reads;
  reads.reserve(into.size());
  for (const TensorRecord& t : into) reads.push_back({t.name, t.local});
  RETURN_IF_ERROR(reader.ReadMany(reads));
  if (meta != nullptr) *meta = info.meta;
  return absl::OkStatus();
}

}  // namespace checkpoint
}  // namespace mt
