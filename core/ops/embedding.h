// Embedding lookup and its backward (scatter-add), for whole tables and for vocab-parallel shards.
//
// ids: any shape (N = ids.numel()), i32 or i64. table, dtable: [V, C] f32/bf16/f16.
// out, dout: ids.shape + [C], or [N, C]; same dtype as the table. All contiguous, one device.
//
// Which rows a table holds is said by an EmbeddingRange:
//   - {} (the default): the table is the whole vocabulary; every id must lie in [0, V).
//   - {vocab_start, global_vocab}: the table is a shard holding rows
//     [vocab_start, vocab_start + V) of a vocabulary of global_vocab rows (a vocab-parallel
//     embedding). Every id must lie in [0, global_vocab); an id outside the
//     shard gives a zero row forward and is skipped backward. Rank 0 of a TP group passes
//     {0, global_vocab}: vocab_start alone cannot tell a shard from a whole table.
//
// Errors: InvalidArgument (shapes, dtypes of out/dout vs table, contiguity, mixed devices, a range
// with vocab_start < 0 or vocab_start + V > global_vocab), Unimplemented (other dtypes; CUDA
// tensors in CPU-only builds or without a device), OutOfRange for an id outside the vocabulary,
// naming its flat position in ids and its value. Ids are checked before anything is written (on
// CUDA, on the device: that needs ctx.cuda and synchronizes the stream; the CUDA backward sums in
// the same order as the CPU kernel, so it gives the same bits).
#ifndef MT_CORE_OPS_EMBEDDING_H_
#define MT_CORE_OPS_EMBEDDING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

struct EmbeddingRange {
  int64_t vocab_start = 0;   // Global id of the table's row 0.
  int64_t global_vocab = 0;  // Rows of the whole vocabulary; 0 means "the table is all of it".
};

// out[n] = table[ids[n] - vocab_start] if vocab_start <= ids[n] < vocab_start + V, else zeros.
// A bitwise copy of the table rows.
absl::Status Embedding(const ExecContext& ctx, const TensorView& ids, const TensorView& table,
                       const TensorView& out, const EmbeddingRange& range = {});

// dtable[ids[n] - vocab_start] += dout[n] for ids inside the table; others are skipped.
// ACCUMULATES into dtable (zero it first for a fresh gradient). Each touched element of dtable is
// computed in f32 as ((dtable + dout[n1]) + dout[n2]) + ... over the positions n1 < n2 < ... that
// hold its id, then rounded once to dtable's dtype; the work is split by table rows and columns, so
// the result is bitwise independent of the thread count.
absl::Status EmbeddingBackward(const ExecContext& ctx, const TensorView& ids,
                               const TensorView& dout, const TensorView& dtable,
                               const EmbeddingRange& range = {});

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_EMBEDDING_H_
