// The save / commit / latest-iteration protocol of checkpoint.h: the directory layout, atomic
// shard writes with fsyncs, the pointer file and the pruning of old iterations.
#include "checkpoint/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint_internal.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/utf8.h"
#include "core/alloc.h"
#include "core/file_system.h"
#include "core/status.h"

namespace mt {
namespace checkpoint {

namespace internal {

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string ShardName(int tp_rank, int pp_rank, int pp_size, int ep_rank, int ep_size) {
  std::string name = pp_size == 1 ? absl::StrFormat("mp_rank_%02d", tp_rank)
                                  : absl::StrFormat("mp_rank_%02d_%03d", tp_rank, pp_rank);
  if (ep_size > 1) absl::StrAppendFormat(&name, "_%03d", ep_rank);
  return name;
}

Shape LocalShape(const Shape& global, int split_dim, int tp_size) {
  Shape local = global;
  if (split_dim >= 0) local[split_dim] /= tp_size;
  return local;
}

absl::Status ValidateRecord(absl::string_view op, const TensorRecord& t, int tp_size) {
  const std::string where = absl::StrCat(op, ": tensor '", t.name, "'");
  const int rank = static_cast<int>(t.global_shape.size());
  if (t.name.empty() || !IsValidUtf8(t.name)) {
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
  if (!InHostMemory(t.local) || !t.local.IsContiguous() ||
      (t.local.data == nullptr && t.local.numel() > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": local view ", t.local.DebugString(),
                                                   " must be contiguous host memory"));
  }
  return absl::OkStatus();
}

namespace {

// VerifyComplete for one shard (`config`: shard 0's, set when reading shard 0).
absl::Status VerifyShard(FileSystem& fs, const std::string& dir, int64_t iteration, int tp_rank,
                         int tp_size, int pp_rank, int pp_size, int ep_rank, int ep_size,
                         Json* config) {
  const std::string where =
      absl::StrCat("checkpoint iteration ", iteration, " in ", dir, " is incomplete: ");
  const std::string name = ShardName(tp_rank, pp_rank, pp_size, ep_rank, ep_size);
  auto info = ReadShardInfo(fs, dir, iteration, tp_rank, pp_rank, pp_size, ep_rank, ep_size);
  if (!info.ok()) {
    if (absl::IsNotFound(info.status())) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, "shard ", name, " of ", tp_size * pp_size * ep_size,
                       " is missing (every TP rank of every pipeline stage",
                       ep_size > 1 ? " and expert-parallel rank" : "",
                       " must save its shard before the commit)"));
    }
    return info.status();
  }
  if (info->meta.tp_size != tp_size || info->meta.pp_size != pp_size ||
      info->meta.ep_size != ep_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, "shard ", name, " was saved with tensor_model_parallel_size ", info->meta.tp_size,
        ", pipeline_model_parallel_size ", info->meta.pp_size, " and expert_model_parallel_size ",
        info->meta.ep_size, ", expected ", tp_size, ", ", pp_size, " and ", ep_size));
  }
  if (tp_rank == 0 && pp_rank == 0 && ep_rank == 0) {
    *config = info->model_config;
  } else if (info->model_config != *config) {
    return absl::FailedPreconditionError(absl::StrCat(where, "shard ", name,
                                                      " has a different model config than ",
                                                      ShardName(0, 0, pp_size, 0, ep_size)));
  }
  const std::string tensors = JoinPath(info->shard_dir, kShardTensorsFile);
  auto size = fs.FileSize(tensors);
  if (!size.ok()) {
    return absl::DataLossError(absl::StrCat(where, size.status().message()));
  }
  if (*size != info->tensors_file_bytes) {
    return absl::DataLossError(absl::StrCat(where, tensors, " has ", *size, " bytes, ",
                                            kShardMetadataFile, " records ",
                                            info->tensors_file_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VerifyComplete(FileSystem& fs, const std::string& dir, int64_t iteration, int tp_size,
                            int pp_size, int ep_size) {
  Json config;
  for (int p = 0; p < pp_size; ++p) {
    for (int e = 0; e < ep_size; ++e) {
      for (int r = 0; r < tp_size; ++r) {
        RETURN_IF_ERROR(
            VerifyShard(fs, dir, iteration, r, tp_size, p, pp_size, e, ep_size, &config));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace internal

namespace {

using internal::JoinPath;
using internal::Json;
using internal::ShardName;

constexpr char kIterPrefix[] = "iter_";
constexpr char kDeletingPrefix[] = ".deleting.";

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
absl::Status DeleteIterationDir(FileSystem& fs, const std::string& dir, const std::string& name) {
  const std::string doomed = JoinPath(dir, kDeletingPrefix + name);
  RETURN_IF_ERROR(fs.RemoveAll(doomed));
  RETURN_IF_ERROR(fs.Rename(JoinPath(dir, name), doomed));
  return fs.RemoveAll(doomed);
}

// Deletes the oldest iter_* directories below `iteration` so that keep_last directories remain
// (keep_last <= 0 keeps all), and the leftovers of interrupted deletions.
absl::Status PruneIterations(FileSystem& fs, const std::string& save_dir, int64_t iteration,
                             int keep_last) {
  ASSIGN_OR_RETURN(const std::vector<std::string> entries, fs.ListDirectory(save_dir));
  std::vector<std::pair<int64_t, std::string>> older;
  bool removed = false;
  for (const std::string& name : entries) {
    int64_t it = 0;
    if (ParseIterationDirName(name, &it) && it < iteration) older.push_back({it, name});
    if (absl::StartsWith(name, kDeletingPrefix)) {  // An interrupted deletion.
      RETURN_IF_ERROR(fs.RemoveAll(JoinPath(save_dir, name)));
      removed = true;
    }
  }
  std::sort(older.rbegin(), older.rend());
  if (keep_last > 0) {
    for (size_t i = static_cast<size_t>(keep_last) - 1; i < older.size(); ++i) {
      RETURN_IF_ERROR(DeleteIterationDir(fs, save_dir, older[i].second));
      removed = true;
    }
  }
  return removed ? fs.SyncDirectory(save_dir) : absl::OkStatus();
}

// Removes the shard directories of iteration `iteration` that the layout (tp_size x pp_size x
// ep_size) does not name: left by a save in another layout that was killed before its commit,
// they would otherwise be read by the loaders' layout detection (mp_rank_TT before
// mp_rank_TT_000).
absl::Status RemoveOtherShards(FileSystem& fs, const std::string& save_dir, int64_t iteration,
                               int tp_size, int pp_size, int ep_size) {
  const std::string iter_dir = IterationDir(save_dir, iteration);
  std::set<std::string> wanted;
  for (int p = 0; p < pp_size; ++p) {
    for (int e = 0; e < ep_size; ++e) {
      for (int r = 0; r < tp_size; ++r) wanted.insert(ShardName(r, p, pp_size, e, ep_size));
    }
  }
  ASSIGN_OR_RETURN(const std::vector<std::string> entries, fs.ListDirectory(iter_dir));
  bool removed = false;
  for (const std::string& name : entries) {
    if (!absl::StartsWith(name, "mp_rank_") || wanted.count(name) > 0) continue;
    RETURN_IF_ERROR(DeleteIterationDir(fs, iter_dir, name));
    removed = true;
  }
  return removed ? fs.SyncDirectory(iter_dir) : absl::OkStatus();
}

// SaveShard's checks of its arguments; the tensors to write, named, into *named.
absl::Status ValidateSave(const CheckpointMetadata& meta, const Json& config,
                          const std::vector<TensorRecord>& tensors,
                          std::vector<NamedTensor>* named) {
  constexpr char kOp[] = "SaveShard";
  if (meta.tp_size < 1 || meta.tp_rank < 0 || meta.tp_rank >= meta.tp_size || meta.dp_size < 1 ||
      meta.pp_size < 1 || meta.pp_rank < 0 || meta.pp_rank >= meta.pp_size || meta.ep_size < 1 ||
      meta.ep_rank < 0 || meta.ep_rank >= meta.ep_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": bad parallel layout: tp_rank ", meta.tp_rank, " of tp_size ", meta.tp_size,
        ", pp_rank ", meta.pp_rank, " of pp_size ", meta.pp_size, ", ep_rank ", meta.ep_rank,
        " of ep_size ", meta.ep_size, ", dp_size ", meta.dp_size));
  }
  for (int e : meta.experts) {
    if (e < 0) return absl::InvalidArgumentError(absl::StrCat(kOp, ": negative expert ", e));
  }
  if (meta.iteration < 0 || meta.consumed_samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": negative iteration ", meta.iteration,
                                                   " or consumed_samples ", meta.consumed_samples));
  }
  if (config.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": model_config_json is not a JSON object: ", meta.model_config_json));
  }
  if (!IsValidUtf8(meta.trainer_state_json) || !IsValidUtf8(meta.model_name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": trainer_state_json or model_name is not UTF-8"));
  }
  named->reserve(tensors.size());
  std::set<std::string> names;
  for (const TensorRecord& t : tensors) {
    RETURN_IF_ERROR(internal::ValidateRecord(kOp, t, meta.tp_size));
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": duplicate tensor name '", t.name, "'"));
    }
    named->push_back({t.name, t.local});
  }
  return absl::OkStatus();
}

