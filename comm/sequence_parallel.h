// The sequence-parallel mappings (Korthikanti et al. 2022, "Reducing Activation Recomputation in
// Large Transformer Models"): with sequence parallelism the LayerNorms, dropouts and residual adds
// of a transformer layer run on this rank's slice of the sequence, and the tensor-parallel f and g
// all-reduces become an all-gather and a reduce-scatter along the sequence. Each mapping has a
// forward and a backward function; the pair is adjoint (the tests check it with finite
// differences).
//
//   mapping                                  forward                  backward
//   ScatterToSequenceParallelRegion          keep this rank's slice   all-gather along T
//   GatherFromSequenceParallelRegion         all-gather along T       reduce-scatter along T
//   ReduceScatterToSequenceParallelRegion    reduce-scatter along T   all-gather along T
//
// GatherFromSequenceParallelRegion's backward assumes partial input gradients (each rank holds
// its contribution to the whole sequence, as after a column-parallel linear's local backward);
// where the gradient arriving is already complete and identical on every rank (after a
// vocabulary-parallel output layer that all-reduced it), its adjoint is the slice that
// ScatterToSequenceParallelRegionForward takes.
//
// Layout: activations are [B, T, ...] (batch first, sequence second, as everywhere in nn/); with
// n = tp.size() and T = n * t, rank r owns positions [r * t, (r + 1) * t): its slice is
// [B, t, ...]. `tp` is the tensor-parallel communicator; every call that communicates is
// collective over it and counts one all-gather or one reduce-scatter on it (the identity-like
// direction counts nothing). Dtypes: f32, bf16, f16 (the reduce-scatter sums 16-bit types in f32
// with the MPI backend; see comm/communicator.h); devices: the CPU, or CUDA with the backend's
// rules. With B > 1 the reduce-scatter first copies the input into a rank-major scratch
// [n, B, t, ...] (allocated per call on the input's device; device copies run on the legacy
// default stream, as comm/mappings.h's do).
//
// Errors: InvalidArgument, naming the mapping and the tensor, for views that are not contiguous,
// mismatched dtypes or devices, rank < 2, a sequence length not divisible by n, or shapes that do
// not fit; communicator errors are passed through.
#ifndef MT_COMM_SEQUENCE_PARALLEL_H_
#define MT_COMM_SEQUENCE_PARALLEL_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "comm/communicator.h"
#include "core/tensor.h"

namespace mt {
namespace comm {

// Forward: y_local [B, t, ...] <- positions [r t, (r + 1) t) of x [B, n t, ...] (no
// communication). Backward: dx [B, n t, ...] <- every rank's dy_local concatenated along T.
absl::Status ScatterToSequenceParallelRegionForward(Communicator& tp, const TensorView& x,
                                                    const TensorView& y_local);
absl::Status ScatterToSequenceParallelRegionBackward(Communicator& tp, const TensorView& dy_local,
                                                     const TensorView& dx);

// Forward: y [B, n t, ...] <- every rank's x_local [B, t, ...] concatenated along T.
// Backward: dx_local [B, t, ...] <- positions [r t, (r + 1) t) of the sum over ranks of dy.
absl::Status GatherFromSequenceParallelRegionForward(Communicator& tp, const TensorView& x_local,
                                                     const TensorView& y);
absl::Status GatherFromSequenceParallelRegionBackward(Communicator& tp, const TensorView& dy,
                                                      const TensorView& dx_local);

// Forward: y_local [B, t, ...] <- positions [r t, (r + 1) t) of the sum over ranks of x.
// Backward: dx [B, n t, ...] <- every rank's dy_local concatenated along T.
absl::Status ReduceScatterToSequenceParallelRegionForward(Communicator& tp, const TensorView& x,
                                                          const TensorView& y_local);
absl::Status ReduceScatterToSequenceParallelRegionBackward(Communicator& tp,
                                                           const TensorView& dy_local,
                                                           const TensorView& dx);

// Local (no communication): part [B, t, ...] <- positions [index t, (index + 1) t) of
// full [B, parts * t, ...]. 0 <= index < parts. InvalidArgument otherwise, naming `op`.
absl::Status SplitSequence(absl::string_view op, const TensorView& full, int index, int parts,
                           const TensorView& part);

}  // namespace comm
}  // namespace mt

#endif  // MT_COMM_SEQUENCE_PARALLEL_H_
