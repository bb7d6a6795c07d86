// Context parallelism at the model level (the layout and ring attention: nn/context_parallel.h).
// Every rank of a CP group is given the WHOLE micro-batch (as every TP rank is) and cuts out its
// two chunks of each sequence; the model runs its layers on them chunk-major and reduces only the
// loss over the group. The gradients each rank accumulates are its chunks' share of the whole
// micro-batch's loss (normalised by the whole batch's count of scored targets), which the trainer
// sums over DP x CP (comm::ParallelContext::dp_cp()).
//
// Models that implement it (ModelOptions::context_parallel > 1): GPT-2 and the GPT-family
// variants whose blocks honour it (nn::Layer::context_parallel), BERT (pretraining heads). Not on
// a GPU, nor with incremental decoding or Logits.
#ifndef MT_MODELS_CONTEXT_PARALLEL_H_
#define MT_MODELS_CONTEXT_PARALLEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "models/config.h"
#include "models/model.h"
#include "nn/context.h"

namespace mt {
namespace models {

// InvalidArgument (naming `model`) unless a model built with `context_parallel` ranks can: 1
// always; > 1 needs a CPU store.
absl::Status CheckContextParallel(const std::string& model, int context_parallel,
                                  const Device& device);

// InvalidArgument unless sc's CP group has `context_parallel` ranks (the size the model was built
// for; every CP rank runs with its group).
absl::Status CheckStepContextParallel(const std::string& model, const nn::StepContext& sc,
                                      int context_parallel);

// This CP rank's part of a whole micro-batch.
class ContextParallelBatch {
 public:
  // With sc.cp_size() = C > 1: tokens, labels, token_types of `whole` ([B, T] i32, on the host or
  // the device) cut into this rank's chunks chunk-major ([2B, c], c = T / (2C)); the padding mask
  // into the whole sequence's chunks ([2C B, c], what ring attention takes); sop_labels as they
  // are. Host tensors owned by this object, valid until the next Cut. With C = 1: `whole`.
  // InvalidArgument when T does not split into 2C chunks or a field is not i32 [B, T].
  absl::StatusOr<Batch> Cut(const ExecContext& ec, const nn::StepContext& sc, const Batch& whole);

 private:
  Tensor tokens_, labels_, token_types_, mask_;
  Tensor staging_[4];  // Device fields downloaded.
};

// The activation between pipeline stages for `batch` sequences of `seq_length` positions:
// [batch, seq_length / sp, hidden] at cp = 1, else this rank's chunks chunk-major
// [2 batch, seq_length / (2 cp) / sp, hidden] (sp: the TP degree with sequence parallelism, else
// 1).
Shape ContextParallelBoundaryShape(int64_t batch, int64_t seq_length, int cp, int sp,
                                   int64_t hidden);

// The dropout (or its backward) of x [2B * c, width] or [2B, c, width], this rank's chunks
// chunk-major, into y (of x's shape; may be x): each half keyed as its chunk of the whole
// activation that `whole` keys from its first element. CP = 1: `whole` on x as it is.
absl::Status CpDropout(const nn::StepContext& sc, const TensorView& x,
                       const ops::DropoutArgs& whole, int64_t chunk_len, int64_t width,
                       bool backward, const TensorView& y);

// The positions of this rank's tokens of `B` sequences cut so: i32 [2B * c], the token at
// (half h, sample b, t) at position CpChunk(h) c + t. CP = 1: [B * c] of t (c = T).
Tensor CpPositions(const nn::StepContext& sc, int64_t B, int64_t c);

// The sum over sc's CP group of each rank's `local` (exact addition order: rank 0, 1, ...; the
// same on every rank). `local` itself at CP = 1.
absl::StatusOr<double> CpSum(const nn::StepContext& sc, double local);
// The same for several values at once (one collective): element i summed over the group.
absl::StatusOr<std::vector<double>> CpSum(const nn::StepContext& sc,
                                          const std::vector<double>& local);

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_CONTEXT_PARALLEL_H_
