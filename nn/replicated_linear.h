// A linear layer whose weights are replicated on every tensor-parallel rank (no split, no
// communication): BERT's pooler, its MLM-head dense layer and its classification heads, which act
// on the replicated hidden stream. Every TP rank computes the same output and the same gradients.
//
// Weights are stored [in, out] (y = x W + b), like ColumnParallelLinear / RowParallelLinear:
// "<prefix>.weight" [in, out] N(0, init_std), "<prefix>.bias" [out] zeros (no weight decay), both
// with split_dim -1. Activations are 2-D [N, features] in the store's compute dtype; the caller
// owns them and keeps the forward input alive until Backward. The compute-dtype weights are read
// (ParameterStore::compute_value). Backward ACCUMULATES into the f32 parameter gradients (in f32)
// and overwrites dx, which is complete (no f all-reduce: the input and the weights are replicated).
// Errors: those of ops::Gemm / ops::BiasAdd for mismatched shapes (InvalidArgument).
#ifndef MT_NN_REPLICATED_LINEAR_H_
#define MT_NN_REPLICATED_LINEAR_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "nn/context.h"
#include "nn/linear.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {

class ReplicatedLinear {
 public:
  ReplicatedLinear() = default;
  // Declares "<prefix>.weight" [in, out] and, with Bias::kYes, "<prefix>.bias" [out].
  // InvalidArgument for non-positive sizes or a duplicate name.
  static absl::StatusOr<ReplicatedLinear> Create(ParameterStore* store, const std::string& prefix,
                                                 int64_t in, int64_t out, Bias bias,
                                                 double init_std);
  // x: [N, in]; y: [N, out].
  absl::Status Forward(const StepContext& sc, const TensorView& x, const TensorView& y) const;
  // dy: [N, out]; x: the forward input; dx: [N, in] (must not alias dy).
  absl::Status Backward(const StepContext& sc, const TensorView& x, const TensorView& dy,
                        const TensorView& dx);
  int64_t in() const { return in_; }
  int64_t out() const { return out_; }

 private:
  ParameterStore* store_ = nullptr;
  int weight_ = -1, bias_ = -1;
  int64_t in_ = 0, out_ = 0;
  Tensor bias_scratch_;
};

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_REPLICATED_LINEAR_H_