// Writes and fsyncs the shard's two files and the directory holding them.
absl::Status WriteShardFiles(FileSystem& fs, const std::string& dir, const CheckpointMetadata& meta,
                             const Json& config, const std::vector<TensorRecord>& tensors,
                             const std::vector<NamedTensor>& named) {
  const std::string tensors_path = JoinPath(dir, kShardTensorsFile);
  const SafetensorsMetadata st_meta = {
      {"format", "megatron-cpp"},
      {"iteration", absl::StrCat(meta.iteration)},
      {"tensor_model_parallel_rank", absl::StrCat(meta.tp_rank)},
      {"tensor_model_parallel_size", absl::StrCat(meta.tp_size)},
      {"pipeline_model_parallel_rank", absl::StrCat(meta.pp_rank)},
      {"pipeline_model_parallel_size", absl::StrCat(meta.pp_size)},
      {"expert_model_parallel_rank", absl::StrCat(meta.ep_rank)},
      {"expert_model_parallel_size", absl::StrCat(meta.ep_size)},
  };
  // The digests of the bytes written, hashed from memory (the file holds them verbatim) while the
  // file is being written.
  ASSIGN_OR_RETURN(const std::vector<TensorDigests> digests,
                   WriteSafetensorsWithDigests(tensors_path, named, st_meta, Sync::kFsync, fs));
  ASSIGN_OR_RETURN(const int64_t bytes, fs.FileSize(tensors_path));
  const std::string metadata =
      internal::Dump(internal::MetadataJson(meta, config, tensors, digests, bytes), 1) + "\n";
  RETURN_IF_ERROR(WriteFile(fs, JoinPath(dir, kShardMetadataFile), metadata, Sync::kFsync));
  return fs.SyncDirectory(dir);
}

