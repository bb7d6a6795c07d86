#include "core/ops/embedding.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise_simd.h"
#include "core/status.h"

namespace mt {
namespace ops {
namespace {

// Validates what Embedding and EmbeddingBackward share. `rows` is out (forward) or dout (backward).
absl::Status CheckArgs(absl::string_view op, const TensorView& ids, const TensorView& table,
                       absl::string_view table_name, const TensorView& rows,
                       absl::string_view rows_name, const EmbeddingRange& range) {
  RETURN_IF_ERROR(CheckSameDevice(op, {&ids, &table, &rows}));
  RETURN_IF_ERROR(CheckDType(op, "ids", ids, {DType::kI32, DType::kI64}));
  RETURN_IF_ERROR(CheckDType(op, table_name, table, {DType::kF32, DType::kBF16, DType::kF16}));
  if (rows.dtype != table.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", rows_name, " has dtype ",
                                                   DTypeName(rows.dtype), ", but ", table_name,
                                                   " has ", DTypeName(table.dtype)));
  }
  RETURN_IF_ERROR(CheckRank(op, table_name, table, 2));
  RETURN_IF_ERROR(CheckContiguous(op, "ids", ids));
  RETURN_IF_ERROR(CheckContiguous(op, table_name, table));
  RETURN_IF_ERROR(CheckContiguous(op, rows_name, rows));
  const int64_t V = table.shape[0], C = table.shape[1];
  Shape full = ids.shape;
  full.push_back(C);
  const Shape flat = {ids.numel(), C};
  if (rows.shape != full && rows.shape != flat) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", rows_name, " has shape ", ShapeToString(rows.shape),
                     ", expected ids.shape + [C] = ", ShapeToString(full),
                     " or [N, C] = ", ShapeToString(flat), " (ids ", ShapeToString(ids.shape), ", ",
                     table_name, " ", ShapeToString(table.shape), ")"));
  }
  if (range.global_vocab == 0 && range.vocab_start != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": vocab_start = ", range.vocab_start,
        " needs global_vocab (the size of the whole vocabulary) for a vocab-parallel shard"));
  }
  if (range.global_vocab != 0 && (range.vocab_start < 0 || range.global_vocab < 0 ||
                                  range.vocab_start > range.global_vocab - V)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": shard rows [", range.vocab_start, ", ", range.vocab_start + V, ") of ",
                     table_name, " ", ShapeToString(table.shape), " do not fit in a vocabulary of ",
                     range.global_vocab, " rows"));
  }
  return absl::OkStatus();
}

absl::Status IdOutOfRange(absl::string_view op, const TensorView& ids, int64_t i, int64_t id,
                          int64_t vocab) {
  return absl::OutOfRangeError(absl::StrCat(op, ": ids element ", i, " (flat index into ids ",
                                            ShapeToString(ids.shape), ") is ", id,
                                            ", outside the vocabulary [0, ", vocab, ")"));
}

template <typename I>
absl::Status CheckIdsInVocab(absl::string_view op, const TensorView& ids, int64_t vocab) {
  const I* p = ids.data_as<I>();
  const int64_t n = ids.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = static_cast<int64_t>(p[i]);
    if (id < 0 || id >= vocab) return IdOutOfRange(op, ids, i, id, vocab);
  }
  return absl::OkStatus();
}

// CheckIds for ids in device memory: a device-side search, then the same error.
absl::Status CheckIdsCuda(absl::string_view op, const ExecContext& ctx, const TensorView& ids,
                          int64_t vocab) {
  ASSIGN_OR_RETURN(const cuda::BadId bad,
                   cuda::FindBadId(op, ctx, "ids", ids, 0, vocab, /*allow_ignore=*/false));
  if (bad.position >= 0) return IdOutOfRange(op, ids, bad.position, bad.value, vocab);
  return absl::OkStatus();
}

absl::Status CheckIds(absl::string_view op, const TensorView& ids, int64_t vocab) {
  return ids.dtype == DType::kI32 ? CheckIdsInVocab<int32_t>(op, ids, vocab)
                                  : CheckIdsInVocab<int64_t>(op, ids, vocab);
}

// Forward: a row copy, so only the element size matters, not the element type.
template <typename I>
void EmbeddingCpu(ThreadPool* pool, const I* ids, const char* table, char* out, int64_t N,
                  int64_t V, int64_t row_bytes, int64_t vocab_start) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, row_bytes));
  ParallelFor(pool, N, grain, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const int64_t r = static_cast<int64_t>(ids[n]) - vocab_start;
      char* dst = out + n * row_bytes;
      if (r >= 0 && r < V) {
        std::memcpy(dst, table + r * row_bytes, row_bytes);
      } else {
        std::memset(dst, 0, row_bytes);  // All-zero bits are +0 in every float dtype.
      }
    }
  });
}

