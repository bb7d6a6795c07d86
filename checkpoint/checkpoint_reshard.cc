// ReshardCheckpoint (checkpoint.h): reassembles every global tensor from the source shards and
// splits it again for another tensor-parallel degree.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_internal.h"
#include "checkpoint/safetensors.h"
#include "core/status.h"

namespace mt {
namespace checkpoint {

using internal::LocalShape;
using internal::ShardInfo;
using internal::ShardName;
using internal::StoredTensor;

// The helpers checkpoint_internal.h declares: whole tensors from the shards of any TP degree.
namespace internal {

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

absl::StatusOr<std::vector<SafetensorsReader>> OpenShards(FileSystem& fs,
                                                          const std::string& src_dir,
                                                          int64_t iteration, const ShardInfo& first,
                                                          CheckpointVerify verify) {
  const int old_tp = first.meta.tp_size;
  const CheckpointMetadata& m = first.meta;
  const std::string first_name = ShardName(0, m.pp_rank, m.pp_size, m.ep_rank, m.ep_size);
  std::vector<SafetensorsReader> readers;
  for (int r = 0; r < old_tp; ++r) {
    ASSIGN_OR_RETURN(ShardInfo info, ReadShardInfo(fs, src_dir, iteration, r, m.pp_rank, m.pp_size,
                                                   m.ep_rank, m.ep_size));
    ASSIGN_OR_RETURN(SafetensorsReader reader, OpenShardTensors(fs, info, verify));
    if (info.tensors.size() != first.tensors.size()) {
      return absl::DataLossError(absl::StrCat(info.shard_dir, " lists ", info.tensors.size(),
                                              " tensors, ", first_name, " lists ",
                                              first.tensors.size()));
    }
    for (size_t i = 0; i < first.tensors.size(); ++i) {
      const StoredTensor& a = first.tensors[i];
      const StoredTensor& b = info.tensors[i];
      if (a.name != b.name || a.global_shape != b.global_shape || a.split_dim != b.split_dim ||
          a.vocab_padded != b.vocab_padded) {
        return absl::DataLossError(absl::StrCat(info.shard_dir, ": tensor ", i, " ('", b.name,
                                                "') does not match ", first_name, "'s ('", a.name,
                                                "')"));
      }
      // A replicated tensor is stored by every rank and read from shard 0 alone: the copies
      // must agree (each shard's digest was checked against its own bytes when it was opened),
      // by whichever digest both record.
      const bool sha_differs = !a.sha256.empty() && !b.sha256.empty() && a.sha256 != b.sha256;
      const bool crc_differs = a.crc32c.has_value() && b.crc32c.has_value() && a.crc32c != b.crc32c;
      if (a.split_dim < 0 && (sha_differs || crc_differs)) {
        return absl::DataLossError(absl::StrCat(info.shard_dir, ": replicated tensor '", a.name,
                                                "' differs from its copy in ", first_name));
      }
      const SafetensorsEntry* e = reader.Find(a.name);
      if (e == nullptr || e->shape != LocalShape(a.global_shape, a.split_dim, old_tp)) {
        return absl::DataLossError(absl::StrCat(reader.path(), ": tensor '", a.name,
                                                "' is missing or not the rank's slice"));
      }
    }
    readers.push_back(std::move(reader));
  }
  return readers;
}

absl::StatusOr<Tensor> ReadGlobal(const StoredTensor& s, std::vector<SafetensorsReader>& readers) {
  const DType dtype = readers[0].Find(s.name)->dtype;
  ASSIGN_OR_RETURN(Tensor global, Tensor::Empty(s.global_shape, dtype));
  if (s.split_dim < 0) {
    RETURN_IF_ERROR(readers[0].Read(s.name, global.view()));
    return global;
  }
  const int old_tp = static_cast<int>(readers.size());
  for (int r = 0; r < old_tp; ++r) {
    if (readers[r].Find(s.name)->dtype != dtype) {
      return absl::DataLossError(absl::StrCat(readers[r].path(), ": tensor '", s.name,
                                              "' has another dtype than in TP rank 0's shard"));
    }
    ASSIGN_OR_RETURN(Tensor local, readers[r].ReadTensor(s.name));
    CopySlice(s.global_shape, s.split_dim, r, old_tp, DTypeSize(dtype),
              static_cast<char*>(global.data()), static_cast<char*>(local.data()),
              /*to_global=*/true);
  }
  return global;
}

absl::StatusOr<Tensor> Repad(Tensor old_global, const Shape& new_shape, int64_t real_vocab) {
  const Shape& old_shape = old_global.shape();
  const size_t row =
      static_cast<size_t>(NumElements(absl::Span<const int64_t>(old_shape).subspan(1))) *
      DTypeSize(old_global.dtype());
  if (new_shape == old_shape) {  // Same padded size: still clear the padding rows.
    std::memset(static_cast<char*>(old_global.data()) + real_vocab * row, 0,
                (old_shape[0] - real_vocab) * row);
    return old_global;
  }
  ASSIGN_OR_RETURN(Tensor new_global, Tensor::Empty(new_shape, old_global.dtype()));
  std::memset(new_global.data(), 0, new_global.nbytes());
  std::memcpy(new_global.data(), old_global.data(), real_vocab * row);
  return new_global;
}

absl::StatusOr<Source> OpenSource(FileSystem& fs, const std::string& dir, int64_t iteration,
                                  CheckpointVerify verify) {
  ASSIGN_OR_RETURN(ShardInfo first, ReadShardInfo(fs, dir, iteration, 0));
  const int pp_size = first.meta.pp_size, ep_size = first.meta.ep_size;
  RETURN_IF_ERROR(VerifyComplete(fs, dir, iteration, first.meta.tp_size, pp_size, ep_size));
  Source source;
  for (int p = 0; p < pp_size; ++p) {
    for (int e = 0; e < ep_size; ++e) {
      SourceStage stage;
      if (p == 0 && e == 0) {
        stage.first = std::move(first);
      } else {
        ASSIGN_OR_RETURN(stage.first, ReadShardInfo(fs, dir, iteration, 0, p, pp_size, e, ep_size));
      }
      ASSIGN_OR_RETURN(stage.readers, OpenShards(fs, dir, iteration, stage.first, verify));
      source.stages.push_back(std::move(stage));
    }
  }
  std::map<std::string, size_t> index;
  for (int p = 0; p < static_cast<int>(source.stages.size()); ++p) {
    for (const StoredTensor& s : source.stages[p].first.tensors) {
      auto [it, added] = index.emplace(s.name, source.tensors.size());
      if (added) {
        source.tensors.push_back({s.name, {p, &s}});
        continue;
      }
      // A tensor of several stages (the tied word embedding): the same tensor in each.
      const StoredTensor& a = *source.tensors[it->second].second.stored;
      if (a.global_shape != s.global_shape || a.split_dim != s.split_dim ||
          a.vocab_padded != s.vocab_padded) {
        return absl::DataLossError(
            absl::StrCat(source.stages[p].first.shard_dir, ": tensor '", s.name, "' has ",
                         DescribeTensor(s.global_shape, s.split_dim, s.vocab_padded), ", ",
                         DescribeTensor(a.global_shape, a.split_dim, a.vocab_padded), " in ",
                         source.stages[source.tensors[it->second].second.stage].first.shard_dir));
      }
    }
  }
  return source;
}

}  // namespace internal

namespace {

constexpr char kOp[] = "ReshardCheckpoint";

std::string CanonicalPath(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  std::string out = ec ? path : p.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

// The checks of ReshardCheckpoint's own arguments.
absl::Status ValidateArguments(const std::string& src_dir, const std::string& dst_dir,
                               int new_tp_size, int64_t real_vocab, int64_t new_padded_vocab) {
  if (new_tp_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": tensor_model_parallel_size must be >= 1, got ", new_tp_size));
  }
  if (real_vocab < 1 || new_padded_vocab < real_vocab || new_padded_vocab % new_tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": padded vocabulary ", new_padded_vocab, " must hold the real vocabulary ",
        real_vocab, " and be divisible by tensor_model_parallel_size ", new_tp_size));
  }
  if (CanonicalPath(src_dir) == CanonicalPath(dst_dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": the destination must differ from the source ", src_dir));
  }
  return absl::OkStatus();
}

