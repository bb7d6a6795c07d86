// LoadResharded (checkpoint.h): this run's slices of a checkpoint saved with any TP degree,
// through the reassembly helpers ReshardCheckpoint uses (checkpoint_internal.h).
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_internal.h"
#include "checkpoint/safetensors.h"
#include "core/status.h"

namespace mt {
namespace checkpoint {

namespace {

using internal::StoredTensor;

constexpr char kOp[] = "LoadResharded";

// A stored tensor, the pipeline stage it is read from, and the record it is read into.
struct Pending {
  const StoredTensor* stored;
  int stage;
  const TensorRecord* record;
};

// Whether stored tensor `s` (of dtype `stored_dtype`) can fill record `t`: the same partitioning
// and dtype, and the same global shape but for the padded rows of a vocab-padded tensor, which
// must hold the real vocabulary on both sides.
absl::Status CheckCompatible(const StoredTensor& s, DType stored_dtype, const TensorRecord& t,
                             int64_t real_vocab, const std::string& where) {
  Shape a = s.global_shape, b = t.global_shape;
  if (s.vocab_padded && t.vocab_padded && !a.empty() && !b.empty()) a[0] = b[0] = 0;
  if (a != b || s.split_dim != t.split_dim || s.vocab_padded != t.vocab_padded) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": tensor '", s.name, "' has ",
        internal::DescribeTensor(s.global_shape, s.split_dim, s.vocab_padded),
        " in the checkpoint, ",
        internal::DescribeTensor(t.global_shape, t.split_dim, t.vocab_padded), " in this model"));
  }
  if (s.vocab_padded && (s.global_shape[0] < real_vocab || t.global_shape[0] < real_vocab)) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": vocab-padded tensor '", s.name, "' has ", s.global_shape[0],
                     " rows in the checkpoint and ", t.global_shape[0],
                     " in this model; both must hold the real vocabulary of ", real_vocab));
  }
  if (stored_dtype != t.local.dtype) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": tensor '", s.name, "' is ", DTypeName(stored_dtype),
                     " in the checkpoint, ", DTypeName(t.local.dtype), " in this model"));
  }
  return absl::OkStatus();
}

// Pairs every stored tensor with its record, checking each pair; lists the names on one side
// only in *out. FailedPrecondition for an incompatible pair or names not allowed to differ.
absl::StatusOr<std::vector<Pending>> Match(const internal::Source& source,
                                           const std::vector<TensorRecord>& into,
                                           int64_t real_vocab, const ReshardedLoadOptions& options,
                                           const std::string& where, ReshardedLoad* out) {
  std::map<std::string, const TensorRecord*> wanted;
  for (const TensorRecord& t : into) wanted.emplace(t.name, &t);
  std::vector<Pending> pending;
  std::set<std::string> stored_names;
  for (const auto& [name, entry] : source.tensors) {
    const StoredTensor& s = *entry.stored;
    stored_names.insert(s.name);
    if (std::any_of(options.skip_prefixes.begin(), options.skip_prefixes.end(),
                    [&](const std::string& p) { return absl::StartsWith(s.name, p); })) {
      continue;
    }
    auto it = wanted.find(s.name);
    if (it == wanted.end()) {
      out->ignored.push_back(s.name);
      continue;
    }
    const SafetensorsReader& reader = source.stages[entry.stage].readers[0];
    RETURN_IF_ERROR(CheckCompatible(s, reader.Find(s.name)->dtype, *it->second, real_vocab, where));
    pending.push_back({&s, entry.stage, it->second});
  }
  for (const TensorRecord& t : into) {
    if (stored_names.count(t.name) == 0) out->missing.push_back(t.name);
  }
  if (!out->missing.empty() && !options.allow_missing) {
    return internal::NamesError(where, " lacks ", out->missing, "of this model");
  }
  if (!out->ignored.empty() && !options.allow_unexpected) {
    return internal::NamesError(where, " holds ", out->ignored, "this model does not have");
  }
  return pending;
}

