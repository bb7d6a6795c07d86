#include "train/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "nlohmann/json.hpp"
#include "train/file_io.h"
#include "train/safetensors.h"

namespace mt {
namespace train {

namespace {

using Json = nlohmann::json;

constexpr char kFormat[] = "megatron-cpp checkpoint shard";
constexpr int kVersion = 1;
constexpr char kIterPrefix[] = "iter_";
constexpr char kDeletingPrefix[] = ".deleting.";

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string ShardName(int tp_rank) { return absl::StrFormat("mp_rank_%02d", tp_rank); }

std::string Dump(const Json& j, int indent = -1) {
  // All strings put into these documents are checked UTF-8; `replace` only rules out throwing.
  return j.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

// Parses text that must be a JSON object; nullopt-like discarded value otherwise.
Json ParseObject(absl::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Json(Json::value_t::discarded);
  return j;
}

// Shape of rank's slice of `global` (split_dim -1: the whole tensor). Assumes divisibility.
Shape LocalShape(const Shape& global, int split_dim, int tp_size) {
  Shape local = global;
  if (split_dim >= 0) local[split_dim] /= tp_size;
  return local;
}

// The checks shared by SaveShard and LoadShard on a caller's record.
absl::Status ValidateRecord(absl::string_view op, const TensorRecord& t, int tp_size) {
  const std::string where = absl::StrCat(op, ": tensor '", t.name, "'");
  const int rank = static_cast<int>(t.global_shape.size());
  if (t.name.empty() || !internal::IsValidUtf8(t.name)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": name must be non-empty UTF-8"));
  }
  if (t.split_dim < -1 || t.split_dim >= rank) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": split_dim ", t.split_dim,
                                                   " is out of range for global shape ",
                                                   ShapeToString(t.global_shape)));
  }
  for (int64_t d : t.global_shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": negative global shape ", ShapeToString(t.global_shape)));
    }
  }
  if (t.vocab_padded && t.split_dim != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": vocab_padded tensors must be split on dimension 0, not ", t.split_dim));
  }
  if (t.split_dim >= 0 && t.global_shape[t.split_dim] % tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": global dimension ", t.split_dim, " of ", ShapeToString(t.global_shape),
        " is not divisible by tensor_model_parallel_size ", tp_size));
  }
  const Shape expected = LocalShape(t.global_shape, t.split_dim, tp_size);
  if (t.local.shape != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": local view ", t.local.DebugString(), " is not one of ", tp_size,
                     " slices of global shape ", ShapeToString(t.global_shape), " split on dim ",
                     t.split_dim, " (expected ", ShapeToString(expected), ")"));
  }
  if (!t.local.device.is_cpu() || !t.local.IsContiguous() ||
      (t.local.data == nullptr && t.local.numel() > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": local view ", t.local.DebugString(),
                                                   " must be contiguous host memory"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// metadata.json

struct StoredTensor {
  std::string name;
  Shape global_shape;
  int split_dim = -1;
  bool vocab_padded = false;
};

struct ShardInfo {
  CheckpointMetadata meta;
  Json model_config;
  std::vector<StoredTensor> tensors;
  int64_t tensors_file_bytes = 0;
  std::string shard_dir;
};

Json MetadataJson(const CheckpointMetadata& meta, const Json& model_config,
                  const std::vector<TensorRecord>& tensors, int64_t tensors_file_bytes) {
  Json list = Json::array();
  for (const TensorRecord& t : tensors) {
    list.push_back(
        {{"name", t.name},
         {"global_shape", Json(std::vector<int64_t>(t.global_shape.begin(), t.global_shape.end()))},
         {"split_dim", t.split_dim},
         {"vocab_padded", t.vocab_padded}});
  }
  return {{"format", kFormat},
          {"version", kVersion},
          {"iteration", meta.iteration},
          {"consumed_samples", meta.consumed_samples},
          {"tensor_model_parallel_size", meta.tp_size},
          {"tensor_model_parallel_rank", meta.tp_rank},
          {"data_parallel_size", meta.dp_size},
          {"model_config", model_config},
          {"trainer_state", meta.trainer_state_json},
          {"tensors_file", kShardTensorsFile},
          {"tensors_file_bytes", tensors_file_bytes},
          {"tensors", std::move(list)}};
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

absl::StatusOr<ShardInfo> ParseMetadata(const std::string& path, const std::string& text) {
  auto bad = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };
  const Json j = ParseObject(text);
  if (j.is_discarded()) return bad("not a JSON object (corrupt checkpoint metadata)");
  auto format = j.find("format");
  if (format == j.end() || *format != kFormat) {
    return bad(absl::StrCat("not checkpoint metadata (\"format\" is not \"", kFormat, "\")"));
  }
  int64_t version = 0;
  if (!GetCount(j, "version", &version) || version != kVersion) {
    return bad(
        absl::StrCat("unsupported metadata version (this build reads version ", kVersion, ")"));
  }
  ShardInfo info;
  int64_t tp_size = 0, tp_rank = 0, dp_size = 0;
  if (!GetCount(j, "iteration", &info.meta.iteration) ||
      !GetCount(j, "consumed_samples", &info.meta.consumed_samples) ||
      !GetCount(j, "tensor_model_parallel_size", &tp_size) ||
      !GetCount(j, "tensor_model_parallel_rank", &tp_rank) ||
      !GetCount(j, "data_parallel_size", &dp_size) ||
      !GetCount(j, "tensors_file_bytes", &info.tensors_file_bytes)) {
    return bad(
        "missing or non-integer iteration, consumed_samples, parallel sizes or "
        "tensors_file_bytes");
  }
  if (tp_size < 1 || tp_size > (1 << 20) || tp_rank >= tp_size || dp_size < 1 ||
      dp_size > (1 << 30)) {
    return bad(absl::StrCat("invalid parallel layout: tensor_model_parallel_rank ", tp_rank,
                            " of size ", tp_size, ", data_parallel_size ", dp_size));
  }
  info.meta.tp_size = static_cast<int>(tp_size);
  info.meta.tp_rank = static_cast<int>(tp_rank);
  info.meta.dp_size = static_cast<int>(dp_size);
  auto config = j.find("model_config");
  if (config == j.end() || !config->is_object()) return bad("\"model_config\" is not an object");
  info.model_config = *config;
  info.meta.model_config_json = Dump(*config);
  auto state = j.find("trainer_state");
  if (state == j.end() || !state->is_string()) return bad("\"trainer_state\" is not a string");
  info.meta.trainer_state_json = state->get<std::string>();
  auto file = j.find("tensors_file");
  if (file == j.end() || *file != kShardTensorsFile) {
    return bad(absl::StrCat("\"tensors_file\" is not \"", kShardTensorsFile, "\""));
  }
  auto list = j.find("tensors");
  if (list == j.end() || !list->is_array()) return bad("\"tensors\" is not an array");
  std::set<std::string> names;
  for (const Json& t : *list) {
    StoredTensor s;
    auto name = t.is_object() ? t.find("name") : t.end();
    auto shape = t.is_object() ? t.find("global_shape") : t.end();
    auto split = t.is_object() ? t.find("split_dim") : t.end();
    auto padded = t.is_object() ? t.find("vocab_padded") : t.end();
    if (!t.is_object() || name == t.end() || !name->is_string() || shape == t.end() ||
        !shape->is_array() || split == t.end() || !split->is_number_integer() ||
        padded == t.end() || !padded->is_boolean()) {
      return bad("a \"tensors\" entry lacks name, global_shape, split_dim or vocab_padded");
    }
    s.name = name->get<std::string>();
    for (const Json& d : *shape) {
      if (!d.is_number_unsigned() ||
          d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return bad(absl::StrCat("tensor '", s.name, "': bad global_shape"));
      }
      s.global_shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    const int64_t sd = split->get<int64_t>();
    if (sd < -1 || sd >= static_cast<int64_t>(s.global_shape.size()) ||
        (sd >= 0 && s.global_shape[sd] % tp_size != 0)) {
      return bad(absl::StrCat("tensor '", s.name, "': split_dim ", sd, " does not fit ",
                              ShapeToString(s.global_shape), " over ", tp_size, " ranks"));
    }
    s.split_dim = static_cast<int>(sd);
    s.vocab_padded = padded->get<bool>();
    if (!names.insert(s.name).second) {
      return bad(absl::StrCat("tensor '", s.name, "' is listed twice"));
    }
    info.tensors.push_back(std::move(s));
  }
  return info;
}

// Reads and parses shard tp_rank's metadata, checking that it describes that iteration and rank.
absl::StatusOr<ShardInfo> ReadShardInfo(const std::string& dir, int64_t iteration, int tp_rank) {
  const std::string shard_dir = ShardDir(dir, iteration, tp_rank);
  const std::string path = JoinPath(shard_dir, kShardMetadataFile);
  auto text = internal::ReadFile(path);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(absl::StrCat("no checkpoint shard ", shard_dir));
    }
    return text.status();
  }
  ASSIGN_OR_RETURN(ShardInfo info, ParseMetadata(path, *text));
  if (info.meta.iteration != iteration || info.meta.tp_rank != tp_rank) {
    return absl::DataLossError(absl::StrCat(path, ": describes iteration ", info.meta.iteration,
                                            " rank ", info.meta.tp_rank, ", expected iteration ",
                                            iteration, " rank ", tp_rank));
  }
  info.shard_dir = shard_dir;
  return info;
}

// Every shard of the iteration exists, has a tensors file of the recorded size, and agrees with
// shard 0 on tp_size and model config. FailedPrecondition for a missing or inconsistent shard.
absl::Status VerifyComplete(const std::string& dir, int64_t iteration, int tp_size) {
  const std::string where =
      absl::StrCat("checkpoint iteration ", iteration, " in ", dir, " is incomplete: ");
  Json config;
  for (int r = 0; r < tp_size; ++r) {
    auto info = ReadShardInfo(dir, iteration, r);
    if (!info.ok()) {
      if (absl::IsNotFound(info.status())) {
        return absl::FailedPreconditionError(
            absl::StrCat(where, "shard ", ShardName(r), " of ", tp_size,
                         " is missing (every TP rank must save its shard before the commit)"));
      }
      return info.status();
    }
    if (info->meta.tp_size != tp_size) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, "shard ", ShardName(r), " was saved with tensor_model_parallel_size ",
                       info->meta.tp_size, ", expected ", tp_size));
    }
    if (r == 0) {
      config = info->model_config;
    } else if (info->model_config != config) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, "shard ", ShardName(r), " has a different model config than ", ShardName(0)));
    }
    const std::string tensors = JoinPath(info->shard_dir, kShardTensorsFile);
    auto size = internal::FileSize(tensors);
    if (!size.ok()) {
      return absl::DataLossError(absl::StrCat(where, size.status().message()));
    }
    if (*size != info->tensors_file_bytes) {
      return absl::DataLossError(absl::StrCat(where, tensors, " has ", *size, " bytes, ",
                                              kShardMetadataFile, " records ",
                                              info->tensors_file_bytes));
    }
  }
  return absl::OkStatus();
}