// The global shape of each tensor after resharding; all checks before any work.
absl::StatusOr<std::vector<Shape>> NewShapes(const std::vector<const StoredTensor*>& tensors,
                                             int new_tp_size, int64_t real_vocab,
                                             int64_t new_padded_vocab) {
  std::vector<Shape> new_shapes;
  for (const StoredTensor* s : tensors) {
    Shape shape = s->global_shape;
    if (s->vocab_padded) {
      if (real_vocab > s->global_shape[0]) {
        return absl::InvalidArgumentError(
            absl::StrCat(kOp, ": real vocabulary ", real_vocab, " exceeds the ", s->global_shape[0],
                         " rows of vocab-padded tensor '", s->name, "'"));
      }
      shape[0] = new_padded_vocab;
    }
    if (s->split_dim >= 0 && shape[s->split_dim] % new_tp_size != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": tensor '", s->name, "' of global shape ", ShapeToString(shape),
                       " cannot be split on dim ", s->split_dim,
                       " over tensor_model_parallel_size ", new_tp_size));
    }
    new_shapes.push_back(std::move(shape));
  }
  return new_shapes;
}

// Each tensor's stages in the new layout (sorted, distinct), checked: every tensor somewhere in
// range, every stage holding something.
absl::StatusOr<std::vector<std::vector<int>>> NewStages(
    const std::vector<const StoredTensor*>& tensors, const ReshardLayout& layout) {
  std::vector<std::vector<int>> stages;
  std::vector<bool> used(layout.pp_size, false);
  for (const StoredTensor* s : tensors) {
    std::vector<int> in = layout.pp_size == 1 ? std::vector<int>{0} : layout.stages_of(s->name);
    std::sort(in.begin(), in.end());
    in.erase(std::unique(in.begin(), in.end()), in.end());
    if (in.empty() || in.front() < 0 || in.back() >= layout.pp_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": the new pipeline layout places tensor '", s->name,
                       in.empty() ? "' on no stage" : "' on a stage out of range", " (of ",
                       layout.pp_size, ")"));
    }
    for (int p : in) used[p] = true;
    stages.push_back(std::move(in));
  }
  for (int p = 0; p < layout.pp_size; ++p) {
    if (!used[p]) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": pipeline stage ", p, " of ",
                                                     layout.pp_size, " would hold no tensor"));
    }
  }
  return stages;
}