// Moves the complete shard in temp_dir to final_dir: it appears there complete, or not at all.
// old_dir: where the replaced shard goes where the file system has no atomic exchange.
absl::Status PublishShard(FileSystem& fs, const std::string& temp_dir, const std::string& final_dir,
                          const std::string& old_dir) {
  if (!fs.PathExists(final_dir)) return fs.Rename(temp_dir, final_dir);
  absl::Status swapped = fs.Exchange(temp_dir, final_dir);
  if (absl::IsUnimplemented(swapped)) {
    // No atomic exchange on this file system: a short window without the old shard.
    RETURN_IF_ERROR(fs.Rename(final_dir, old_dir));
    RETURN_IF_ERROR(fs.Rename(temp_dir, final_dir));
    return fs.RemoveAll(old_dir);
  }
  RETURN_IF_ERROR(swapped);
  return fs.RemoveAll(temp_dir);  // Now holds the replaced shard.
}

// The pointer file's iteration. NotFound if there is none; DataLoss if it is not a number.
absl::StatusOr<int64_t> ReadPointer(FileSystem& fs, const std::string& load_dir) {
  const std::string pointer = JoinPath(load_dir, kLatestIterationFile);
  auto text = fs.ReadFile(pointer);
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
  return iteration;
}

}  // namespace