// "iter_0000100" -> 100; false for anything else.
bool ParseIterationDirName(const std::string& name, int64_t* iteration) {
  if (!absl::StartsWith(name, kIterPrefix)) return false;
  const absl::string_view digits = absl::string_view(name).substr(std::strlen(kIterPrefix));
  if (digits.empty()) return false;
  for (char c : digits) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return absl::SimpleAtoi(digits, iteration);
}

// Removes a directory by first renaming it to a hidden name, so that a crash mid-way never leaves
// a partly deleted directory under an iter_* name.
absl::Status DeleteIterationDir(const std::string& dir, const std::string& name) {
  const std::string doomed = JoinPath(dir, kDeletingPrefix + name);
  RETURN_IF_ERROR(internal::RemoveAll(doomed));
  RETURN_IF_ERROR(internal::Rename(JoinPath(dir, name), doomed));
  return internal::RemoveAll(doomed);
}

// "a (checkpoint: 1, this run: 2); b (checkpoint: absent, this run: 3)".
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

std::string DescribeTensor(const Shape& global_shape, int split_dim, bool vocab_padded) {
  return absl::StrCat(
      "global shape ", ShapeToString(global_shape),
      split_dim < 0 ? std::string(" replicated") : absl::StrCat(" split on dim ", split_dim),
      vocab_padded ? " (vocab-padded)" : "");
}

