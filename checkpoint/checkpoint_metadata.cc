// The metadata.json schema of a checkpoint shard (checkpoint_internal.h).
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_internal.h"
#include "checkpoint/sha256.h"
#include "core/crc32c.h"
#include "core/status.h"

namespace mt {
namespace checkpoint {
namespace internal {

namespace {

constexpr char kFormat[] = "megatron-cpp checkpoint shard";
constexpr int kVersion = 1;

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

// Reads field `key` of `j` as a non-negative integer.
bool GetCount(const Json& j, const char* key, int64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  const uint64_t v = it->get<uint64_t>();
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

// The expert-parallel layout (absent in checkpoints written before expert-parallel shards: one
// shard holding every expert) into *info.
absl::Status ParseExpertLayout(const std::string& path, const Json& j, ShardInfo* info) {
  int64_t ep_size = 1, ep_rank = 0;
  const bool has_size = j.contains("expert_model_parallel_size");
  const bool has_rank = j.contains("expert_model_parallel_rank");
  if (has_size != has_rank ||
      (has_size && (!GetCount(j, "expert_model_parallel_size", &ep_size) ||
                    !GetCount(j, "expert_model_parallel_rank", &ep_rank)))) {
    return Corrupt(path, "expert_model_parallel_size and _rank must both be non-negative integers");
  }
  if (ep_size < 1 || ep_size > (1 << 20) || ep_rank >= ep_size) {
    return Corrupt(path, absl::StrCat("invalid expert-parallel layout: expert_model_parallel_rank ",
                                      ep_rank, " of size ", ep_size));
  }
  info->meta.ep_size = static_cast<int>(ep_size);
  info->meta.ep_rank = static_cast<int>(ep_rank);
  auto experts = j.find("experts");
  if (experts == j.end()) return absl::OkStatus();
  if (!experts->is_array()) return Corrupt(path, "\"experts\" is not an array");
  for (const Json& e : *experts) {
    if (!e.is_number_unsigned() || e.get<uint64_t>() > (1u << 30)) {
      return Corrupt(path, "\"experts\" holds something other than expert indices");
    }
    info->meta.experts.push_back(static_cast<int>(e.get<uint64_t>()));
  }
  return absl::OkStatus();
}

// The format, version and parallel layout fields of a parsed metadata.json into *info.
absl::Status ParseHeader(const std::string& path, const Json& j, ShardInfo* info) {
  auto format = j.find("format");
  if (format == j.end() || *format != kFormat) {
    return Corrupt(path,
                   absl::StrCat("not checkpoint metadata (\"format\" is not \"", kFormat, "\")"));
  }
  int64_t version = 0;
  if (!GetCount(j, "version", &version) || version != kVersion) {
    return Corrupt(path, absl::StrCat("unsupported metadata version (this build reads version ",
                                      kVersion, ")"));
  }
  int64_t tp_size = 0, tp_rank = 0, dp_size = 0;
  if (!GetCount(j, "iteration", &info->meta.iteration) ||
      !GetCount(j, "consumed_samples", &info->meta.consumed_samples) ||
      !GetCount(j, "tensor_model_parallel_size", &tp_size) ||
      !GetCount(j, "tensor_model_parallel_rank", &tp_rank) ||
      !GetCount(j, "data_parallel_size", &dp_size) ||
      !GetCount(j, "tensors_file_bytes", &info->tensors_file_bytes)) {
    return Corrupt(path,
                   "missing or non-integer iteration, consumed_samples, parallel sizes or "
                   "tensors_file_bytes");
  }
  if (tp_size < 1 || tp_size > (1 << 20) || tp_rank >= tp_size || dp_size < 1 ||
      dp_size > (1 << 30)) {
    return Corrupt(path,
                   absl::StrCat("invalid parallel layout: tensor_model_parallel_rank ", tp_rank,
                                " of size ", tp_size, ", data_parallel_size ", dp_size));
  }
  info->meta.tp_size = static_cast<int>(tp_size);
  info->meta.tp_rank = static_cast<int>(tp_rank);
  info->meta.dp_size = static_cast<int>(dp_size);
  // Absent in checkpoints written before pipeline parallelism: one stage.
  int64_t pp_size = 1, pp_rank = 0;
  const bool has_pp_size = j.contains("pipeline_model_parallel_size");
  const bool has_pp_rank = j.contains("pipeline_model_parallel_rank");
  if (has_pp_size != has_pp_rank ||
      (has_pp_size && (!GetCount(j, "pipeline_model_parallel_size", &pp_size) ||
                       !GetCount(j, "pipeline_model_parallel_rank", &pp_rank)))) {
    return Corrupt(path,
                   "pipeline_model_parallel_size and _rank must both be non-negative integers");
  }
  if (pp_size < 1 || pp_size > (1 << 20) || pp_rank >= pp_size) {
    return Corrupt(path, absl::StrCat("invalid pipeline layout: pipeline_model_parallel_rank ",
                                      pp_rank, " of size ", pp_size));
  }
  info->meta.pp_size = static_cast<int>(pp_size);
  info->meta.pp_rank = static_cast<int>(pp_rank);
  return ParseExpertLayout(path, j, info);
}

// One entry of the "tensors" list, checked against the shard's tp_size.
absl::StatusOr<StoredTensor> ParseTensor(const std::string& path, const Json& t, int tp_size) {
  auto name = t.is_object() ? t.find("name") : t.end();
  auto shape = t.is_object() ? t.find("global_shape") : t.end();
  auto split = t.is_object() ? t.find("split_dim") : t.end();
  auto padded = t.is_object() ? t.find("vocab_padded") : t.end();
  if (!t.is_object() || name == t.end() || !name->is_string() || shape == t.end() ||
      !shape->is_array() || split == t.end() || !split->is_number_integer() || padded == t.end() ||
      !padded->is_boolean()) {
    return Corrupt(path, "a \"tensors\" entry lacks name, global_shape, split_dim or vocab_padded");
  }
  StoredTensor s;
  s.name = name->get<std::string>();
  for (const Json& d : *shape) {
    if (!d.is_number_unsigned() ||
        d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Corrupt(path, absl::StrCat("tensor '", s.name, "': bad global_shape"));
    }
    s.global_shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  const int64_t sd = split->get<int64_t>();
  if (sd < -1 || sd >= static_cast<int64_t>(s.global_shape.size()) ||
      (sd >= 0 && s.global_shape[sd] % tp_size != 0)) {
    return Corrupt(path, absl::StrCat("tensor '", s.name, "': split_dim ", sd, " does not fit ",
                                      ShapeToString(s.global_shape), " over ", tp_size, " ranks"));
  }
  s.split_dim = static_cast<int>(sd);
  s.vocab_padded = padded->get<bool>();
  auto sha256 = t.find("sha256");  // Absent in checkpoints written before digests.
  if (sha256 != t.end()) {
    if (!sha256->is_string() || !IsSha256Hex(sha256->get<std::string>())) {
      return Corrupt(
          path, absl::StrCat("tensor '", s.name, "': \"sha256\" is not 64 lowercase hex digits"));
    }
    s.sha256 = sha256->get<std::string>();
  }
  auto crc32c = t.find("crc32c");  // Absent in checkpoints written before CRC32Cs.
  if (crc32c != t.end()) {
    const std::optional<uint32_t> value =
        crc32c->is_string() ? ParseCrc32cHex(crc32c->get<std::string>()) : std::nullopt;
    if (!value.has_value()) {
      return Corrupt(
          path, absl::StrCat("tensor '", s.name, "': \"crc32c\" is not 8 lowercase hex digits"));
    }
    s.crc32c = *value;
  }
  return s;
}

}  // namespace

std::string Dump(const Json& j, int indent) {
  // All strings put into these documents are checked UTF-8; `replace` only rules out throwing.
  return j.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

Json ParseObject(absl::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Json(Json::value_t::discarded);
  return j;
}

Json MetadataJson(const CheckpointMetadata& meta, const Json& model_config,
                  const std::vector<TensorRecord>& tensors,
                  const std::vector<TensorDigests>& digests, int64_t tensors_file_bytes) {
  Json list = Json::array();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorRecord& t = tensors[i];
    list.push_back(
        {{"name", t.name},
         {"global_shape", Json(std::vector<int64_t>(t.global_shape.begin(), t.global_shape.end()))},
         {"split_dim", t.split_dim},
         {"vocab_padded", t.vocab_padded},
         {"sha256", digests[i].sha256},
         {"crc32c", Crc32cHex(digests[i].crc32c)}});
  }
  return {{"format", kFormat},
          {"version", kVersion},
          {"iteration", meta.iteration},
          {"consumed_samples", meta.consumed_samples},
          {"tensor_model_parallel_size", meta.tp_size},
          {"tensor_model_parallel_rank", meta.tp_rank},
          {"data_parallel_size", meta.dp_size},
          {"pipeline_model_parallel_size", meta.pp_size},
          {"pipeline_model_parallel_rank", meta.pp_rank},
          {"expert_model_parallel_size", meta.ep_size},
          {"expert_model_parallel_rank", meta.ep_rank},
          {"experts", meta.experts},
          {"model_config", model_config},
          {"trainer_state", meta.trainer_state_json},
          {"model_name", meta.model_name},
          {"tensors_file", kShardTensorsFile},
          {"tensors_file_bytes", tensors_file_bytes},
          {"tensors", std::move(list)}};
}

absl::StatusOr<ShardInfo> ParseMetadata(const std::string& path, const std::string& text) {
  const Json j = ParseObject(text);
  if (j.is_discarded()) return Corrupt(path, "not a JSON object (corrupt checkpoint metadata)");
  ShardInfo info;
  RETURN_IF_ERROR(ParseHeader(path, j, &info));
  auto config = j.find("model_config");
  if (config == j.end() || !config->is_object()) {
    return Corrupt(path, "\"model_config\" is not an object");
  }
  info.model_config = *config;
  info.meta.model_config_json = Dump(*config);
  auto state = j.find("trainer_state");
  if (state == j.end() || !state->is_string()) {
    return Corrupt(path, "\"trainer_state\" is not a string");
  }
  info.meta.trainer_state_json = state->get<std::string>();
  auto model_name = j.find("model_name");  // Absent in checkpoints written before it existed.
  if (model_name != j.end()) {
    if (!model_name->is_string()) return Corrupt(path, "\"model_name\" is not a string");
    info.meta.model_name = model_name->get<std::string>();
  }
  auto file = j.find("tensors_file");
  if (file == j.end() || *file != kShardTensorsFile) {
    return Corrupt(path, absl::StrCat("\"tensors_file\" is not \"", kShardTensorsFile, "\""));
  }
  auto list = j.find("tensors");
  if (list == j.end() || !list->is_array()) return Corrupt(path, "\"tensors\" is not an array");
  std::set<std::string> names;
  for (const Json& t : *list) {
    ASSIGN_OR_RETURN(StoredTensor s, ParseTensor(path, t, info.meta.tp_size));
    if (!names.insert(s.name).second) {
      return Corrupt(path, absl::StrCat("tensor '", s.name, "' is listed twice"));
    }
    info.tensors.push_back(std::move(s));
  }
  return info;
}

namespace {

// Reads the metadata of the shard in directory `name` of the iteration and checks that it
// describes that iteration, rank, stage and EP rank and is named for its layout.
absl::StatusOr<ShardInfo> ReadNamedShard(FileSystem& fs, const std::string& dir, int64_t iteration,
                                         const std::string& name, int tp_rank, int pp_rank,
                                         int ep_rank) {
  const std::string shard_dir = JoinPath(IterationDir(dir, iteration), name);
  const std::string path = JoinPath(shard_dir, kShardMetadataFile);
  auto text = fs.ReadFile(path);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(absl::StrCat("no checkpoint shard ", shard_dir));
    }
    return text.status();
  }
  ASSIGN_OR_RETURN(ShardInfo info, ParseMetadata(path, *text));
  const CheckpointMetadata& m = info.meta;
  if (m.iteration != iteration || m.tp_rank != tp_rank || m.pp_rank != pp_rank ||
      m.ep_rank != ep_rank ||
      ShardName(m.tp_rank, m.pp_rank, m.pp_size, m.ep_rank, m.ep_size) != name) {
    return absl::DataLossError(absl::StrCat(
        path, ": describes iteration ", m.iteration, " rank ", m.tp_rank, " of pipeline stage ",
        m.pp_rank, " of ", m.pp_size, " and expert-parallel rank ", m.ep_rank, " of ", m.ep_size,
        ", expected iteration ", iteration, " rank ", tp_rank, " of pipeline stage ", pp_rank,
        " and expert-parallel rank ", ep_rank, " (the shard ", name, ")"));
  }
  info.shard_dir = shard_dir;
  return info;
}

}  // namespace

absl::StatusOr<ShardInfo> ReadShardInfo(FileSystem& fs, const std::string& dir, int64_t iteration,
                                        int tp_rank, int pp_rank, int pp_size, int ep_rank,
                                        int ep_size) {
  if (pp_size == 0) {
    // The layout from the first shard: one stage's shards are named mp_rank_TT, several stages'
    // mp_rank_TT_PPP, and expert-parallel shards end in _EEE.
    const std::string iter_dir = IterationDir(dir, iteration);
    const std::string candidates[] = {ShardName(0), ShardName(0, 0, 0), ShardName(0, 0, 0, 0, 2)};
    const std::string* found = nullptr;
    for (const std::string& name : candidates) {
      if (fs.PathExists(JoinPath(iter_dir, name))) {
        found = &name;
        break;
      }
    }
    if (found == nullptr) {
      return absl::NotFoundError(absl::StrCat("no checkpoint shard ",
                                              JoinPath(iter_dir, candidates[0]), " (nor ",
                                              candidates[1], " or ", candidates[2], ")"));
    }
    ASSIGN_OR_RETURN(ShardInfo first, ReadNamedShard(fs, dir, iteration, *found, 0, 0, 0));
    if (tp_rank == 0 && pp_rank == 0 && ep_rank == 0) return first;
    pp_size = first.meta.pp_size;
    ep_size = first.meta.ep_size;
    if (pp_rank >= pp_size || ep_rank >= ep_size) {
      return absl::NotFoundError(absl::StrCat(
          "no checkpoint shard of pipeline stage ", pp_rank, " and expert-parallel rank ", ep_rank,
          " in ", iter_dir, " (it has ", pp_size, " and ", ep_size, ")"));
    }
  }
  return ReadNamedShard(fs, dir, iteration, ShardName(tp_rank, pp_rank, pp_size, ep_rank, ep_size),
                        tp_rank, pp_rank, ep_rank);
}

std::string ConfigDifferences(const Json& checkpoint, const Json& run) {
  std::set<std::string> keys;
  for (const auto& item : checkpoint.items()) keys.insert(item.key());
  for (const auto& item : run.items()) keys.insert(item.key());
  std::vector<std::string> diffs;
  for (const std::string& key : keys) {
    auto a = checkpoint.find(key);
    auto b = run.find(key);
    const bool has_a = a != checkpoint.end(), has_b = b != run.end();
    if (has_a && has_b && *a == *b) continue;
    diffs.push_back(absl::StrCat(key, " (checkpoint: ", has_a ? Dump(*a) : "absent",
                                 ", this run: ", has_b ? Dump(*b) : "absent", ")"));
  }
  return absl::StrJoin(diffs, "; ");
}

absl::Status CheckSameConfig(absl::string_view where, const Json& checkpoint, const Json& run) {
  if (checkpoint == run) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      where, ": model config differs from this run's: ", ConfigDifferences(checkpoint, run)));
}

std::string DescribeTensor(const Shape& global_shape, int split_dim, bool vocab_padded) {
  return absl::StrCat(
      "global shape ", ShapeToString(global_shape),
      split_dim < 0 ? std::string(" replicated") : absl::StrCat(" split on dim ", split_dim),
      vocab_padded ? " (vocab-padded)" : "");
}

}  // namespace internal

absl::StatusOr<CheckpointMetadata> ReadShardMetadata(const std::string& load_dir, int64_t iteration,
                                                     int tp_rank, int pp_rank, FileSystem& fs) {
  ASSIGN_OR_RETURN(internal::ShardInfo info,
                   internal::ReadShardInfo(fs, load_dir, iteration, tp_rank, pp_rank));
  return info.meta;
}

}  // namespace checkpoint
}  // namespace mt