std::string IterationDirName(int64_t iteration) { return absl::StrFormat("iter_%07d", iteration); }

std::string IterationDir(const std::string& dir, int64_t iteration) {
  return JoinPath(dir, IterationDirName(iteration));
}

std::string ShardDir(const std::string& dir, int64_t iteration, int tp_rank, int pp_rank,
                     int pp_size, int ep_rank, int ep_size) {
  return JoinPath(IterationDir(dir, iteration),
                  ShardName(tp_rank, pp_rank, pp_size, ep_rank, ep_size));
}

absl::Status SaveShard(const std::string& save_dir, const CheckpointMetadata& meta,
                       const std::vector<TensorRecord>& tensors, FileSystem& fs) {
  const Json config = internal::ParseObject(meta.model_config_json);
  std::vector<NamedTensor> named;
  RETURN_IF_ERROR(ValidateSave(meta, config, tensors, &named));

  const std::string iter_dir = IterationDir(save_dir, meta.iteration);
  const std::string name =
      ShardName(meta.tp_rank, meta.pp_rank, meta.pp_size, meta.ep_rank, meta.ep_size);
  const std::string final_dir = JoinPath(iter_dir, name);
  const std::string temp_dir = JoinPath(iter_dir, "." + name + ".tmp");
  const std::string old_dir = JoinPath(iter_dir, "." + name + ".old");
  RETURN_IF_ERROR(fs.CreateDirectories(iter_dir));
  RETURN_IF_ERROR(fs.SyncDirectory(save_dir));
  // Leftovers of this rank's earlier, interrupted save. A lone ".old" is a shard that was being
  // replaced without an atomic exchange: put it back first, so the iteration stays loadable
  // should this save be interrupted too.
  if (fs.PathExists(old_dir) && !fs.PathExists(final_dir)) {
    RETURN_IF_ERROR(fs.Rename(old_dir, final_dir));
  }
  RETURN_IF_ERROR(fs.RemoveAll(temp_dir));
  RETURN_IF_ERROR(fs.RemoveAll(old_dir));
  RETURN_IF_ERROR(fs.CreateDirectories(temp_dir));
  absl::Status written = WriteShardFiles(fs, temp_dir, meta, config, tensors, named);
  if (!written.ok()) {
    fs.RemoveAll(temp_dir).IgnoreError();  // Best effort; the next save retries.
    return written;
  }
  RETURN_IF_ERROR(PublishShard(fs, temp_dir, final_dir, old_dir));
  return fs.SyncDirectory(iter_dir);
}

