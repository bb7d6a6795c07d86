// The tensor-parallel mappings (Megatron's f and g, and the last-dimension gather/scatter): the
// only places where nn/ layers talk to the other ranks of their TP group. Each mapping has a
// forward and a backward function; the pair is adjoint (backward is the transpose of forward's
// Jacobian), which the tests check with finite differences.
//
//   mapping                          forward                      backward
//   CopyToTensorParallelRegion (f)   identity                     all-reduce (sum) of dx
//   ReduceFromTensorParallelRegion(g) all-reduce (sum) of y       identity
//   GatherFromTensorParallelRegion   all-gather on the last dim   keep this rank's slice of dy
//   ScatterToTensorParallelRegion    keep this rank's slice       all-gather on the last dim
//
// `tp` is the tensor-parallel communicator (ParallelContext::tp()); each call that communicates is
// collective over it and counts one all-reduce or all-gather on it, so a transformer layer (f and g
// in attention and in the MLP) shows exactly 2 all-reduces forward and 2 backward. The identity
// directions communicate nothing and count nothing. All-reduces run in place. Dtypes and devices:
// those of Communicator (f32, bf16, f16 in practice; CPU, or CUDA with the backend's rules).
//
// Last-dimension slices: with T = tp.size() and full last dimension C = T * c, rank r owns columns
// [r * c, (r + 1) * c). Errors: InvalidArgument for non-contiguous views, mismatched dtypes or
// devices, or shapes that do not fit (message names the mapping and the tensor); communicator
// errors are passed through.
#ifndef MT_COMM_MAPPINGS_H_
#define MT_COMM_MAPPINGS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "comm/communicator.h"
#include "core/tensor.h"

namespace mt {
namespace comm {

// f. Forward: identity on x (nothing moves; validates x). Backward: dx <- sum over ranks of dx.
absl::Status CopyToTensorParallelRegionForward(Communicator& tp, const TensorView& x);
absl::Status CopyToTensorParallelRegionBackward(Communicator& tp, const TensorView& dx);

// g. Forward: y <- sum over ranks of y. Backward: identity on dy (validates dy).
absl::Status ReduceFromTensorParallelRegionForward(Communicator& tp, const TensorView& y);
absl::Status ReduceFromTensorParallelRegionBackward(Communicator& tp, const TensorView& dy);

// Forward: y [..., T*c] <- concatenation of every rank's x_local [..., c] along the last dim.
// Backward: dx_local [..., c] <- this rank's columns of dy [..., T*c].
absl::Status GatherFromTensorParallelRegionForward(Communicator& tp, const TensorView& x_local,
                                                   const TensorView& y);
absl::Status GatherFromTensorParallelRegionBackward(Communicator& tp, const TensorView& dy,
                                                    const TensorView& dx_local);

// Forward: y_local [..., c] <- this rank's columns of x [..., T*c] (no communication).
// Backward: dx [..., T*c] <- concatenation of every rank's dy_local along the last dim.
absl::Status ScatterToTensorParallelRegionForward(Communicator& tp, const TensorView& x,
                                                  const TensorView& y_local);
absl::Status ScatterToTensorParallelRegionBackward(Communicator& tp, const TensorView& dy_local,
                                                   const TensorView& dx);

// Local (no communication): part [..., c] <- columns [index * c, (index + 1) * c) of
// full [..., parts * c]. Same dtype and device (CPU, or CUDA via a strided device copy);
// 0 <= index < parts. InvalidArgument otherwise, naming `op`.
absl::Status SplitLastDim(absl::string_view op, const TensorView& full, int index, int parts,
                          const TensorView& part);

}  // namespace comm
}  // namespace mt

#endif  // MT_COMM_MAPPINGS_H_
