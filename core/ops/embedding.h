// Embedding lookup and its backward (scatter-add), with an optional vocabulary offset for
// vocab-parallel embeddings: this rank's table holds rows [vocab_start, vocab_start + V).
//
// ids: [N] (any shape, flattened) i32 or i64; table: [V, C] f32/bf16/f16; out/dout: [N, C] (or
// ids.shape + [C]) in table's dtype.
#ifndef MT_CORE_OPS_EMBEDDING_H_
#define MT_CORE_OPS_EMBEDDING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

// out[n] = table[ids[n] - vocab_start] if vocab_start <= ids[n] < vocab_start + V, else zeros.
// With vocab_start = 0 (a whole table), an id outside [0, V) is an error: OutOfRange naming the id.
absl::Status Embedding(const ExecContext& ctx, const TensorView& ids, const TensorView& table,
                       const TensorView& out, int64_t vocab_start = 0);

// dtable[ids[n] - vocab_start] += dout[n] for ids in range; others are skipped. ACCUMULATES into
// dtable (zero it first for a fresh gradient). Deterministic: the result does not depend on the
// thread count. Same id-range rules as Embedding.
absl::Status EmbeddingBackward(const ExecContext& ctx, const TensorView& ids,
                               const TensorView& dout, const TensorView& dtable,
                               int64_t vocab_start = 0);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_EMBEDDING_H_
