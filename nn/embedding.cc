#include "nn/embedding.h"

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/gemm.h"
#include "core/status.h"
#include "nn/linear.h"

namespace mt {
namespace nn {

namespace {

// The embedding gradient accumulates into the f32 table gradient: a 16-bit dout is widened to f32
// scratch first (exactly), so that the scatter-add runs in f32 with one f32 rounding per sum.
absl::Status AccumulateTableGrad(const StepContext& sc, const TensorView& ids,
                                 const TensorView& dout, const TensorView& grad,
                                 const ops::EmbeddingRange& range) {
  if (dout.dtype == grad.dtype) return ops::EmbeddingBackward(*sc.exec, ids, dout, grad, range);
  ASSIGN_OR_RETURN(Tensor wide, Alloc(*sc.exec, dout.shape, grad.dtype));
  RETURN_IF_ERROR(ops::Convert(*sc.exec, dout, wide.view()));
  return ops::EmbeddingBackward(*sc.exec, ids, wide.view(), grad, range);
}

}  // namespace

int64_t PaddedVocabSize(int64_t vocab, int64_t multiple, int tp_size) {
  const int64_t m = multiple * tp_size;
  return (vocab + m - 1) / m * m;
}

absl::StatusOr<VocabParallelEmbedding> VocabParallelEmbedding::Create(
    ParameterStore* store, const std::string& prefix, int64_t valid_vocab, int64_t padded_vocab,
    int64_t hidden, double init_std) {
  if (valid_vocab < 1 || padded_vocab < valid_vocab || padded_vocab % store->tp_size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab-parallel embedding: vocabulary ", valid_vocab, " padded to ", padded_vocab,
        " must be positive and divisible by the tensor-parallel size ", store->tp_size()));
  }
  VocabParallelEmbedding e;
  e.store_ = store;
  ASSIGN_OR_RETURN(e.weight_, store->Add({prefix + ".weight",
                                          {padded_vocab, hidden},
                                          0,
                                          Init::kNormal,
                                          init_std,
                                          /*weight_decay=*/true,
                                          /*vocab_padded=*/true}));
  e.valid_vocab_ = valid_vocab;
  e.padded_vocab_ = padded_vocab;
  e.local_vocab_ = padded_vocab / store->tp_size();
  e.hidden_ = hidden;
  return e;
}

absl::Status VocabParallelEmbedding::Forward(const StepContext& sc, const TensorView& ids,
                                             const TensorView& out) const {
  // Ids must be real tokens: check against the unpadded vocabulary via the range's global size.
  ops::EmbeddingRange range;
  if (sc.tp_size() > 1) range = {vocab_start(sc), padded_vocab_};
  RETURN_IF_ERROR(ops::Embedding(*sc.exec, ids, store_->compute_value(weight_), out, range));
  return GForward(sc, out);
}

absl::Status VocabParallelEmbedding::Backward(const StepContext& sc, const TensorView& ids,
                                              const TensorView& dout) {
  ops::EmbeddingRange range;
  if (sc.tp_size() > 1) range = {vocab_start(sc), padded_vocab_};
  return AccumulateTableGrad(sc, ids, dout, store_->grad(weight_), range);
}

absl::Status VocabParallelEmbedding::LogitsForward(const StepContext& sc, const TensorView& h,
                                                   const TensorView& logits_shard) const {
  ops::GemmOptions nt;
  nt.transpose_b = ops::Transpose::kYes;
  return ops::Gemm(*sc.exec, h, store_->compute_value(weight_), logits_shard, nt);
}

absl::Status VocabParallelEmbedding::LogitsBackward(const StepContext& sc, const TensorView& h,
                                                    const TensorView& dlogits_shard,
                                                    const TensorView& dh) {
  // The GEMMs run in the compute dtype (h's): f32 logit gradients are rounded to it once.
  TensorView dlogits = dlogits_shard;
  Tensor narrow;
  if (dlogits_shard.dtype != h.dtype) {
    ASSIGN_OR_RETURN(narrow, Alloc(*sc.exec, dlogits_shard.shape, h.dtype));
    RETURN_IF_ERROR(ops::Convert(*sc.exec, dlogits_shard, narrow.view()));
    dlogits = narrow.view();
  }
  ops::GemmOptions tn;
  tn.transpose_a = ops::Transpose::kYes;
  tn.beta = 1.0f;
  RETURN_IF_ERROR(ops::Gemm(*sc.exec, dlogits, h, store_->grad(weight_), tn));
  RETURN_IF_ERROR(ops::Gemm(*sc.exec, dlogits, store_->compute_value(weight_), dh));
  return FBackward(sc, dh);
}

absl::StatusOr<ReplicatedEmbedding> ReplicatedEmbedding::Create(ParameterStore* store,
                                                                const std::string& prefix,
                                                                int64_t rows, int64_t hidden,
                                                                double init_std) {
  ReplicatedEmbedding e;
  e.store_ = store;
  e.rows_ = rows;
  ASSIGN_OR_RETURN(e.weight_, store->Add({prefix + ".weight",
                                          {rows, hidden},
                                          -1,
                                          Init::kNormal,
                                          init_std,
                                          /*weight_decay=*/true}));
  return e;
}

absl::Status ReplicatedEmbedding::Forward(const StepContext& sc, const TensorView& ids,
                                          const TensorView& out) const {
  return ops::Embedding(*sc.exec, ids, store_->compute_value(weight_), out);
}

absl::Status ReplicatedEmbedding::Backward(const StepContext& sc, const TensorView& ids,
                                           const TensorView& dout) {
  return AccumulateTableGrad(sc, ids, dout, store_->grad(weight_), ops::EmbeddingRange{});
}

}  // namespace nn
}  // namespace mt