// Zeroes the rows of t's local slice (split on dim 0) that are vocabulary padding.
void ZeroPaddingRows(const TensorRecord& t, int tp_rank, int tp_size, int64_t real_vocab) {
  const int64_t rows = t.global_shape[0] / tp_size;
  const int64_t first_padding = std::clamp<int64_t>(real_vocab - tp_rank * rows, 0, rows);
  const size_t row_bytes = t.local.nbytes() / static_cast<size_t>(std::max<int64_t>(rows, 1));
  std::memset(static_cast<char*>(t.local.data) + first_padding * row_bytes, 0,
              (rows - first_padding) * row_bytes);
}

// Reads stored tensor `s` into record `t`: directly from this rank's shard when the layouts
// agree, else reassembled, re-padded and sliced.
absl::Status ReadInto(const StoredTensor& s, const TensorRecord& t,
                      std::vector<SafetensorsReader>& readers, int tp_rank, int tp_size,
                      int64_t real_vocab, bool keep_padding_rows) {
  if (static_cast<int>(readers.size()) == tp_size && s.global_shape == t.global_shape) {
    RETURN_IF_ERROR(readers[tp_rank].Read(s.name, t.local));
    if (keep_padding_rows) return absl::OkStatus();
  } else {
    ASSIGN_OR_RETURN(Tensor global, internal::ReadGlobal(s, readers));
    if (s.vocab_padded) {
      ASSIGN_OR_RETURN(global, internal::Repad(std::move(global), t.global_shape, real_vocab));
    }
    if (t.split_dim < 0) {
      std::memcpy(t.local.data, global.data(), global.nbytes());
    } else {
      internal::CopySlice(t.global_shape, t.split_dim, tp_rank, tp_size, DTypeSize(global.dtype()),
                          static_cast<char*>(global.data()), static_cast<char*>(t.local.data),
                          /*to_global=*/false);
    }
  }
  if (s.vocab_padded) ZeroPaddingRows(t, tp_rank, tp_size, real_vocab);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ReshardedLoad> LoadResharded(const std::string& load_dir, int64_t iteration,
                                            int tp_rank, int tp_size, int64_t real_vocab,
                                            const std::vector<TensorRecord>& into,
                                            const ReshardedLoadOptions& options, FileSystem& fs) {
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size || real_vocab < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": bad tp_rank ", tp_rank, " of tp_size ",
                                                   tp_size, " or real vocabulary ", real_vocab));
  }
  std::set<std::string> names;
  for (const TensorRecord& t : into) {
    RETURN_IF_ERROR(internal::ValidateRecord(kOp, t, tp_size));
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": tensor '", t.name, "' listed twice"));
    }
  }
  internal::Json expected_config;
  if (!options.expected_model_config_json.empty()) {
    expected_config = internal::ParseObject(options.expected_model_config_json);
    if (expected_config.is_discarded()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": expected model config is not a JSON ",
                       "object: ", options.expected_model_config_json));
    }
  }
  const std::string where = absl::StrCat("checkpoint ", load_dir, " iteration ", iteration);
  ASSIGN_OR_RETURN(internal::Source source,
                   internal::OpenSource(fs, load_dir, iteration, options.verify));
  if (!expected_config.is_null()) {
    RETURN_IF_ERROR(internal::CheckSameConfig(where, source.first().model_config, expected_config));
  }
  ReshardedLoad result;
  result.meta = source.first().meta;
  ASSIGN_OR_RETURN(const std::vector<Pending> pending,
                   Match(source, into, real_vocab, options, where, &result));
  for (const Pending& p : pending) {
    RETURN_IF_ERROR(ReadInto(*p.stored, *p.record, source.stages[p.stage].readers, tp_rank, tp_size,
                             real_vocab, options.keep_padding_rows));
  }
  return result;
}

}  // namespace checkpoint
}  // namespace mt
