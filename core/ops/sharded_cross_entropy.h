// The per-rank kernels of the vocab-parallel cross-entropy (Megatron-LM's, without gathering the
// logits). A rank holds logits [N, Vs] for the global vocabulary columns [vocab_start, vocab_start
// + Vs); columns whose global id is >= valid_vocab (the padding of the vocabulary to a multiple of
// 128 x TP) are masked out of the softmax, which makes the loss independent of the padding and so
// of the TP degree. The caller (nn/) combines the ranks' partial results with all-reduces between
// the phases:
//
//   1. ShardedRowMax             local masked max per row            -> all-reduce MAX
//   2. ShardedTargetAndSumExp    [N, 2]: (target logit if this rank
//                                owns the target else 0,
//                                sum_j exp(l_j - max))                -> all-reduce SUM
//   3. ShardedLoss               loss = log(sum_exp) + max - target   (no communication)
//   4. ShardedCrossEntropyBackward  dlogits = (softmax - onehot) * dloss, masked columns 0
//
// logits/dlogits: [N, Vs] f32; targets: [N] i32/i64 in [0, valid_vocab) or kIgnoreIndex (loss 0,
// gradient 0); row_max, losses, dlosses: [N] f32; partials: [N, 2] f32. dlogits may alias logits.
// Errors: InvalidArgument (shapes, dtypes, ranges), OutOfRange (a target outside the vocabulary).
#ifndef MT_CORE_OPS_SHARDED_CROSS_ENTROPY_H_
#define MT_CORE_OPS_SHARDED_CROSS_ENTROPY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

struct VocabShard {
  int64_t vocab_start = 0;  // Global id of column 0.
  int64_t valid_vocab = 0;  // Real (unpadded) vocabulary size; columns at or past it are masked.
};

absl::Status ShardedRowMax(const ExecContext& ctx, const TensorView& logits,
                           const VocabShard& shard, const TensorView& row_max);

absl::Status ShardedTargetAndSumExp(const ExecContext& ctx, const TensorView& logits,
                                    const TensorView& targets, const VocabShard& shard,
                                    const TensorView& row_max, const TensorView& partials);

absl::Status ShardedLoss(const ExecContext& ctx, const TensorView& targets,
                         const TensorView& row_max, const TensorView& partials,
                         const TensorView& losses);

absl::Status ShardedCrossEntropyBackward(const ExecContext& ctx, const TensorView& logits,
                                         const TensorView& targets, const VocabShard& shard,
                                         const TensorView& row_max, const TensorView& partials,
                                         const TensorView& dlosses, const TensorView& dlogits);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_SHARDED_CROSS_ENTROPY_H_