// Copies slice `rank` of `tp` along `split_dim` between a contiguous global buffer and a
// contiguous local one (to_global: local -> global, else global -> local).
void CopySlice(const Shape& global_shape, int split_dim, int rank, int tp, size_t elem_bytes,
               char* global, char* local, bool to_global) {
  int64_t outer = 1;
  for (int d = 0; d < split_dim; ++d) outer *= global_shape[d];
  int64_t inner = static_cast<int64_t>(elem_bytes);
  for (size_t d = split_dim + 1; d < global_shape.size(); ++d) inner *= global_shape[d];
  const int64_t n = global_shape[split_dim];
  const int64_t rows = n / tp;
  const size_t chunk = static_cast<size_t>(rows * inner);
  for (int64_t o = 0; o < outer; ++o) {
    char* g = global + (o * n + rank * rows) * inner;
    char* l = local + o * rows * inner;
    if (chunk == 0) continue;
    if (to_global) {
      std::memcpy(g, l, chunk);
    } else {
      std::memcpy(l, g, chunk);
    }
  }
}

std::string Canonical(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  std::string out = ec ? path : p.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

// Writes and fsyncs the shard's two files and the directory holding them.
absl::Status WriteShardFiles(const std::string& dir, const CheckpointMetadata& meta,
                             const Json& config, const std::vector<TensorRecord>& tensors,
                             const std::vector<NamedTensor>& named) {
  const std::string tensors_path = JoinPath(dir, kShardTensorsFile);
  const SafetensorsMetadata st_meta = {
      {"format", "megatron-cpp"},
      {"iteration", absl::StrCat(meta.iteration)},
      {"tensor_model_parallel_rank", absl::StrCat(meta.tp_rank)},
      {"tensor_model_parallel_size", absl::StrCat(meta.tp_size)},
  };
  RETURN_IF_ERROR(WriteSafetensors(tensors_path, named, st_meta, Sync::kFsync));
  ASSIGN_OR_RETURN(const int64_t bytes, internal::FileSize(tensors_path));
  const std::string metadata = Dump(MetadataJson(meta, config, tensors, bytes), 1) + "\n";
  RETURN_IF_ERROR(internal::WriteFile(JoinPath(dir, kShardMetadataFile), metadata, Sync::kFsync));
  return internal::SyncDirectory(dir);
}

}  // namespace

