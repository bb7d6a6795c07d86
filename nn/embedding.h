// Embedding modules: the vocab-parallel word embedding (which is also the tied output layer) and
// learned absolute position / token-type embeddings.
//
// VocabParallelEmbedding: table [V_pad, H] split on dim 0 (rank r holds rows
// [r * V_pad / tp, (r + 1) * V_pad / tp)); V_pad is the vocabulary padded to a multiple of
// 128 * tp... (see PaddedVocabSize). Lookup gives zero rows for ids outside the rank's range, then
// an all-reduce (g) completes the embedding. Its transpose produces this rank's logits shard
// (the output layer tied to the input embedding), whose input passes through f.
//
// Precision: lookups copy rows of the compute-dtype table (ParameterStore::compute_value) into
// outputs of the compute dtype; gradients (any float dtype) are accumulated into the f32 table
// gradient in f32. The logits may be produced in f32 directly from compute-dtype inputs (as the
// vocab-parallel cross-entropy wants them; no 16-bit rounding of the logits) or in the compute
// dtype.
#ifndef MT_NN_EMBEDDING_H_
#define MT_NN_EMBEDDING_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "nn/context.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {

// vocab rounded up to a multiple of (multiple * tp_size); Megatron's make_vocab_size_divisible_by.
int64_t PaddedVocabSize(int64_t vocab, int64_t multiple, int tp_size);

class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding() = default;
  // Declares "<prefix>.weight" [padded_vocab, hidden] split on dim 0. valid_vocab <= padded_vocab
  // is the real vocabulary (ids must be below it).
  static absl::StatusOr<VocabParallelEmbedding> Create(ParameterStore* store,
                                                       const std::string& prefix,
                                                       int64_t valid_vocab, int64_t padded_vocab,
                                                       int64_t hidden, double init_std);
  // ids: [N] (any shape) i32; out: [N, H] in the compute dtype, complete on every rank (one
  // all-reduce when TP > 1).
  absl::Status Forward(const StepContext& sc, const TensorView& ids, const TensorView& out) const;
  // Accumulates dout [N, H] (identical on all ranks; any float dtype, widened to f32 first) into
  // this rank's rows of the table gradient.
  absl::Status Backward(const StepContext& sc, const TensorView& ids, const TensorView& dout);

  // Output layer tied to the table: logits_shard [N, V_pad / tp] = h [N, H] E_r^T. h in the compute
  // dtype; logits_shard in the compute dtype or f32 (accumulated and kept in f32).
  absl::Status LogitsForward(const StepContext& sc, const TensorView& h,
                             const TensorView& logits_shard) const;
  // dlogits_shard [N, V_pad / tp] (f32 or the compute dtype; f32 is rounded to the compute dtype
  // first, as Megatron's backward of logits.float()): accumulates into the table gradient and
  // writes dh [N, H] in the compute dtype (complete: all-reduced over TP, the f backward).
  absl::Status LogitsBackward(const StepContext& sc, const TensorView& h,
                              const TensorView& dlogits_shard, const TensorView& dh);

  int64_t valid_vocab() const { return valid_vocab_; }
  int64_t padded_vocab() const { return padded_vocab_; }
  int64_t vocab_start(const StepContext& sc) const { return sc.tp_rank() * local_vocab_; }
  int64_t local_vocab() const { return local_vocab_; }

 private:
  ParameterStore* store_ = nullptr;
  int weight_ = -1;
  int64_t valid_vocab_ = 0, padded_vocab_ = 0, local_vocab_ = 0, hidden_ = 0;
};

// A replicated table [rows, H] (positions, token types): out[n] = table[ids[n]].
class ReplicatedEmbedding {
 public:
  ReplicatedEmbedding() = default;
  static absl::StatusOr<ReplicatedEmbedding> Create(ParameterStore* store,
                                                    const std::string& prefix, int64_t rows,
                                                    int64_t hidden, double init_std);
  // out [N, H] = table[ids] (compute dtype); ids must lie in [0, rows). Backward: dout of any
  // float dtype, accumulated in f32 into the f32 table gradient.
  absl::Status Forward(const StepContext& sc, const TensorView& ids, const TensorView& out) const;
  absl::Status Backward(const StepContext& sc, const TensorView& ids, const TensorView& dout);
  int64_t rows() const { return rows_; }

 private:
  ParameterStore* store_ = nullptr;
  int weight_ = -1;
  int64_t rows_ = 0;
};

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_EMBEDDING_H_
