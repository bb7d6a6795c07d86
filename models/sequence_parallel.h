// Sequence parallelism (nn/sequence_parallel.h) at the two ends of a model's transformer stack:
// the embeddings, computed whole on every TP rank, are scattered into this rank's slice of the
// sequence (their dropout applied to the slice with the serial model's masks), and the stack's
// output slice passes through the final norm (if any; its gradients summed over TP) and is
// all-gathered for the heads, which see the whole sequence as without sequence parallelism.
//
//   forward                                           backward
//   Enter: local_in <- dropout(slice of emb)          EnterBackward: demb <- all-gather of
//                                                       dropout'(dx_local)
//   Exit:  out <- all-gather of norm(h_local)         ExitBackward: dh_local <- norm'(slice of
//                                                       dout)   (dout complete on every rank)
//
// With context parallelism (nn/context_parallel.h) B counts this rank's chunk-major rows (2 per
// sample), T the chunk's positions, and `dropout` is the whole sequence's.
// Shapes: emb, demb, out, dout [B, T, H] (or [B * T, H]); the slices [B, T / tp, H]; compute dtype;
// sc.tp must be set (TP > 1). Errors: those of the mappings and ops (InvalidArgument for a
// sequence length not divisible by TP).
#ifndef MT_MODELS_SEQUENCE_PARALLEL_H_
#define MT_MODELS_SEQUENCE_PARALLEL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "nn/context.h"
#include "nn/norm.h"
#include "nn/parameter.h"
#include "nn/sequence_parallel.h"

namespace mt {
namespace models {

class SequenceParallelEnds {
 public:
  // `norm`: the final norm (null: none), whose parameters are store handles [norm_first,
  // norm_end).
  SequenceParallelEnds(nn::ParameterStore* store, nn::Norm* norm, int norm_first, int norm_end);

  // emb: [B, T, H] before dropout; `dropout`: the dropout of the whole emb (keyed from its first
  // element). Returns the stack's input, this rank's slice (a buffer kept until the next Enter).
  absl::StatusOr<TensorView> Enter(const nn::StepContext& sc, const TensorView& emb,
                                   const ops::DropoutArgs& dropout);
  // dx_local: the stack's input gradient [B, T / tp, H] (overwritten); demb [B, T, H].
  absl::Status EnterBackward(const nn::StepContext& sc, const TensorView& dx_local,
                             const ops::DropoutArgs& dropout, const TensorView& demb);
  // h_local: the stack's output [B, T / tp, H]; out: [B, T, H] or [B * T, H]. Needs no Enter
  // on this model first (a pipeline stage holding the last layers but not the embeddings).
  absl::Status Exit(const nn::StepContext& sc, const TensorView& h_local, const TensorView& out);
  // dout: the complete gradient of out (identical on every TP rank); dh_local [B, T / tp, H].
  absl::Status ExitBackward(const nn::StepContext& sc, const TensorView& dout,
                            const TensorView& dh_local);
  // Bytes of the slices kept between forward and backward.
  int64_t bytes() const { return local_in_.nbytes() + normed_.nbytes(); }

 private:
  // t as [B, T', H] for the sequence's B and H.
  absl::StatusOr<TensorView> As3D(const TensorView& t) const;
  absl::Status Ensure(const nn::StepContext& sc, Tensor* t, const Shape& shape, DType dtype) const;
  // The embeddings' dropout (or its backward) in place on this rank's slice x_local of an emb
  // with T positions per row: with context parallelism ([2B, T, H] chunk-major, `dropout` the
  // whole sequence's) each half keyed as its chunk's slice.
  absl::Status DropSlice(const nn::StepContext& sc, const TensorView& x_local,
                         const ops::DropoutArgs& dropout, int64_t T, bool backward) const;

  nn::ParameterStore* store_;
  nn::Norm* norm_;
  nn::SequenceParallelGrads norm_grads_;
  int64_t B_ = 0, H_ = 0;
  Tensor local_in_;  // [B, T / tp, H]: the stack's input slice.
  Tensor normed_;    // [B, T / tp, H]: the final norm's output slice.
};

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_SEQUENCE_PARALLEL_H_