std::string IterationDirName(int64_t iteration) { return absl::StrFormat("iter_%07d", iteration); }

std::string IterationDir(const std::string& dir, int64_t iteration) {
  return JoinPath(dir, IterationDirName(iteration));
}

std::string ShardDir(const std::string& dir, int64_t iteration, int tp_rank) {
  return JoinPath(IterationDir(dir, iteration), ShardName(tp_rank));
}

absl::Status SaveShard(const std::string& save_dir, const CheckpointMetadata& meta,
                       const std::vector<TensorRecord>& tensors) {
  constexpr char kOp[] = "SaveShard";
  if (meta.tp_size < 1 || meta.tp_rank < 0 || meta.tp_rank >= meta.tp_size || meta.dp_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": bad parallel layout: tp_rank ",
                                                   meta.tp_rank, " of tp_size ", meta.tp_size,
                                                   ", dp_size ", meta.dp_size));
  }
  if (meta.iteration < 0 || meta.consumed_samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": negative iteration ", meta.iteration,
                                                   " or consumed_samples ", meta.consumed_samples));
  }
  const Json config = ParseObject(meta.model_config_json);
  if (config.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": model_config_json is not a JSON object: ", meta.model_config_json));
  }
  if (!internal::IsValidUtf8(meta.trainer_state_json)) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": trainer_state_json is not UTF-8"));
  }
  std::vector<NamedTensor> named;
  named.reserve(tensors.size());
  std::set<std::string> names;
  for (const TensorRecord& t : tensors) {
    RETURN_IF_ERROR(ValidateRecord(kOp, t, meta.tp_size));
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": duplicate tensor name '", t.name, "'"));
    }
    named.push_back({t.name, t.local});
  }

  const std::string iter_dir = IterationDir(save_dir, meta.iteration);
  const std::string name = ShardName(meta.tp_rank);
  const std::string final_dir = JoinPath(iter_dir, name);
  const std::string temp_dir = JoinPath(iter_dir, "." + name + ".tmp");
  const std::string old_dir = JoinPath(iter_dir, "." + name + ".old");
  RETURN_IF_ERROR(internal::CreateDirectories(iter_dir));
  RETURN_IF_ERROR(internal::SyncDirectory(save_dir));
  // Leftovers of this rank's earlier, interrupted save. A lone ".old" is a shard that was being
  // replaced without an atomic exchange: put it back first, so the iteration stays loadable
  // should this save be interrupted too.
  if (internal::PathExists(old_dir) && !internal::PathExists(final_dir)) {
    RETURN_IF_ERROR(internal::Rename(old_dir, final_dir));
  }
  RETURN_IF_ERROR(internal::RemoveAll(temp_dir));
  RETURN_IF_ERROR(internal::RemoveAll(old_dir));
  RETURN_IF_ERROR(internal::CreateDirectories(temp_dir));
  absl::Status written = WriteShardFiles(temp_dir, meta, config, tensors, named);
  if (!written.ok()) {
    internal::RemoveAll(temp_dir).IgnoreError();  // Best effort; the next save retries.
    return written;
  }

  // Publish: the shard directory appears complete under its final name, or not at all.
  if (!internal::PathExists(final_dir)) {
    RETURN_IF_ERROR(internal::Rename(temp_dir, final_dir));
  } else {
    absl::Status swapped = internal::Exchange(temp_dir, final_dir);
    if (absl::IsUnimplemented(swapped)) {
      // No atomic exchange on this file system: a short window without the old shard.
      RETURN_IF_ERROR(internal::Rename(final_dir, old_dir));
      RETURN_IF_ERROR(internal::Rename(temp_dir, final_dir));
      RETURN_IF_ERROR(internal::RemoveAll(old_dir));
    } else {
      RETURN_IF_ERROR(swapped);
      RETURN_IF_ERROR(internal::RemoveAll(temp_dir));  // Now holds the replaced shard.
    }
  }
  return internal::SyncDirectory(iter_dir);
}