absl::Status PrepareSaveDirectory(const std::string& save_dir, FileSystem& fs) {
  if (save_dir.empty()) return absl::InvalidArgumentError("the checkpoint directory is empty");
  // The nearest existing ancestor (or save_dir itself); a file on the way ends the walk there.
  // Exists means stat(2) succeeds: a path this process cannot reach (EACCES on the way) is walked
  // past, so the check names the directory it cannot write in.
  auto exists = [&fs](const std::filesystem::path& path) {
    if (fs.IsDirectory(path.string())) return true;
    const absl::Status size = fs.FileSize(path.string()).status();
    return size.ok() || (absl::IsFailedPrecondition(size) && fs.PathExists(path.string()));
  };
  std::filesystem::path p = std::filesystem::path(save_dir).lexically_normal();
  while (!exists(p) && p.has_relative_path() && p.has_parent_path() && p.parent_path() != p) {
    p = p.parent_path();
  }
  const std::string existing = exists(p) ? p.string() : ".";
  if (!fs.IsDirectory(existing)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot save checkpoints there: ", existing, " is not a directory"));
  }
  auto refused = [](const absl::Status& why) {
    return absl::Status(why.code(), absl::StrCat("cannot save checkpoints: ", why.message()));
  };
  if (absl::Status writable = fs.CheckWritableDirectory(existing); !writable.ok()) {
    return refused(writable);
  }
  // The permission check passed; only doing it shows whether the place takes entries.
  if (absl::Status made = fs.CreateDirectories(save_dir); !made.ok()) return refused(made);
  char host[256] = "host";
  gethostname(host, sizeof(host) - 1);
  const std::string probe =
      JoinPath(save_dir, absl::StrCat(".write_probe.", host, ".", static_cast<long>(getpid())));
  absl::Status wrote = WriteFile(fs, probe, "probe\n", Sync::kNone);
  absl::Status removed = fs.RemoveAll(probe);
  if (!wrote.ok()) return refused(wrote);
  return removed.ok() ? removed : refused(removed);
}

absl::Status CommitCheckpoint(const std::string& save_dir, int64_t iteration, int tp_size,
                              int keep_last, int pp_size, int ep_size, FileSystem& fs) {
  if (iteration < 0 || tp_size < 1 || pp_size < 1 || ep_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("CommitCheckpoint: bad iteration ", iteration,
                                                   ", tp_size ", tp_size, ", pp_size ", pp_size,
                                                   " or ep_size ", ep_size));
  }
  RETURN_IF_ERROR(internal::VerifyComplete(fs, save_dir, iteration, tp_size, pp_size, ep_size));
  RETURN_IF_ERROR(RemoveOtherShards(fs, save_dir, iteration, tp_size, pp_size, ep_size));

  const std::string pointer = JoinPath(save_dir, kLatestIterationFile);
  const std::string temp = JoinPath(save_dir, absl::StrCat(".", kLatestIterationFile, ".tmp"));
  absl::Status written = WriteFile(fs, temp, absl::StrCat(iteration, "\n"), Sync::kFsync);
  if (!written.ok()) {
    // The pointer itself is untouched; drop the partial temporary (best effort).
    fs.RemoveAll(temp).IgnoreError();
    return written;
  }
  RETURN_IF_ERROR(fs.Rename(temp, pointer));
  RETURN_IF_ERROR(fs.SyncDirectory(save_dir));
  return PruneIterations(fs, save_dir, iteration, keep_last);
}

absl::StatusOr<int64_t> LatestIteration(const std::string& load_dir, FileSystem& fs) {
  if (!fs.IsDirectory(load_dir)) {
    return absl::NotFoundError(absl::StrCat("checkpoint directory ", load_dir, " does not exist"));
  }
  ASSIGN_OR_RETURN(const int64_t iteration, ReadPointer(fs, load_dir));
  auto fail = [&](const absl::Status& why) {
    return absl::DataLossError(absl::StrCat(JoinPath(load_dir, kLatestIterationFile),
                                            " names iteration ", iteration,
                                            " but that checkpoint is unusable: ", why.message()));
  };
  auto first = internal::ReadShardInfo(fs, load_dir, iteration, 0);
  if (!first.ok()) return fail(first.status());
  absl::Status complete = internal::VerifyComplete(fs, load_dir, iteration, first->meta.tp_size,
                                                   first->meta.pp_size, first->meta.ep_size);
  if (!complete.ok()) return fail(complete);
  return iteration;
}

}  // namespace checkpoint
}  // namespace mt
