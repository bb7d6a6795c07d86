// Sequence parallelism (Korthikanti et al. 2022) in nn/: the pieces a transformer layer and a model
// need besides the mappings (comm/sequence_parallel.h).
//
// With sequence parallelism (TP > 1) the residual stream between the tensor-parallel regions is
// split along the sequence: each TP rank holds [B, T / tp, H], positions [r T / tp, (r + 1) T / tp)
// of the full [B, T, H]. The LayerNorms, dropouts and residual adds run on that slice; the
// column-parallel input is all-gathered along the sequence and the row-parallel output
// reduce-scattered, instead of Megatron's f and g all-reduces.
//
//   SliceDropout          the dropout of a full [B, T, H] activation restricted to this rank's
//                         slice: each element keyed by its GLOBAL index, so the masks are those of
//                         the serial model whatever the TP degree.
//   SequenceParallelGrads the gradients of parameters replicated over the TP ranks but applied to
//                         one slice of the sequence (the norms' gains and biases): each rank's
//                         backward sees only its positions, so the parts are summed over TP (one
//                         all-reduce per region and micro-batch, on sc.tp).
//   GatherBuffers         [B, T, H] scratch shared by the layers of one stack: the gathered input
//   of
//                         the attention or MLP, their partial output, and the gradients of both.
//                         The layers store only their [B, T / tp, H] slices and gather again into
//                         the same memory in Backward, so activations in the sequence-parallel
//                         regions are divided by TP.
#ifndef MT_NN_SEQUENCE_PARALLEL_H_
#define MT_NN_SEQUENCE_PARALLEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "nn/context.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {

// `full`: the dropout of a [B, T, H] activation keyed contiguously from full.key_base (what
// StepContext::Dropout returns for sample_elems = T * H). Returns the same masks for this rank's
// slice [B, T / tp, H] (tp = sc.tp_size(); T divisible by it). At TP = 1: `full` unchanged.
ops::DropoutArgs SliceDropout(const StepContext& sc, const ops::DropoutArgs& full, int64_t T,
                              int64_t H);

class SequenceParallelGrads {
 public:
  // Parameters [first, end) of the store take part (call before the first Begin).
  void Add(int first, int end);
  bool empty() const { return handles_.empty(); }
  // Before the region's backward: moves the gradients accumulated so far aside and zeroes them.
  absl::Status Begin(const StepContext& sc, const ParameterStore& store);
  // After it: sums what the backward added over sc.tp (one all-reduce of all the parameters
  // together) and adds the gradients moved aside back. Without sc.tp: nothing to sum.
  absl::Status End(const StepContext& sc, const ParameterStore& store);

 private:
  // Copies every gradient into `flat` (to_flat) or `flat` into every gradient.
  absl::Status Pack(const StepContext& sc, const ParameterStore& store, const Tensor& flat,
                    bool to_flat) const;
  std::vector<int> handles_;
  Tensor saved_, summed_;  // f32 [elements of all the parameters]
};

// Transient [B, T, H] buffers (see the file comment), reallocated when the shape, dtype or device
// changes.
struct GatherBuffers {
  Tensor input;   // The gathered input of the attention or MLP (which keep a view of it).
  Tensor full_a;  // Their partial output (forward) or the gathered output gradient (backward).
  Tensor full_b;  // Their partial input gradient (backward).
  absl::Status Ensure(const ExecContext& ec, const Shape& shape, DType dtype);
  int64_t bytes() const { return input.nbytes() + full_a.nbytes() + full_b.nbytes(); }
};

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_SEQUENCE_PARALLEL_H_
