#include "nn/cross_entropy.h"

#include "comm/mappings.h"
#include "core/alloc.h"
#include "core/status.h"

namespace mt {
namespace nn {

absl::Status VocabParallelCrossEntropy::Forward(const StepContext& sc,
                                                const TensorView& logits_shard,
                                                const TensorView& targets,
                                                const ops::VocabShard& shard,
                                                const TensorView& losses) {
  const int64_t N = logits_shard.dim(0);
  if (row_max_.numel() != N || row_max_.device() != sc.exec->device) {
    ASSIGN_OR_RETURN(row_max_, Alloc(*sc.exec, {N}, DType::kF32));
    ASSIGN_OR_RETURN(partials_, Alloc(*sc.exec, {N, 2}, DType::kF32));
  }
  logits_ = logits_shard;
  targets_ = targets;
  shard_ = shard;
  const ExecContext& ec = *sc.exec;
  RETURN_IF_ERROR(ops::ShardedRowMax(ec, logits_shard, shard, row_max_.view()));
  if (sc.tp != nullptr) RETURN_IF_ERROR(sc.tp->AllReduce(row_max_.view(), comm::ReduceOp::kMax));
  RETURN_IF_ERROR(ops::ShardedTargetAndSumExp(ec, logits_shard, targets, shard, row_max_.view(),
                                              partials_.view()));
  if (sc.tp != nullptr) RETURN_IF_ERROR(sc.tp->AllReduce(partials_.view(), comm::ReduceOp::kSum));
  return ops::ShardedLoss(ec, targets, row_max_.view(), partials_.view(), losses);
}

absl::Status VocabParallelCrossEntropy::Backward(const StepContext& sc, const TensorView& dlosses,
                                                 const TensorView& dlogits_shard) {
  if (row_max_.numel() == 0) {
    return absl::FailedPreconditionError("vocab-parallel cross-entropy: Backward without Forward");
  }
  return ops::ShardedCrossEntropyBackward(*sc.exec, logits_, targets_, shard_, row_max_.view(),
                                          partials_.view(), dlosses, dlogits_shard);
}

absl::Status GatherLogits(const StepContext& sc, const TensorView& logits_shard,
                          const TensorView& full) {
  if (sc.tp == nullptr) {
    if (full.nbytes() != logits_shard.nbytes()) {
      return absl::InvalidArgumentError("GatherLogits: output size differs from the shard");
    }
    return CopyTensor(*sc.exec, logits_shard, full);
  }
  return comm::GatherFromTensorParallelRegionForward(*sc.tp, logits_shard, full);
}

}  // namespace nn
}  // namespace mt
