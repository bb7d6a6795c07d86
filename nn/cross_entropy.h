// Vocab-parallel cross-entropy: the loss over logits sharded by vocabulary columns across the TP
// ranks, WITHOUT gathering the logits (Megatron-LM's vocab-parallel cross-entropy): local max ->
// all-reduce MAX; the target's logit (0 where this rank does not own it) and sum(exp) -> one
// all-reduce SUM of [N, 2]; loss = log(sum exp) + max - target logit; backward = (softmax - onehot)
// * dloss, no communication. Padded vocabulary columns are masked out, so the loss does not depend
// on the padding (nor on the TP degree). GatherLogits assembles full logits for generation.
//
// The loss runs in f32 on f32 logits whatever the compute dtype: mixed-precision models produce
// their logits in f32 (a compute-dtype GEMM with f32 output, nn::VocabParallelEmbedding) as
// Megatron casts them with logits.float() before its vocab-parallel cross-entropy.
#ifndef MT_NN_CROSS_ENTROPY_H_
#define MT_NN_CROSS_ENTROPY_H_

#include "absl/status/status.h"
#include "core/ops/sharded_cross_entropy.h"
#include "core/tensor.h"
#include "nn/context.h"

namespace mt {
namespace nn {

class VocabParallelCrossEntropy {
 public:
  // logits_shard: [N, Vs] f32, kept by the caller until Backward; targets: [N] i32/i64;
  // losses: [N] f32 (0 for ignored targets). Two all-reduces when TP > 1.
  absl::Status Forward(const StepContext& sc, const TensorView& logits_shard,
                       const TensorView& targets, const ops::VocabShard& shard,
                       const TensorView& losses);
  // dlosses: [N] f32; dlogits_shard: [N, Vs] (may alias the forward's logits).
  absl::Status Backward(const StepContext& sc, const TensorView& dlosses,
                        const TensorView& dlogits_shard);

 private:
  TensorView logits_, targets_;
  ops::VocabShard shard_;
  Tensor row_max_, partials_;
};

// full [N, Vs * tp] <- the concatenation of every rank's logits shard (one all-gather).
absl::Status GatherLogits(const StepContext& sc, const TensorView& logits_shard,
                          const TensorView& full);

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_CROSS_ENTROPY_H_