absl::Status CommitCheckpoint(const std::string& save_dir, int64_t iteration, int tp_size,
                              int keep_last) {
  if (iteration < 0 || tp_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CommitCheckpoint: bad iteration ", iteration, " or tp_size ", tp_size));
  }
  RETURN_IF_ERROR(VerifyComplete(save_dir, iteration, tp_size));

  const std::string pointer = JoinPath(save_dir, kLatestIterationFile);
  const std::string temp = JoinPath(save_dir, absl::StrCat(".", kLatestIterationFile, ".tmp"));
  RETURN_IF_ERROR(internal::WriteFile(temp, absl::StrCat(iteration, "\n"), Sync::kFsync));
  RETURN_IF_ERROR(internal::Rename(temp, pointer));
  RETURN_IF_ERROR(internal::SyncDirectory(save_dir));

  ASSIGN_OR_RETURN(const std::vector<std::string> entries, internal::ListDirectory(save_dir));
  std::vector<std::pair<int64_t, std::string>> older;
  bool removed = false;
  for (const std::string& name : entries) {
    int64_t it = 0;
    if (ParseIterationDirName(name, &it) && it < iteration) older.push_back({it, name});
    if (absl::StartsWith(name, kDeletingPrefix)) {  // An interrupted deletion.
      RETURN_IF_ERROR(internal::RemoveAll(JoinPath(save_dir, name)));
      removed = true;
    }
  }
  std::sort(older.rbegin(), older.rend());
  if (keep_last > 0) {
    for (size_t i = static_cast<size_t>(keep_last) - 1; i < older.size(); ++i) {
      RETURN_IF_ERROR(DeleteIterationDir(save_dir, older[i].second));
      removed = true;
    }
  }
  return removed ? internal::SyncDirectory(save_dir) : absl::OkStatus();
}

absl::StatusOr<int64_t> LatestIteration(const std::string& load_dir) {
  if (!internal::IsDirectory(load_dir)) {
    return absl::NotFoundError(absl::StrCat("checkpoint directory ", load_dir, " does not exist"));
  }
  const std::string pointer = JoinPath(load_dir, kLatestIterationFile);
  auto text = internal::ReadFile(pointer);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(
          absl::StrCat("no checkpoint in ", load_dir, " (", kLatestIterationFile, " not found)"));
    }
    return text.status();
  }
  const absl::string_view digits = absl::StripAsciiWhitespace(*text);
  int64_t iteration = -1;
  bool ok = !digits.empty() && digits.size() <= 18;
  for (char c : digits) ok = ok && absl::ascii_isdigit(c);
  if (!ok || !absl::SimpleAtoi(digits, &iteration)) {
    return absl::DataLossError(absl::StrCat(pointer, ": expected an iteration number, found '",
                                            absl::CEscape(text->substr(0, 40)), "'"));
  }
  auto fail = [&](const absl::Status& why) {
    return absl::DataLossError(absl::StrCat(pointer, " names iteration ", iteration,
                                            " but that checkpoint is unusable: ", why.message()));
  };
  auto first = ReadShardInfo(load_dir, iteration, 0);
  if (!first.ok()) return fail(first.status());
  absl::Status complete = VerifyComplete(load_dir, iteration, first->meta.tp_size);
  if (!complete.ok()) return fail(complete);
  return iteration;
}