// Backward. A counting sort groups the positions n by local table row, keeping them in increasing
// n within each row. The work items are (touched row, column block) pairs; each item owns its
// elements of dtable and sums their contributions in position order, so no two threads write one
// element and the rounding sequence is fixed.
template <typename T, typename I>
void EmbeddingBackwardCpu(ThreadPool* pool, const I* ids, const T* dout, T* dtable, int64_t N,
                          int64_t V, int64_t C, int64_t vocab_start) {
  if (N == 0 || V == 0 || C == 0) return;
  std::vector<int64_t> start(V + 1, 0);  // start[r] .. start[r + 1]: positions for row r.
  for (int64_t n = 0; n < N; ++n) {
    const int64_t r = static_cast<int64_t>(ids[n]) - vocab_start;
    if (r >= 0 && r < V) ++start[r + 1];
  }
  std::vector<int64_t> touched;  // Rows with at least one position, ascending.
  for (int64_t r = 0; r < V; ++r) {
    if (start[r + 1] > 0) touched.push_back(r);
    start[r + 1] += start[r];
  }
  if (touched.empty()) return;
  std::vector<int64_t> positions(start[V]);
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t r = static_cast<int64_t>(ids[n]) - vocab_start;
      if (r >= 0 && r < V) positions[fill[r]++] = n;
    }
  }

  constexpr int64_t kBlock = 256;  // Columns per work item; the f32 accumulators live on the stack.
  const int64_t num_blocks = (C + kBlock - 1) / kBlock;
  const int64_t items = static_cast<int64_t>(touched.size()) * num_blocks;
  const int64_t per_item =
      std::max<int64_t>(1, start[V] / static_cast<int64_t>(touched.size())) * std::min(C, kBlock);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / per_item);
  ParallelFor(pool, items, grain, [&](int64_t begin, int64_t end) {
    float acc[kBlock];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = touched[item / num_blocks];
      const int64_t c0 = (item % num_blocks) * kBlock;
      const int64_t width = std::min(kBlock, C - c0);
      T* dst = dtable + r * C + c0;
      if constexpr (std::is_same_v<T, float>) {  // The same additions, in place.
        for (int64_t k = start[r]; k < start[r + 1]; ++k) {
          internal::AddRange(dst, dout + positions[k] * C + c0, dst, width);
        }
        continue;
      }
      for (int64_t c = 0; c < width; ++c) acc[c] = ToFloat(dst[c]);
      for (int64_t k = start[r]; k < start[r + 1]; ++k) {
        const T* src = dout + positions[k] * C + c0;
        for (int64_t c = 0; c < width; ++c) acc[c] += ToFloat(src[c]);
      }
      for (int64_t c = 0; c < width; ++c) dst[c] = FromFloat<T>(acc[c]);
    }
  });
}

template <typename T>
void EmbeddingBackwardDispatchIds(ThreadPool* pool, const TensorView& ids, const TensorView& dout,
                                  const TensorView& dtable, int64_t vocab_start) {
  const int64_t N = ids.numel(), V = dtable.shape[0], C = dtable.shape[1];
  if (ids.dtype == DType::kI32) {
    EmbeddingBackwardCpu<T, int32_t>(pool, ids.data_as<int32_t>(), dout.data_as<T>(),
                                     dtable.data_as<T>(), N, V, C, vocab_start);
  } else {
    EmbeddingBackwardCpu<T, int64_t>(pool, ids.data_as<int64_t>(), dout.data_as<T>(),
                                     dtable.data_as<T>(), N, V, C, vocab_start);
  }
}

int64_t GlobalVocab(const EmbeddingRange& range, const TensorView& table) {
  return range.global_vocab == 0 ? table.shape[0] : range.global_vocab;
}

// Everything both ops check before they run: the arguments (CheckArgs), the device, and every id
// against the whole vocabulary (on the device, for CUDA ids).
absl::Status CheckOperands(absl::string_view op, const ExecContext& ctx, const TensorView& ids,
                           const TensorView& table, absl::string_view table_name,
                           const TensorView& rows, absl::string_view rows_name,
                           const EmbeddingRange& range) {
  RETURN_IF_ERROR(CheckArgs(op, ids, table, table_name, rows, rows_name, range));
  const int64_t vocab = GlobalVocab(range, table);
  MT_ROUTE_DEVICE(op, ids, CheckIdsCuda(op, ctx, ids, vocab));
  return CheckIds(op, ids, vocab);
}

}  // namespace

absl::Status Embedding(const ExecContext& ctx, const TensorView& ids, const TensorView& table,
                       const TensorView& out, const EmbeddingRange& range) {
  RETURN_IF_ERROR(CheckOperands("Embedding", ctx, ids, table, "table", out, "out", range));
  MT_ROUTE_DEVICE("Embedding", ids, cuda::Embedding(ctx, ids, table, out, range.vocab_start));
  const int64_t N = ids.numel(), V = table.shape[0];
  const int64_t row_bytes = table.shape[1] * static_cast<int64_t>(DTypeSize(table.dtype));
  const char* t = static_cast<const char*>(table.data);
  char* o = static_cast<char*>(out.data);
  if (ids.dtype == DType::kI32) {
    EmbeddingCpu(ctx.pool, ids.data_as<int32_t>(), t, o, N, V, row_bytes, range.vocab_start);
  } else {
    EmbeddingCpu(ctx.pool, ids.data_as<int64_t>(), t, o, N, V, row_bytes, range.vocab_start);
  }
  return absl::OkStatus();
}

absl::Status EmbeddingBackward(const ExecContext& ctx, const TensorView& ids,
                               const TensorView& dout, const TensorView& dtable,
                               const EmbeddingRange& range) {
  RETURN_IF_ERROR(
      CheckOperands("EmbeddingBackward", ctx, ids, dtable, "dtable", dout, "dout", range));
  MT_ROUTE_DEVICE("EmbeddingBackward", ids,
                  cuda::EmbeddingBackward(ctx, ids, dout, dtable, range.vocab_start));
  internal::DispatchFloat(dtable.dtype, [&](auto tag) {
    EmbeddingBackwardDispatchIds<decltype(tag)>(ctx.pool, ids, dout, dtable, range.vocab_start);
  });
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