// Splits the global tensors for the new layout's ranks and writes each new shard.
absl::Status WriteShards(FileSystem& fs, const std::string& dst_dir,
                         const CheckpointMetadata& source_meta,
                         const std::vector<const StoredTensor*>& tensors,
                         const std::vector<Tensor>& globals, const std::vector<Shape>& new_shapes,
                         const std::vector<std::vector<int>>& stages, const ReshardLayout& layout) {
  const int new_tp_size = layout.tp_size;
  for (int p = 0; p < layout.pp_size; ++p) {
    for (int r = 0; r < new_tp_size; ++r) {
      std::vector<Tensor> owned;
      std::vector<TensorRecord> records;
      for (size_t i = 0; i < tensors.size(); ++i) {
        if (!std::binary_search(stages[i].begin(), stages[i].end(), p)) continue;
        const StoredTensor& s = *tensors[i];
        const TensorView& g = globals[i].view();
        TensorRecord rec{s.name, new_shapes[i], s.split_dim, s.vocab_padded, g};
        if (s.split_dim == 0) {
          const int64_t rows = new_shapes[i][0] / new_tp_size;
          rec.local = g.Slice(r * rows, (r + 1) * rows);
        } else if (s.split_dim > 0) {
          ASSIGN_OR_RETURN(
              Tensor local,
              Tensor::Empty(LocalShape(new_shapes[i], s.split_dim, new_tp_size), g.dtype));
          internal::CopySlice(new_shapes[i], s.split_dim, r, new_tp_size, DTypeSize(g.dtype),
                              static_cast<char*>(g.data), static_cast<char*>(local.data()),
                              /*to_global=*/false);
          rec.local = local.view();
          owned.push_back(std::move(local));
        }
        records.push_back(std::move(rec));
      }
      CheckpointMetadata meta = source_meta;
      meta.tp_size = new_tp_size;
      meta.tp_rank = r;
      meta.pp_size = layout.pp_size;
      meta.pp_rank = p;
      meta.ep_size = 1;  // Every expert in the one shard.
      meta.ep_rank = 0;
      meta.experts.clear();
      RETURN_IF_ERROR(SaveShard(dst_dir, meta, records, fs));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReshardCheckpoint(const std::string& src_dir, int64_t iteration,
                               const std::string& dst_dir, int new_tp_size, int64_t real_vocab,
                               int64_t new_padded_vocab, FileSystem& fs) {
  ReshardLayout layout;
  layout.tp_size = new_tp_size;
  layout.padded_vocab = new_padded_vocab;
  return ReshardCheckpoint(src_dir, iteration, dst_dir, real_vocab, layout, fs);
}

absl::Status ReshardCheckpoint(const std::string& src_dir, int64_t iteration,
                               const std::string& dst_dir, int64_t real_vocab,
                               const ReshardLayout& layout, FileSystem& fs) {
  RETURN_IF_ERROR(
      ValidateArguments(src_dir, dst_dir, layout.tp_size, real_vocab, layout.padded_vocab));
  if (layout.pp_size < 1 || (layout.pp_size > 1 && !layout.stages_of)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": pipeline_model_parallel_size ", layout.pp_size,
        " must be >= 1, and above 1 needs the stages that hold each tensor (stages_of)"));
  }
  ASSIGN_OR_RETURN(internal::Source source,
                   internal::OpenSource(fs, src_dir, iteration, layout.verify));
  if (fs.PathExists(IterationDir(dst_dir, iteration))) {
    return absl::AlreadyExistsError(absl::StrCat(kOp, ": ", IterationDir(dst_dir, iteration),
                                                 " already exists; choose another destination "
                                                 "or delete it"));
  }
  std::vector<const StoredTensor*> tensors;
  for (const auto& [name, entry] : source.tensors) tensors.push_back(entry.stored);
  ASSIGN_OR_RETURN(const std::vector<Shape> new_shapes,
                   NewShapes(tensors, layout.tp_size, real_vocab, layout.padded_vocab));
  ASSIGN_OR_RETURN(const std::vector<std::vector<int>> stages, NewStages(tensors, layout));
  // Every global tensor in its new shape.
  std::vector<Tensor> globals;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const StoredTensor& s = *tensors[i];
    ASSIGN_OR_RETURN(Tensor global, internal::ReadGlobal(
                                        s, source.stages[source.tensors[i].second.stage].readers));
    if (s.vocab_padded) {
      ASSIGN_OR_RETURN(global, internal::Repad(std::move(global), new_shapes[i], real_vocab));
    }
    globals.push_back(std::move(global));
  }
  RETURN_IF_ERROR(
      WriteShards(fs, dst_dir, source.first().meta, tensors, globals, new_shapes, stages, layout));
  return CommitCheckpoint(dst_dir, iteration, layout.tp_size, /*keep_last=*/0, layout.pp_size,
                          /*ep_size=*/1, fs);
}

}  // namespace checkpoint
}  // namespace mt