absl::StatusOr<CheckpointMetadata> ReadShardMetadata(const std::string& load_dir, int64_t iteration,
                                                     int tp_rank) {
  ASSIGN_OR_RETURN(ShardInfo info, ReadShardInfo(load_dir, iteration, tp_rank));
  return info.meta;
}

absl::Status LoadShard(const std::string& load_dir, int64_t iteration, int tp_rank, int tp_size,
                       const std::string& expected_model_config_json,
                       const std::vector<TensorRecord>& into, CheckpointMetadata* meta) {
  constexpr char kOp[] = "LoadShard";
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": bad tp_rank ", tp_rank, " of tp_size ", tp_size));
  }
  const Json expected_config = ParseObject(expected_model_config_json);
  if (expected_config.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": expected model config is not a JSON object: ", expected_model_config_json));
  }
  std::map<std::string, const TensorRecord*> wanted;
  for (const TensorRecord& t : into) {
    RETURN_IF_ERROR(ValidateRecord(kOp, t, tp_size));
    if (!wanted.emplace(t.name, &t).second) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": tensor '", t.name, "' listed twice"));
    }
  }

  const std::string where = absl::StrCat("checkpoint ", load_dir, " iteration ", iteration);
  auto info_or = ReadShardInfo(load_dir, iteration, tp_rank);
  if (!info_or.ok() && absl::IsNotFound(info_or.status()) && tp_rank != 0) {
    // A higher rank than the checkpoint has: report the degree mismatch if that is what it is.
    auto first = ReadShardInfo(load_dir, iteration, 0);
    if (first.ok()) info_or = std::move(first);
  }
  if (!info_or.ok()) return info_or.status();
  const ShardInfo& info = *info_or;
  if (info.meta.tp_size != tp_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, " was saved with tensor_model_parallel_size ", info.meta.tp_size,
        " but this run uses ", tp_size,
        "; convert it first: bazel run //train:reshard_checkpoint -- --load=", load_dir,
        " --save=<new dir> --tensor_model_parallel_size=", tp_size, " --iteration=", iteration));
  }
  if (info.model_config != expected_config) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": model config differs from this run's: ",
                     ConfigDifferences(info.model_config, expected_config)));
  }

  // Does the checkpoint fit `into`? All of this is checked before anything is overwritten.
  std::vector<std::string> extra;
  std::set<std::string> stored_names;
  ASSIGN_OR_RETURN(SafetensorsReader reader,
                   SafetensorsReader::Open(JoinPath(info.shard_dir, kShardTensorsFile)));
  for (const StoredTensor& s : info.tensors) {
    stored_names.insert(s.name);
    auto it = wanted.find(s.name);
    if (it == wanted.end()) {
      extra.push_back(s.name);
      continue;
    }
    const TensorRecord& t = *it->second;
    if (t.global_shape != s.global_shape || t.split_dim != s.split_dim ||
        t.vocab_padded != s.vocab_padded) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": tensor '", s.name, "' has ",
          DescribeTensor(s.global_shape, s.split_dim, s.vocab_padded), " in the checkpoint, ",
          DescribeTensor(t.global_shape, t.split_dim, t.vocab_padded), " in this model"));
    }
    const SafetensorsEntry* e = reader.Find(s.name);
    if (e == nullptr) {
      return absl::DataLossError(absl::StrCat(reader.path(), ": tensor '", s.name,
                                              "' is listed in ", kShardMetadataFile,
                                              " but missing"));
    }
    if (e->shape != LocalShape(s.global_shape, s.split_dim, tp_size)) {
      return absl::DataLossError(absl::StrCat(reader.path(), ": tensor '", s.name, "' has shape ",
                                              ShapeToString(e->shape), ", not the rank's slice ",
                                              "of ", ShapeToString(s.global_shape)));
    }
    if (e->dtype != t.local.dtype) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": tensor '", s.name, "' is ", DTypeName(e->dtype),
                       " in the checkpoint, ", DTypeName(t.local.dtype), " in this model"));
    }
  }
  std::vector<std::string> missing;
  for (const auto& [name, record] : wanted) {
    if (stored_names.count(name) == 0) missing.push_back(name);
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, " lacks ", missing.size(), " tensor(s) of this model: ",
        absl::StrJoin(missing.begin(), missing.begin() + std::min<size_t>(missing.size(), 8), ", "),
        missing.size() > 8 ? ", ..." : ""));
  }
  if (!extra.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, " holds ", extra.size(), " tensor(s) this model does not have: ",
        absl::StrJoin(extra.begin(), extra.begin() + std::min<size_t>(extra.size(), 8), ", "),
        extra.size() > 8 ? ", ..." : ""));
  }
  if (reader.entries().size() != info.tensors.size()) {
    return absl::DataLossError(absl::StrCat(reader.path(), " holds ", reader.entries().size(),
                                            " tensors, ", kShardMetadataFile, " lists ",
                                            info.tensors.size()));
  }

  for (const TensorRecord& t : into) RETURN_IF_ERROR(reader.Read(t.name, t.local));
  if (meta != nullptr) *meta = info.meta;
  return absl::OkStatus();
}

absl::Status ReshardCheckpoint(const std::string& src_dir, int64_t iteration,
                               const std::string& dst_dir, int new_tp_size, int64_t real_vocab,
                               int64_t new_padded_vocab) {
  constexpr char kOp[] = "ReshardCheckpoint";
  if (new_tp_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": tensor_model_parallel_size must be >= 1, got ", new_tp_size));
  }
  if (real_vocab < 1 || new_padded_vocab < real_vocab || new_padded_vocab % new_tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": padded vocabulary ", new_padded_vocab, " must hold the real vocabulary ",
        real_vocab, " and be divisible by tensor_model_parallel_size ", new_tp_size));
  }
  if (Canonical(src_dir) == Canonical(dst_dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": the destination must differ from the source ", src_dir));
  }
  ASSIGN_OR_RETURN(ShardInfo first, ReadShardInfo(src_dir, iteration, 0));
  const int old_tp = first.meta.tp_size;
  RETURN_IF_ERROR(VerifyComplete(src_dir, iteration, old_tp));
  if (internal::PathExists(IterationDir(dst_dir, iteration))) {
    return absl::AlreadyExistsError(absl::StrCat(kOp, ": ", IterationDir(dst_dir, iteration),
                                                 " already exists; choose another destination "
                                                 "or delete it"));
  }

  std::vector<SafetensorsReader> readers;
  for (int r = 0; r < old_tp; ++r) {
    ASSIGN_OR_RETURN(ShardInfo info, ReadShardInfo(src_dir, iteration, r));
    ASSIGN_OR_RETURN(SafetensorsReader reader,
                     SafetensorsReader::Open(JoinPath(info.shard_dir, kShardTensorsFile)));
    if (info.tensors.size() != first.tensors.size()) {
      return absl::DataLossError(absl::StrCat(info.shard_dir, " lists ", info.tensors.size(),
                                              " tensors, ", ShardName(0), " lists ",
                                              first.tensors.size()));
    }
    for (size_t i = 0; i < first.tensors.size(); ++i) {
      const StoredTensor& a = first.tensors[i];
      const StoredTensor& b = info.tensors[i];
      if (a.name != b.name || a.global_shape != b.global_shape || a.split_dim != b.split_dim ||
          a.vocab_padded != b.vocab_padded) {
        return absl::DataLossError(absl::StrCat(info.shard_dir, ": tensor ", i, " ('", b.name,
                                                "') does not match ", ShardName(0), "'s ('", a.name,
                                                "')"));
      }
      const SafetensorsEntry* e = reader.Find(a.name);
      if (e == nullptr || e->shape != LocalShape(a.global_shape, a.split_dim, old_tp)) {
        return absl::DataLossError(absl::StrCat(reader.path(), ": tensor '", a.name,
                                                "' is missing or not the rank's slice"));
      }
    }
    readers.push_back(std::move(reader));
  }

  // Target layout of each tensor; all checks before any work.
  std::vector<Shape> new_shapes;
  for (const StoredTensor& s : first.tensors) {
    Shape shape = s.global_shape;
    if (s.vocab_padded) {
      if (real_vocab > s.global_shape[0]) {
        return absl::InvalidArgumentError(
            absl::StrCat(kOp, ": real vocabulary ", real_vocab, " exceeds the ", s.global_shape[0],
                         " rows of vocab-padded tensor '", s.name, "'"));
      }
      shape[0] = new_padded_vocab;
    }
    if (s.split_dim >= 0 && shape[s.split_dim] % new_tp_size != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": tensor '", s.name, "' of global shape ", ShapeToString(shape),
                       " cannot be split on dim ", s.split_dim, " over tensor_model_parallel_size ",
                       new_tp_size));
    }
    new_shapes.push_back(std::move(shape));
  }

  // Reassemble every global tensor in its new shape.
  std::vector<Tensor> globals;
  for (size_t i = 0; i < first.tensors.size(); ++i) {
    const StoredTensor& s = first.tensors[i];
    const DType dtype = readers[0].Find(s.name)->dtype;
    const size_t es = DTypeSize(dtype);
    ASSIGN_OR_RETURN(Tensor old_global, Tensor::Empty(s.global_shape, dtype));
    if (s.split_dim < 0) {
      RETURN_IF_ERROR(readers[0].Read(s.name, old_global.view()));
    } else {
      for (int r = 0; r < old_tp; ++r) {
        if (readers[r].Find(s.name)->dtype != dtype) {
          return absl::DataLossError(absl::StrCat(readers[r].path(), ": tensor '", s.name,
                                                  "' has another dtype than in ", ShardName(0)));
        }
        ASSIGN_OR_RETURN(Tensor local, readers[r].ReadTensor(s.name));
        CopySlice(s.global_shape, s.split_dim, r, old_tp, es, static_cast<char*>(old_global.data()),
                  static_cast<char*>(local.data()),
                  /*to_global=*/true);
      }
    }
    if (!s.vocab_padded || new_shapes[i] == s.global_shape) {
      if (s.vocab_padded) {  // Same padded size: still clear the padding rows.
        const size_t row = old_global.nbytes() / std::max<int64_t>(s.global_shape[0], 1);
        std::memset(static_cast<char*>(old_global.data()) + real_vocab * row, 0,
                    (s.global_shape[0] - real_vocab) * row);
      }
      globals.push_back(std::move(old_global));
      continue;
    }
    ASSIGN_OR_RETURN(Tensor new_global, Tensor::Empty(new_shapes[i], dtype));
    const size_t row =
        static_cast<size_t>(NumElements(absl::Span<const int64_t>(s.global_shape).subspan(1))) * es;
    std::memset(new_global.data(), 0, new_global.nbytes());
    std::memcpy(new_global.data(), old_global.data(), real_vocab * row);
    globals.push_back(std::move(new_global));
  }

  // Split for the new degree and write each shard.
  for (int r = 0; r < new_tp_size; ++r) {
    std::vector<Tensor> owned;
    std::vector<TensorRecord> records;
    for (size_t i = 0; i < first.tensors.size(); ++i) {
      const StoredTensor& s = first.tensors[i];
      const TensorView& g = globals[i].view();
      TensorRecord rec{s.name, new_shapes[i], s.split_dim, s.vocab_padded, g};
      if (s.split_dim == 0) {
        const int64_t rows = new_shapes[i][0] / new_tp_size;
        rec.local = g.Slice(r * rows, (r + 1) * rows);
      } else if (s.split_dim > 0) {
        ASSIGN_OR_RETURN(
            Tensor local,
            Tensor::Empty(LocalShape(new_shapes[i], s.split_dim, new_tp_size), g.dtype));
        CopySlice(new_shapes[i], s.split_dim, r, new_tp_size, DTypeSize(g.dtype),
                  static_cast<char*>(g.data), static_cast<char*>(local.data()),
                  /*to_global=*/false);
        rec.local = local.view();
        owned.push_back(std::move(local));
      }
      records.push_back(std::move(rec));
    }
    CheckpointMetadata meta = first.meta;
    meta.tp_size = new_tp_size;
    meta.tp_rank = r;
    RETURN_IF_ERROR(SaveShard(dst_dir, meta, records));
  }
  return CommitCheckpoint(dst_dir, iteration, new_tp_size, /*keep_last=*/0);
}

}  // namespace train
}  // namespace mt
